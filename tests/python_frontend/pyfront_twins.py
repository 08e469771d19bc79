"""Programs written twice, in Python here and in TDSL in `TDSL` (same names, same order of
operations), for the test that both compile to the same IR."""
import numpy as np

import adcompiler as adc


def mlp(x, W1, b1, W2):
    h = np.tanh(x @ W1 + b1)
    out = h @ W2
    return np.mean(out * out)


def loop(x, w):
    s = 0.0
    for i in range(4):
        s = s + np.sum(x[i] * w)
    return s


def two(x):
    return np.sin(x), np.cos(x)


def caller(x):
    a, b = two(x)
    return np.sum(a * b) + adc.ops.logsumexp(x)


def xent(z, y):
    m = np.max(z, axis=1, keepdims=True)
    p = np.exp(z - m)
    q = p / np.sum(p, axis=1, keepdims=True)
    return -np.mean(np.sum(y * np.log(q), axis=1)) + np.sum(z[:, ::2])


TDSL = {
    "mlp": ("""
def mlp(x: f64[5, 3], W1: f64[3, 4], b1: f64[4], W2: f64[4, 2]) -> f64 {
    h = tanh(x @ W1 + b1)
    out = h @ W2
    return mean(out * out)
}
""", (mlp, [(5, 3), (3, 4), (4,), (4, 2)])),
    "loop": ("""
def loop(x: f64[4, 3], w: f64[3]) -> f64 {
    s = 0.0
    for i in range(4) {
        s = s + sum(x[i] * w)
    }
    return s
}
""", (loop, [(4, 3), (3,)])),
    "caller": ("""
def two(x: f64[3]) -> (f64[3], f64[3]) {
    return sin(x), cos(x)
}
def caller(x: f64[3]) -> f64 {
    a, b = two(x)
    return sum(a * b) + logsumexp(x)
}
""", (caller, [(3,)])),
    "xent": ("""
def xent(z: f64[4, 6], y: f64[4, 6]) -> f64 {
    m = max(z, axis=1, keepdims=true)
    p = exp(z - m)
    q = p / sum(p, axis=1, keepdims=true)
    return -mean(sum(y * log(q), axis=1)) + sum(z[:, ::2])
}
""", (xent, [(4, 6), (4, 6)])),
}
