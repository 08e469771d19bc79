"""``adc check``: reverse-mode gradients against central finite differences in float64.

The objective is the sum of every element of every result, which is what the ones-seeded
adjoint program differentiates. Per element the error is
``|reverse - fd| / max(|reverse|, |fd|, ERROR_FLOOR)``: relative where gradients are
large, absolute (scaled by the floor) where they are near zero, so that an exact zero and
the finite-difference noise around it compare as equal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .compile import Compiled

ERROR_FLOOR = 1e-3


@dataclass
class InputCheck:
    name: str
    shape: tuple
    points: int
    max_abs: float
    max_rel: float
    ok: bool


def _objective(outputs) -> float:
    """Sum of every float result (integer and bool results carry no derivative)."""
    return float(sum(np.sum(np.asarray(o, dtype=np.float64)) for o in outputs
                     if np.asarray(o).dtype.kind == "f"))


def _points(size: int, max_points: int, rng) -> np.ndarray:
    """Flat indices to probe: all of them, or a seeded sample of `max_points`."""
    if max_points <= 0 or size <= max_points:
        return np.arange(size)
    return np.sort(rng.choice(size, max_points, replace=False))


def check_gradients(rev: Compiled, fwd: Compiled, inputs: dict, dims: dict, eps: float,
                    rtol: float, max_points: int = 0, seed: int = 0,
                    progress: Callable[[int, int], None] | None = None) -> list[InputCheck]:
    """Compare `rev`'s gradients with central differences of `fwd` on `inputs`;
    `progress(done, total)` is told of each probed element."""
    from adc_runtime.executor import run_function

    outs, _ = run_function(rev.module, rev.run_name, inputs, dims=dims)
    grads = dict(zip(rev.wrt, [np.asarray(g, dtype=np.float64) for g in outs[rev.n_results:]]))
    rng = np.random.default_rng(seed)

    def f(values: dict) -> float:
        return _objective(run_function(fwd.module, fwd.run_name, values, dims=dims)[0])

    rows = []
    probes = {name: _points(np.size(inputs[name]), max_points, rng) for name in rev.wrt}
    total, done = sum(len(idx) for idx in probes.values()), 0
    for name in rev.wrt:
        x = np.array(inputs[name], dtype=np.float64)
        idx = probes[name]
        fd = np.empty(len(idx))
        for k, i in enumerate(idx):
            plus, minus = x.copy(), x.copy()
            plus.flat[i] += eps
            minus.flat[i] -= eps
            fd[k] = (f({**inputs, name: plus}) - f({**inputs, name: minus})) / (2 * eps)
            done += 1
            if progress is not None:
                progress(done, total)
        got = grads[name].ravel()[idx]
        err = np.abs(got - fd)
        scale = np.maximum(np.maximum(np.abs(got), np.abs(fd)), ERROR_FLOOR)
        rel = err / scale if len(idx) else np.zeros(0)
        max_abs = float(err.max()) if len(idx) else 0.0
        max_rel = float(rel.max()) if len(idx) else 0.0
        ok = bool(np.all(np.isfinite(got)) and np.all(np.isfinite(fd)) and max_rel <= rtol)
        rows.append(InputCheck(name, x.shape, len(idx), max_abs, max_rel, ok))
    return rows
