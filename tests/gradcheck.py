"""Shared test helpers: build one-op programs, run them, and check derivatives against
central finite differences in float64."""
from __future__ import annotations

import numpy as np

from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import DTYPE_OF_NUMPY, TensorType
from adcompiler.passes.reverse import Reverse
from adc_runtime.executor import run_function


def _type_of(a: np.ndarray) -> TensorType:
    return TensorType(DTYPE_OF_NUMPY[a.dtype.name], a.shape)


def one_op_module(op: str, args: list[np.ndarray], attrs: dict | None = None,
                  list_operand: bool = False, weighted: bool = True) -> Module:
    """``f(a0, a1, ..., w) = sum(op(a0, a1, ...) * w)`` (each result weighted and summed).

    The random weight `w` makes the check cover the whole Jacobian, not just its column
    sums. With `list_operand` every arg is an element of the op's list operand (concat).
    """
    body = Block([_type_of(a) for a in args], [f"a{k}" for k in range(len(args))])
    b = Builder(body)
    outs = b.emit(op, *body.args, **(attrs or {}))
    outs = outs if isinstance(outs, list) else [outs]
    total = None
    for k, y in enumerate(outs):
        if not y.type.is_float:
            continue
        if weighted:
            w = body.add_arg(y.type, f"w{k}")
            y = b.emit("mul", y, w)
        s = b.emit("sum", y)
        total = s if total is None else b.emit("add", total, s)
    b.ret([total])
    fn = Function("f", body, [total.type],
                  params={f"a{k}" for k, a in enumerate(args) if a.dtype.kind == "f"})
    return Module({"f": fn})


def run(module: Module, fn: str, inputs: dict) -> list[np.ndarray]:
    outs, _ = run_function(module, fn, inputs)
    return outs


def weights_for(module: Module, rng) -> dict:
    f = module["f"]
    return {a.name: rng.standard_normal([int(d) for d in a.type.shape]).astype(np.float64)
            for a in f.args if a.name.startswith("w")}


def finite_difference(module: Module, inputs: dict, name: str, eps: float = 1e-6,
                      fn: str = "f") -> np.ndarray:
    """Central differences of the scalar `f` with respect to input `name`."""
    x = np.asarray(inputs[name], dtype=np.float64)
    grad = np.zeros_like(x, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        plus, minus = dict(inputs), dict(inputs)
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        plus[name], minus[name] = xp, xm
        grad[idx] = (run(module, fn, plus)[0] - run(module, fn, minus)[0]) / (2 * eps)
    return grad


def check_grads(op: str, args: list[np.ndarray], attrs: dict | None = None, *,
                wrt: list[int] | None = None, rtol: float = 1e-6, atol: float = 1e-7,
                seed: int = 0) -> dict:
    """Assert reverse-mode gradients of `op` match central differences; returns them."""
    rng = np.random.default_rng(seed)
    module = one_op_module(op, args, attrs)
    inputs = {f"a{k}": a for k, a in enumerate(args)}
    inputs.update(weights_for(module, rng))
    wrt = [k for k, a in enumerate(args) if a.dtype.kind == "f"] if wrt is None else wrt
    names = tuple(f"a{k}" for k in wrt)
    adj = Reverse(wrt=names, fn="f")(module)
    outs = run(adj, "f_grad", inputs)
    got = dict(zip(names, outs[1:]))
    for name in names:
        want = finite_difference(module, inputs, name)
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol,
                                   err_msg=f"d/d{name} of {op}{attrs or ''}")
        assert got[name].shape == inputs[name].shape
    return got


def check_second_order(op, args, attrs=None):
    """Reverse over reverse: d/da0 of the sum of ``f_grad``'s results (f = sum(op(...)))
    against central differences; the adjoints verify and print back as IR text."""
    m = Reverse(fn="f")(one_op_module(op, args, attrs, weighted=False))
    m = Reverse(fn="f_grad", wrt=("a0",))(m)
    from adcompiler.ir.parser import parse_module
    from adcompiler.ir.printer import print_module
    from adcompiler.ir.verifier import verify
    verify(m)
    text = print_module(m)
    assert print_module(parse_module(text)) == text
    inputs = {f"a{k}": a for k, a in enumerate(args)}
    got = run(m, "f_grad_grad", inputs)[-1]

    def total(x):
        return sum(float(np.sum(o)) for o in run(m, "f_grad", {**inputs, "a0": x}))
    want = np.zeros_like(args[0])
    for i in np.ndindex(args[0].shape):
        xp, xm = args[0].copy(), args[0].copy()
        xp[i] += 1e-6
        xm[i] -= 1e-6
        want[i] = (total(xp) - total(xm)) / 2e-6
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"d2/da0^2 of {op}")
