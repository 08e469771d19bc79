"""Forward mode: a function ``f`` becomes its tangent program ``f_jvp``.

``f_jvp`` takes ``f``'s inputs followed by one tangent per differentiated input, named
``t_<input>`` (underscores are prepended, ``_t_<input>``, ``__t_<input>``..., should that
name be taken), and returns ``f``'s results followed by one tangent per result (an
integer result's tangent is zeros). Its body is the primal program with each op followed
by its tangent ops:

* tangents live in an environment keyed by value; a missing entry is a symbolic zero, for
  which no work is emitted; only active values (`activity.analyze_activity`) get tangents;
* each op's JVP rule comes from the registry; an op with the ``linear`` trait and no rule
  is its own JVP (it is applied to the tangents, zeros standing in for missing ones);
  this driver alone broadcasts a tangent to its value's shape and casts it to its dtype;
* a structural op emits itself and its tangents by its `forward` rule
  (`adcompiler.ops.structural`): a call that survived inlining calls the callee's
  ``tangent`` rule (a callee with only a ``grad`` rule is an error, since a VJP cannot be
  run forwards); a ``for`` loop becomes one loop carrying primal and tangent values side
  by side: its carries are the primal carries, then the tangents of the active carries;
  its sliced inputs are the primal ones, then the tangents of the active ones; it yields
  the primal per-iteration outputs, then the tangents of those that have one.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.builder import Builder
from ..ir.core import Function, Module, Op, Value
from ..ops import registry
from .activity import analyze_activity
from .ad import ADPass, resolve_wrt, zeros_like
from .clone import clone_function
from .inline import Inline
from .pipeline import register_pass


def tangent_name(name: str, taken) -> str:
    """``t_<name>``, with leading underscores added until it is not in `taken`."""
    out = f"t_{name}"
    while out in taken:
        out = "_" + out
    return out


class Tangents:
    """The tangent environment of one block; a nested block sees its parents' entries."""

    def __init__(self, b: Builder, parent: "Tangents | None" = None):
        self.b, self.parent, self.t = b, parent, {}

    def get(self, v: Value) -> Value | None:
        t = self.t.get(v)  # an entry is never None
        if t is None and self.parent is not None:
            return self.parent.get(v)
        return t

    def get_or_zeros(self, v: Value) -> Value:
        t = self.get(v)
        return t if t is not None else zeros_like(self.b, v)

    def set(self, v: Value, t: Value | None) -> None:
        if t is None or not v.type.is_float:
            return
        if t.type is not v.type:  # (most tangents share their value's type object)
            if t.type.shape != v.type.shape:
                t = self.b.emit("broadcast_to", t, shape=v.type.shape)
            if t.type.dtype != v.type.dtype:
                t = self.b.emit("cast", t, dtype=v.type.dtype)
        self.t[v] = t


class TangentBuilder:
    """Moves the ops of a cloned function into place, each followed by its tangent ops.

    `active` holds values of the clone as it was analysed; `subst` maps a value that was
    replaced (a loop's results and block arguments) to its replacement, so later ops read
    the new values. Tangents are keyed by the new values.
    """

    def __init__(self, b: Builder, module: Module, active: set[Value]):
        self.b, self.module, self.active, self.subst = b, module, active, {}

    def ops(self, ops: list[Op], tans: Tangents) -> None:
        b, subst, structural_ops = self.b, self.subst, registry.STRUCTURAL
        for op in ops:
            if subst:  # empty until a loop replaced values
                op.operands = [subst.get(v, v) for v in op.operands]
            structural = structural_ops.get(op.name)
            if structural is not None and structural.forward is not None:
                structural.forward(self, op, tans)  # emits the op (or its replacement)
                continue
            b.insert(op)
            self.tangents(op, tans, apply_jvp)

    def tangents(self, op: Op, tans: Tangents, rule) -> None:
        """Emit the tangents of `op`'s active results, ``rule(b, op, in_tangents)``."""
        active = self.active
        if active.isdisjoint(op.results):
            return
        get = tans.t.get if tans.parent is None else tans.get  # a function's own block: a dict
        in_t = list(map(get, op.operands))
        if not any(in_t):  # every tangent a symbolic zero (a Value is never false)
            return
        out_t = self.b.located(op.loc, rule, self.b, op, in_t)
        for r, t in zip(op.results, out_t):
            if r in active:
                tans.set(r, t)


def apply_jvp(b: Builder, op: Op, in_t: list) -> list:
    """One tangent per result of `op` (``None``: zero) from one per operand."""
    opdef = registry.REGISTRY.get(op.name) or registry.get(op.name)
    if opdef.jvp is not None:
        out = opdef.jvp(b, op, in_t)
    elif opdef.has("no_grad") or opdef.has("constructor"):
        return [None] * len(op.results)
    elif opdef.has("linear"):
        out = linear_jvp(b, op, in_t)
    else:
        raise AdcError(f"op '{op.name}' has no forward-mode rule", op.loc)
    if type(out) is not list:
        out = [out] if isinstance(out, Value) or out is None else list(out)
    if len(out) != len(op.results):
        raise AssertionError(f"JVP of {op.name} returned {len(out)} tangents "
                             f"for {len(op.results)} results")
    return out


def linear_jvp(b: Builder, op: Op, in_t: list) -> list:
    """A linear op applied to its operands' tangents; integer operands (indices) are kept."""
    args = [(t if t is not None else zeros_like(b, v)) if v.type.is_float else v
            for v, t in zip(op.operands, in_t)]
    return b.create(op.name, args, op.attrs).results


def build_tangent(module: Module, fn: Function, wrt: list[str], name: str,
                  outputs: list[int] | None = None) -> Function:
    """The tangent program of `fn` (whose calls without custom rules are inlined).

    `outputs` picks the results whose tangents are returned (default: all of them);
    only those make values active, so no work is emitted for the others.
    """
    wrt = resolve_wrt(fn, wrt)
    outputs = list(range(len(fn.result_types))) if outputs is None else list(outputs)
    tfn, _ = clone_function(fn, name)
    ops = list(tfn.body.ops)
    ret = ops.pop()
    results = list(ret.operands)
    active = analyze_activity(tfn, wrt, [results[k] for k in outputs])
    taken = set(tfn.arg_names)
    t_args = []
    for w in wrt:
        t_args.append(tfn.body.add_arg(tfn.arg(w).type, tangent_name(w, taken)))
        taken.add(t_args[-1].name)
    tfn.body.ops = []
    b = Builder(tfn.body, ret.loc)
    b.shared_consts = {}
    tans = Tangents(b)
    for w, t in zip(wrt, t_args):
        tans.t[tfn.arg(w)] = t
    tb = TangentBuilder(b, module, active)
    tb.ops(ops, tans)
    results = [tb.subst.get(v, v) for v in results]
    b.ret(results + [tans.get_or_zeros(results[k]) for k in outputs])
    tfn.result_types = list(fn.result_types) + [fn.result_types[k] for k in outputs]
    tfn.attrs = {"tangent_program_of": fn.name, "wrt": tuple(wrt)}
    if "stacked" in fn.attrs:   # the layers of stacked groups, for paths outside
        tfn.attrs["stacked"] = fn.attrs["stacked"]
    return tfn


@register_pass("jvp")
@dataclass(frozen=True)
class JVP(ADPass):
    """Add ``<fn>_jvp``, the tangent program of `fn` (default: the module's main function).

    `wrt` names the differentiated inputs (default: the inputs marked ``param``).
    """

    def derive(self, module: Module, fn_name: str) -> Module:
        m = Inline(fn=fn_name).run(module)
        m.add(build_tangent(m, m[fn_name], list(self.wrt), f"{fn_name}_jvp"))
        return m
