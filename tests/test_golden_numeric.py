"""The derivative programs of the golden files, run: each expected module of the reverse,
jvp, hvp, remat, batch and train-step folders (`test_golden.py` checks its text) computes
what it claims, checked another way in float64:

* an adjoint (``adjoint_of``): each gradient against central differences of the sum of the
  primal's results (every result is seeded with ones);
* a tangent program (``tangent_program_of``): each tangent against central differences of
  the primal along the input tangents;
* an ``hvp`` function: against central differences of the module's gradient function;
* a batched function (``batch_of``): against the primal run on one example at a time;
* a training step (``train_step_of``, SGD): each new parameter against the parameter minus
  the learning rate times its gradient by central differences of the loss.
"""
from __future__ import annotations

import numpy as np
import pytest

from adcompiler.api.program import run
from adcompiler.ir.parser import parse_module

from test_golden import CASES

FOLDERS = {"reverse", "jvp", "hvp", "remat", "batch", "train-step"}
NUMERIC = [c for c in CASES if c.path.parent.name in FOLDERS and c.expected]
EPS, TOL = 1e-6, 1e-6
SYMBOL_SIZE = 2  # a symbolic dimension (the batch axis N) takes this size


def _inputs(fn, rng) -> dict[str, np.ndarray]:
    shape = lambda t: tuple(d if isinstance(d, int) else SYMBOL_SIZE for d in t.shape)  # noqa: E731
    return {a.name: rng.uniform(0.5, 1.5, shape(a.type)) if a.type.is_float
            else np.zeros(shape(a.type), dtype=np.int64) for a in fn.args}


def _along(m, fn: str, inputs: dict, direction: dict) -> list[np.ndarray]:
    """Central differences of `fn`'s results along `direction` (a dict of input arrays)."""
    def at(sign):
        moved = {k: v + sign * EPS * direction[k] if k in direction else v
                 for k, v in inputs.items()}
        return [np.asarray(r, dtype=np.float64) for r in run(m, fn, moved)]
    return [(p - q) / (2 * EPS) for p, q in zip(at(1), at(-1))]


def _gradient(m, fn: str, inputs: dict, wrt: str, weights=None) -> np.ndarray:
    """d/d(wrt) of the sum of `fn`'s float results, by central differences."""
    out = np.zeros_like(inputs[wrt])
    for k in np.ndindex(out.shape):
        e = np.zeros_like(out)
        e[k] = 1.0
        out[k] = sum(float(np.sum(d)) for d in _along(m, fn, inputs, {wrt: e}))
    return out


def check_adjoint(m, f, rng):
    primal, wrt = f.attrs["adjoint_of"], list(f.attrs["wrt"])
    x = _inputs(m[primal], rng)
    outs = run(m, f.name, x)
    n = len(m[primal].result_types)
    for w, g in zip(wrt, outs[n:]):
        np.testing.assert_allclose(g, _gradient(m, primal, x, w), rtol=TOL, atol=TOL)


def _run_along(m, f, primal: str, rng):
    """Run `f`, which takes `primal`'s inputs then one direction per differentiated input,
    on random inputs and directions; returns the inputs, the directions (by input name),
    and `f`'s results after the primal's."""
    x = _inputs(m[primal], rng)
    t = {w: rng.standard_normal(x[w].shape) for w in f.attrs["wrt"]}
    t_args = [a.name for a in f.args[len(m[primal].args):]]
    outs = run(m, f.name, {**x, **dict(zip(t_args, t.values()))})
    return x, t, outs[len(m[primal].result_types):]


def check_tangent(m, f, rng):
    primal = f.attrs["tangent_program_of"]
    x, t, tangents = _run_along(m, f, primal, rng)
    for got, want in zip(tangents, _along(m, primal, x, t)):
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def check_hvp(m, f, rng):
    primal = f.attrs["hvp_of"]
    x, v, outs = _run_along(m, f, primal, rng)  # the gradients, then the hvps
    n = len(m[primal].result_types)
    grads = _along(m, f"{primal}_grad", x, v)[n:]  # the gradient's change along v
    for got, want in zip(outs[len(v):], grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def check_batched(m, f, rng):
    primal, batched = f.attrs["batch_of"], set(f.attrs["batched"])
    x = _inputs(f, rng)
    outs = run(m, f.name, x)
    size = next(x[a].shape[0] for a in batched)
    for k in range(size):
        one = run(m, primal, {a: v[k] if a in batched else v for a, v in x.items()})
        for got, want in zip(outs, one):
            np.testing.assert_allclose(np.asarray(got)[k], want, rtol=1e-12, atol=1e-12)


def check_train_step(m, f, rng):
    primal, params = f.attrs["train_step_of"], list(f.attrs["params"])
    outputs = list(f.attrs["outputs"])
    x = _inputs(f, rng)
    outs = run(m, f.name, x)
    lr = float(outs[outputs.index("lr")])
    loss_in = {k: v for k, v in x.items() if k in m[primal].arg_names}
    for p in params:
        want = x[p] - lr * _gradient(m, primal, loss_in, p)
        np.testing.assert_allclose(outs[outputs.index(p)], want, rtol=TOL, atol=TOL)


CHECKS = {"adjoint_of": check_adjoint, "tangent_program_of": check_tangent,
          "hvp_of": check_hvp, "batch_of": check_batched, "train_step_of": check_train_step}


@pytest.mark.parametrize("case", NUMERIC, ids=[c.id for c in NUMERIC])
def test_golden_derivatives_are_right(case):
    m = parse_module(case.expected, str(case.path))
    rng = np.random.default_rng(0)
    checked = 0
    for f in m.functions.values():
        for attr, check in CHECKS.items():
            if attr in f.attrs:
                check(m, f, rng)
                checked += 1
    assert checked, "the expected module holds no derivative function to check"


def test_every_derivative_folder_is_checked():
    assert {c.path.parent.name for c in NUMERIC} == FOLDERS
