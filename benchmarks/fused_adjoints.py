"""Softmax's and layernorm's adjoints as the compiled executor runs them (one NumPy call per
IR op, each into its own buffer) against one function per adjoint that makes the same
calls through one or two buffers (the same bits; the script checks), at 1 BLAS thread:

    python benchmarks/fused_adjoints.py

Shapes: the attention workload's (128, 128) and the transformer block's (2, 4, 128, 128)
probabilities; the transformer block's (2, 128, 256) layernorm input. Times are the least of
9 blocks of 50 calls, CPU time. Softmax's adjoint is also timed in blocks of 64 rows (each
block's data stays in the cache, at the price of a Python loop)."""
from __future__ import annotations

import time

import numpy as np

mul, add, sub, red = np.multiply, np.add, np.subtract, np.add.reduce


def best(f, n=50) -> float:
    """The least of 9 blocks of `n` calls, microseconds of CPU time per call."""
    out = 1e9
    for _ in range(9):
        t0 = time.process_time()
        for _ in range(n):
            f()
        out = min(out, (time.process_time() - t0) / n * 1e6)
    return out


def softmax_adjoint(shape, rng) -> str:
    dp = rng.standard_normal(shape).astype(np.float32)
    p = rng.random(shape).astype(np.float32)
    b1, b3, b4 = (np.empty(shape, np.float32) for _ in range(3))
    b2 = np.empty(shape[:-1] + (1,), np.float32)
    out = np.empty(shape, np.float32)

    def ops():   # mul, sum(axis=-1, keepdims), sub, mul: the reverse pass's ops
        mul(dp, p, out=b1)
        red(b1, axis=-1, keepdims=True, out=b2)
        sub(dp, b2, out=b3)
        return mul(p, b3, out=b4)

    def one(d=dp, q=p, o=out):
        mul(d, q, out=o)
        s = red(o, axis=-1, keepdims=True)
        sub(d, s, out=o)
        return mul(q, o, out=o)

    rows = int(np.prod(shape[:-1]))
    d2, p2, o2 = (a.reshape(rows, shape[-1]) for a in (dp, p, out))

    def blocked():
        for i in range(0, rows, 64):
            one(d2[i:i + 64], p2[i:i + 64], o2[i:i + 64])

    want = ops().tobytes()
    assert one().tobytes() == want and (blocked() or out).tobytes() == want
    return (f"softmax adjoint {shape}: ops {best(ops):.1f} us, one function "
            f"{best(one):.1f} us, 64-row blocks {best(blocked):.1f} us")


def layernorm_adjoint(shape, rng) -> str:
    x = rng.standard_normal(shape).astype(np.float32)
    dh = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape[-1]).astype(np.float32)
    eps, n = np.float32(1e-5), np.intp(shape[-1])
    big = [np.empty(shape, np.float32) for _ in range(12)]
    small = [np.empty(shape[:-1] + (1,), np.float32) for _ in range(6)]

    def mean(a, out):
        red(a, axis=-1, keepdims=True, out=out)
        return np.true_divide(out, n, out=out, casting="unsafe")

    def rstd(c, sq, k):   # mean of squares, + eps, 1 / sqrt
        v = mean(mul(c, c, out=sq), small[k])
        add(v, eps, out=small[2])
        np.sqrt(small[2], out=small[3])
        return np.divide(1, small[3], out=small[3])

    def ops():   # the reverse pass's ops, each into its own buffer
        c = sub(x, mean(x, small[0]), out=big[0])
        r = rstd(c, big[1], 1)
        xh = mul(c, r, out=big[2])
        dg = mul(dh, g, out=big[3])
        t2 = mul(xh, mean(mul(dg, xh, out=big[4]), small[4]), out=big[5])
        t4 = sub(sub(dg, mean(dg, small[5]), out=big[6]), t2, out=big[7])
        return mul(r, t4, out=big[8])

    def one():   # the same calls through three buffers
        o, u, w = big[9], big[10], big[11]
        sub(x, mean(x, small[0]), out=o)
        r = rstd(o, u, 1)
        mul(o, r, out=o)
        mul(dh, g, out=u)
        mul(o, mean(mul(u, o, out=w), small[4]), out=w)
        sub(u, mean(u, small[5]), out=u)
        sub(u, w, out=u)
        return mul(r, u, out=u)

    want = ops().copy().tobytes()
    assert one().tobytes() == want
    return f"layernorm adjoint {shape}: ops {best(ops):.1f} us, one function {best(one):.1f} us"


def main() -> None:
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    rng = np.random.default_rng(0)
    for shape in ((128, 128), (2, 4, 128, 128)):
        print(softmax_adjoint(shape, rng))
    print(layernorm_adjoint((2, 128, 256), rng))


if __name__ == "__main__":
    main()
