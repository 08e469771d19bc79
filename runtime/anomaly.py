"""Anomaly detection: stop at the first op whose result holds a NaN or an Inf.

`AnomalyExecutor` is an `Executor` that checks every result after its op has run, so the
error names the op that made the value, at the source line it came from (adjoint ops carry
their primal op's location), and which of its operands were already non-finite. The plain
`Executor` has no such check: detection costs nothing when it is off.

`nonfinite(a)` is the one check, shared with callers that only want a cheap look at a
result ("does this loss hold a NaN?").
"""
from __future__ import annotations

import numpy

from .executor import Executor, RunError
from .liveness import borrows_args


def nonfinite(a, xp=numpy) -> str | None:
    """``"NaN"``, ``"+Inf"`` or ``"-Inf"``: the first kind of non-finite element `a` holds
    (NaN first), or None when every element is finite or `a` is not a float array."""
    if getattr(a, "dtype", None) is None or a.dtype.kind not in "fc":
        return None
    if bool(xp.isfinite(a).all()):
        return None
    if bool(xp.isnan(a).any()):
        return "NaN"
    return "+Inf" if bool((a == xp.inf).any()) else "-Inf"


def _first_index(a, xp) -> tuple:
    flat = int(xp.argmax(~xp.isfinite(a).reshape(-1))) if a.ndim else 0
    return tuple(int(i) for i in numpy.unravel_index(flat, a.shape)) if a.ndim else ()


def _values_at(operands: list, shape: tuple, idx: tuple) -> str:
    """`` (there: 0.5, 0)``: the operands at the result's index `idx`, for elementwise ops
    (operands that broadcast to the result's shape); empty for the others."""
    try:
        vals = [numpy.broadcast_to(numpy.asarray(a.get() if hasattr(a, "get") else a),
                                   shape)[idx] for a in operands]
    except ValueError:
        return ""
    return f" (operands there: {', '.join(f'{float(v):.6g}' for v in vals)})" if vals else ""


def _name(v, k: int) -> str:
    return f"operand {k} ({'%' + v.name if v.name else 'unnamed'})"


def _cone(fn, values) -> set:
    """The top-level ops of `fn` that `values` depend on."""
    todo = list(values)
    seen: set = set()
    while todo:
        op = todo.pop().defining_op
        if op is None or op in seen:
            continue
        seen.add(op)
        todo.extend(op.operands)
        for inner in op.walk():  # values a loop body captures from outside
            todo.extend(v for v in inner.operands if v.defining_op is not None
                        and v.defining_op.parent is fn.body)
    return seen


def _sweeps(fn) -> tuple:
    """(forward ops, adjoint ops) of an adjoint program (``wrt`` attribute: the loss, then
    the gradients) or of a training step (``train_step_of``: the values ``grad_<param>``);
    (None, None) for any other function, all of whose ops are forward."""
    attrs = getattr(fn, "attrs", None) or {}
    returned = fn.body.ops[-1].operands
    if "train_step_of" in attrs:
        names = {f"grad_{p}" for p in attrs.get("params", ())}
        grads = [r for op in fn.body.ops for r in op.results if r.name in names]
    elif "wrt" in attrs or fn.name.endswith("_grad"):
        grads = returned[1:]
    else:
        return None, None
    forward = _cone(fn, returned[:1])
    return forward, _cone(fn, grads) - forward


class AnomalyExecutor(Executor):
    """An `Executor` that raises `RunError` at the first op whose result is not finite.

    `sweep(op)` says where an op of an adjoint program belongs: ``"forward"`` or
    ``"adjoint"``; it is worked out per function on first use."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._sweeps: dict[int, tuple] = {}  # id(function) -> (forward ops, adjoint ops)
        self._top: dict = {}                 # op -> its function and top-level ancestor op

    def call(self, fn, arrays: list, borrowed: frozenset = frozenset()) -> list:
        for arg, a in zip(() if borrows_args(fn) else fn.args, arrays):  # (checked already)
            kind = nonfinite(a, self.xp)
            if kind is not None:
                raise RunError(f"anomaly: input '{arg.name}' of '{fn.name}' holds {kind} "
                               f"(first at index {_first_index(a, self.xp)})", fn.loc)
        if id(fn) not in self._sweeps:
            self._sweeps[id(fn)] = _sweeps(fn)
            for top in fn.body.ops:
                for op in top.walk():
                    self._top[op] = (fn, top)
        with numpy.errstate(all="ignore"):  # the check below reports what NumPy would warn
            return super().call(fn, arrays, borrowed)

    def sweep(self, op) -> str:
        """``forward``, ``recomputed forward``, ``adjoint`` or (in a training step) the
        ``update`` after the gradients are final."""
        fn, top = self._top.get(op, (None, None))
        forward, adjoint = self._sweeps.get(id(fn), (None, None))
        if forward is None or top in forward:
            return "recomputed forward" if op.attrs.get("recompute") else "forward"
        return "adjoint" if top in adjoint else "update"

    def run_op(self, op, env) -> list:
        outs = super().run_op(op, env)
        if op.name in ("for", "repeat", "fused", "call"):
            return outs  # their inner ops were checked as they ran
        for k, r in enumerate(outs):
            kind = nonfinite(r, self.xp)
            if kind is not None:
                raise RunError(self._message(op, env, k, r, kind), op.loc)
        return outs

    def _message(self, op, env, k: int, r, kind: str) -> str:
        bad = [(_name(v, j), nonfinite(env[v], self.xp))
               for j, v in enumerate(op.operands) if v in env]
        bad = [f"{name} holds {what}" for name, what in bad if what is not None]
        idx = _first_index(r, self.xp)
        cause = "; ".join(bad) if bad else "from finite operands" + _values_at(
            [env[v] for v in op.operands if v in env], r.shape, idx)
        which = f" result {k}" if len(op.results) > 1 else ""
        where = f" (first at index {idx})" if r.ndim else ""
        return (f"anomaly: '{op.name}'{which} in the {self.sweep(op)} sweep produced {kind}"
                f"{where}, {cause}")
