"""Calls of other Python functions from a compiled function (a mixin of the lowerer).

The callee is parsed the same way and lowered as a function of its own, specialized on what
the call passes: the types of its run-time arguments and the values of the others (so a
helper called with ``n=3`` and with ``n=4`` is two functions). The call is a TDSL call of
that function; ``a, b = f(x)`` is a TDSL assignment of its two results.
"""
from __future__ import annotations

import ast as py
import inspect

from ..tdsl import ast
from . import pytree
from .signature import Leaf, ParamSpec
from .values import Tensor


class Slot:
    """Result `k` of a compiled function, in the structure of what it returns."""

    def __init__(self, k: int):
        self.k = k

    def __repr__(self) -> str:
        return f"Slot({self.k})"


ASSIGNED = object()   # `python_call` made the assignment itself


class CalleeCalls:
    pending_targets = None    # (call node, [(name, span)]) of ``a, b = f(...)``

    def multi_assign(self, target, value_node) -> bool:
        """``a, b = f(...)`` with `f` a Python function giving two arrays: one TDSL
        assignment of the call's results (as TDSL writes it)."""
        if not isinstance(value_node, py.Call) or not all(
                isinstance(t, py.Name) for t in target.elts):
            return False
        names = [(t.id, self.src.span(t)) for t in target.elts]
        if len({n for n, _ in names}) != len(names):
            return False
        self.pending_targets = (value_node, names)
        try:
            value = self.pyval(value_node)
        finally:
            self.pending_targets = None
        if value is not ASSIGNED:
            self.bind_target(target, value, value_node)
        return True

    def python_call(self, f, args: list, kwargs: dict, node: py.Call):
        try:
            bound = inspect.signature(f).bind(*args, **kwargs)
        except TypeError as e:
            raise self.src.error(f"{f.__name__}(): {e}", node) from None
        except ValueError:
            raise self.src.error(f"adc cannot see the signature of '{f.__name__}'",
                                 node) from None
        bound.apply_defaults()
        specs, exprs = [], []
        for name, v in bound.arguments.items():
            leaves, tree = pytree.flatten(v)
            out = []
            for x in leaves:
                if isinstance(x, Tensor):
                    out.append(Leaf(self.tensor_type(x, node)))
                    exprs.append(x.expr)
                else:
                    out.append(Leaf(value=x, kind=type(x)))
            specs.append(ParamSpec(name, tree, tuple(out)))
        spec = self.unit.specialize(f, specs, self.src.loc(node.func))
        self.calls.append((spec.name, self.src.loc(node.func)))
        n = len(spec.fn.result_types)
        if n == 0:
            return spec.template
        span = self.src.span(node)
        call = ast.Call(spec.name, exprs, [], span, self.callee_span(node.func))
        if n == 1 and isinstance(spec.template, Slot):
            return Tensor(call)
        pending = self.pending_targets
        t = spec.template
        if pending is not None and pending[0] is node and isinstance(t, tuple) and \
                len(t) == len(pending[1]) == n and all(isinstance(s, Slot) for s in t):
            targets = [ast.Target(name, s) for name, s in pending[1]]
            for name, _ in pending[1]:
                self.statics.pop(name, None)
                self.alias.pop(name, None)
            ordered = [targets[pos] for pos in sorted(range(n), key=lambda p: t[p].k)]
            self.lower_stmt(ast.Assign(ordered, call, span))
            return ASSIGNED
        temps = [self.fresh(f"{f.__name__}_{k}") for k in range(n)]
        self.stable.update(temps)
        self.lower_stmt(ast.Assign([ast.Target(x, span) for x in temps], call, span))
        return _fill(t, [Tensor(ast.Name(x, span)) for x in temps])


def _fill(template, results):
    leaves, tree = pytree.flatten(template)
    return pytree.unflatten(tree, [results[x.k] if isinstance(x, Slot) else x
                                   for x in leaves])

