"""Row passes on and off: small programs whose time goes to log-softmax, cross-entropy,
the exact GELU, rmsnorm and batchnorm, each made twice in one process (``ADC_FUSE=0``: the
table kernels and every adjoint op its NumPy call; ``ADC_FUSE=1``: row passes from the
first call) and timed in turns at 1 BLAS thread, CPU time, the least of 9 blocks:

    python benchmarks/row_passes.py

The outputs are compared too: the same bits, but for programs with rmsnorm, whose forward
row pass is within a rounding bound of its table kernel (`adc_runtime.row_norms`; "within
1e-5": every output within that relative difference)."""
from __future__ import annotations

import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

import adcompiler as adc

CASES = {
    "cross_entropy + log_softmax (2048, 256)": ("""
def f(z: f32[R, C], y: i64[R]) -> f32 {
    return mean(cross_entropy(z, y)) + mean(log_softmax(z, axis=-1) * z)
}""", dict(R=2048, C=256), ["z"]),
    "gelu, exact (2, 128, 1024)": ("""
def f(x: f32[B, T, F]) -> f32 { return mean(gelu(x) * x) }""", dict(B=2, T=128, F=1024), ["x"]),
    "rmsnorm (2, 128, 256)": ("""
def f(x: f32[B, T, D], g: f32[D], c: f32[B, T, D]) -> f32 {
    return mean(rmsnorm(x, g) * c)
}""", dict(B=2, T=128, D=256), ["x", "g"]),
    "batchnorm (64, 32, 8, 8)": ("""
def f(x: f32[B, C, H, W], g: f32[C], b: f32[C], c: f32[B, C, H, W]) -> f32 {
    return mean(batchnorm(x, g, b) * c)
}""", dict(B=64, C=32, H=8, W=8), ["x", "g"]),
}


def inputs(fn, dims, rng) -> dict:
    out = {}
    for a in fn.args:
        shape = tuple(d if isinstance(d, int) else dims[d] for d in a.type.shape)
        if a.type.dtype == "i64":
            out[a.name] = rng.integers(0, dims["C"], shape)
        else:
            out[a.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def best(f, n: int = 20) -> float:
    out = 1e9
    for _ in range(9):
        t0 = time.process_time()
        for _ in range(n):
            f()
        out = min(out, (time.process_time() - t0) / n * 1e3)
    return out


def main() -> None:
    threadpool_limits(1)
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| program | step | ADC_FUSE=0 ms | ADC_FUSE=1 ms | same bits |")
    print("|---|---|---:|---:|---|")
    for name, (src, dims, wrt) in CASES.items():
        module = adc.parse_tdsl(src)
        args = inputs(module["f"], dims, rng)
        made = {}
        for flag in ("0", "1"):
            os.environ["ADC_FUSE"] = flag
            grad = adc.value_and_grad(module, "f", wrt=wrt, dims=dims)
            fwd = adc.function(module, "f", dims=dims)
            made[flag] = (grad, fwd, grad(**args), fwd(**args))   # executors made now
        os.environ.pop("ADC_FUSE")
        for step, k in (("grad", 0), ("forward", 1)):
            a, b = made["0"][2 + k], made["1"][2 + k]
            flat = lambda r: [np.asarray(v) for v in (  # noqa: E731
                [r[0], *r[1]] if k == 0 else [r])]
            pairs = list(zip(flat(a), flat(b)))
            same = "yes" if all(x.tobytes() == y.tobytes() for x, y in pairs) else (
                "within 1e-5" if all(np.allclose(x, y, rtol=1e-5, atol=0) for x, y in pairs)
                else "no")
            times = {}
            for _ in range(2):   # in turns
                for flag in ("0", "1"):
                    run = made[flag][k]
                    t = best(lambda: run(**args))
                    times[flag] = min(times.get(flag, t), t)
            print(f"| {name} | {step} | {times['0']:.3f} | {times['1']:.3f} | {same} |")


if __name__ == "__main__":
    main()
