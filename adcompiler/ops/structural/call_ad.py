"""The derivatives of a ``call`` that survived inlining: the callee's ``grad`` rule
(reverse mode) or ``tangent`` rule (forward mode), which `adcompiler.passes.inline` keeps."""
from __future__ import annotations

from ...diagnostics import AdcError
from ...ir.builder import Builder
from ...ir.core import Module, Op, source_name
from ...passes.ad import zeros_like


def reverse(b: Builder, op: Op, out_cts: list, cts, module: Module) -> list:
    """A call that survived inlining has a ``grad`` rule: call it."""
    rule = module.rule_for(op.attrs["callee"], "grad")
    if rule is None:
        raise AdcError(f"call to '{source_name(op.attrs['callee'])}' was not inlined", op.loc)
    seeds = [c if c is not None else zeros_like(b, r) for c, r in zip(out_cts, op.results)]
    return b.call(rule, list(op.operands) + list(op.results) + seeds)


def forward(tb, op: Op, tans) -> None:
    """The call, then the callee's ``tangent`` rule called on its inputs and tangents."""
    tb.b.insert(op)
    tb.tangents(op, tans, lambda b, op, in_t: _tangent_rule(tb, op, in_t))


def _tangent_rule(tb, op: Op, in_t: list) -> list:
    callee = op.attrs["callee"]
    rule = tb.module.rule_for(callee, "tangent")
    if rule is None:
        name = source_name(callee)
        if tb.module.rule_for(callee, "grad") is not None:
            raise AdcError(f"forward mode cannot differentiate the call to '{name}': it "
                           f"has a grad rule but no tangent rule; add a rule "
                           f"'tangent {name}(inputs..., input tangents...)' that "
                           f"returns one tangent per result", op.loc)
        raise AdcError(f"call to '{name}' was not inlined", op.loc)
    seeds = [t if t is not None else zeros_like(tb.b, v)
             for t, v in zip(in_t, op.operands)]
    return tb.b.call(rule, list(op.operands) + seeds)
