"""State inputs (tdsl.md section 9): ``state NAME: TYPE`` (optionally ``= NUMBER``, its
initial value, default 0) marks an input that a training step reads and replaces without
differentiating it, such as a running statistic of batch normalization.

Its new value is whatever the name is bound to at the ``return``: the function gets one
result per state input after the declared ones, each behind ``stop_gradient``, and
``attrs["state"]`` names them (``attrs["state_init"]``: their initial values). So the body
updates a state as PyTorch code updates a buffer, ``mean = 0.9 * mean + 0.1 * m``, and no
gradient flows through the update.
"""
from __future__ import annotations

from ...ir.core import Function
from . import ast


def declare_state(d: ast.FuncDef, fn: Function, defs, error, decls=()) -> None:
    """Give `fn` the results and attributes of the state inputs of `d`: those declared
    ``state`` and the state fields of its group inputs (`decls`, ``bn.mean``), in input
    order."""
    names = [p for p in d.params if p.is_state]
    fields = {n: v for dc in decls for n, v in dc.state.items()}
    if not names and not fields:
        return
    for r in defs:
        if isinstance(r, ast.RuleDef) and r.name == d.name:
            raise error(f"function '{d.name}' has state inputs and cannot have a {r.kind} "
                        f"rule", r.name_span)
    for p in names:
        if p.name not in fn.arg_names:
            raise error(f"state input '{p.name}' must be a tensor, not a group", p.span)
    init = {**{p.name: p.init for p in names}, **fields}
    order = [n for n in fn.arg_names if n in init]
    fn.result_types = list(fn.result_types) + [fn.arg(n).type for n in order]
    fn.attrs["state"] = tuple(order)
    fn.attrs["state_init"] = {n: init[n] for n in order}


def declared_results(fn: Function) -> list:
    """The result types the ``return`` gives: those before the state results."""
    n = len(fn.attrs.get("state", ()))
    return list(fn.result_types[:len(fn.result_types) - n])


def state_results(lowerer, span) -> list:
    """The new value of each state input of the function being lowered: its binding at the
    return, converted to the input's type, behind ``stop_gradient``."""
    fn, out = lowerer.fn, []
    for name in fn.attrs.get("state", ()):
        t = fn.arg(name).type
        binding = lowerer.scope.lookup(name)
        if binding is None:   # a group's state field: its leaf in the group bound now
            binding = lowerer.state_field(name)
        v = lowerer.to_type(binding.value, t)
        if v.type != t:
            raise lowerer.error(f"state '{name}' is {t}, but the function binds it to "
                                f"{v.type}", binding.span)
        lowerer.b.loc = lowerer.loc(span)
        out.append(lowerer.b.emit("stop_gradient", v))
    return out
