"""Python functions for the tests of the transforms (`test_pyfront_transforms`)."""
import numpy as np


def mlp_loss(params, x, y):
    h = np.tanh(x @ params["W1"] + params["b1"])
    out = h @ params["W2"]
    return np.mean((out - y) ** 2)


def with_aux(w, x):
    pred = x @ w
    return np.sum(pred ** 2), {"pred": pred, "norm": np.sqrt(np.sum(w * w))}


def powered(x, n):
    y = x
    for _ in range(n):
        y = y * x
    return np.sum(y)


def two_outputs(x):
    return np.sin(x) * 2.0, np.sum(x ** 3)


def elementwise(x):
    return np.tanh(x) * x
