"""A training step whose time is its Adam update, with the update's 13 elementwise ops as
NumPy calls into planned buffers (``fuse=False``) and as one numba loop per parameter
(``fuse=True``, `adc_runtime.fused_runs`), at 1 BLAS thread:

    python benchmarks/fused_update.py

The loss ``sum(x * w)`` of one f32 parameter of N elements has the gradient ``x``: the
step is the update, the gradient norm and a little more. Times are the least of 9 blocks
of calls, CPU time, microseconds per step; "same bits" compares the parameters and the
state after the timed steps of both (each from the same start, the same number of steps).
"""
from __future__ import annotations

import numpy as np
from fused_adjoints import best  # the least of 9 blocks, us of CPU time per call

import adcompiler as adc
from adc_runtime.threads import blas_threads

SIZES = (32, 4096, 65536, 1 << 20)


def timed(n_elems: int, fuse: bool):
    src = (f"def f(x: f32[{n_elems}], param w: f32[{n_elems}]) -> f32 {{\n"
           "    return sum(x * w)\n}\n")
    step = adc.train_step(src, adc.optim.adam(1e-3), fuse=fuse)
    rng = np.random.default_rng(0)
    held = {"params": {"w": rng.standard_normal(n_elems).astype(np.float32)}}
    held["state"] = step.init(held["params"])
    batch = {"x": rng.standard_normal(n_elems).astype(np.float32)}

    def one():
        held["params"], held["state"], _ = step(held["params"], held["state"], batch)
    one()
    calls = max(3, min(2000, 20_000_000 // (n_elems * 40 + 200_000)))
    us = best(one, calls)
    return us, {**held["params"], **held["state"]}


def main() -> None:
    print("| elements | NumPy calls us | fused loop us | NumPy / fused | same bits |")
    print("|---:|---:|---:|---:|---|")
    with blas_threads(1):
        for n in SIZES:
            plain, a = timed(n, False)
            fused, b = timed(n, True)
            same = all(a[k].tobytes() == b[k].tobytes() for k in a)
            print(f"| {n:,} | {plain:.1f} | {fused:.1f} | {plain / fused:.2f} | {same} |")


if __name__ == "__main__":
    main()
