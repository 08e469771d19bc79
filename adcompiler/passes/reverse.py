"""Reverse mode: a function ``f`` becomes its adjoint program ``f_grad``.

``f_grad`` takes ``f``'s inputs and returns ``f``'s results followed by one gradient per
differentiated input (each result seeded with ones, like ``backward(ones_like(out))``).
Its body is the forward program followed by the reverse sweep:

* cotangents live in an environment keyed by primal value; a missing entry is a symbolic
  zero, for which no work is emitted; fan-out accumulates with ``add``;
* each op's VJP rule comes from the registry; this driver alone unbroadcasts (``sum_to``);
* only active values (`activity.analyze_activity`) get cotangents;
* a structural op's adjoint is its `reverse` rule (`adcompiler.ops.structural`): calls to
  a function with a ``grad`` rule call the rule (other calls are inlined first); a ``for``
  loop becomes a reverse loop (``reverse = true``) over the same trip count whose carries
  are the carries' cotangents plus accumulators for captured values, and which reads
  per-iteration values that the forward loop now stacks as extra outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Op, Value
from ..ops import registry
from .activity import analyze_activity
from .ad import ADPass, check_wrt, resolve_wrt, zeros_like
from .clone import clone_function
from .inline import Inline
from .pipeline import register_pass


class Cotangents:
    """The cotangent environment of one block: accumulation and unbroadcasting."""

    def __init__(self, b: Builder, active: set[Value]):
        self.b, self.active, self.ct = b, active, {}

    def get(self, v: Value) -> Value | None:
        return self.ct.get(v)

    def get_or_zeros(self, v: Value) -> Value:
        ct = self.ct.get(v)
        return ct if ct is not None else zeros_like(self.b, v)

    def add(self, v: Value, ct: Value | None) -> None:
        if ct is None or v not in self.active:
            return
        if ct.type is not v.type:  # (most cotangents share their value's type object)
            if ct.type.shape != v.type.shape:
                ct = self.b.emit("sum_to", ct, shape=v.type.shape)
            if ct.type.dtype != v.type.dtype:
                ct = self.b.emit("cast", ct, dtype=v.type.dtype)
        old = self.ct.get(v)
        new = ct if old is None else self.b.emit("add", old, ct)
        if new.name is None and v.name and new.defining_op is not None \
                and new not in self.active:
            new.name = f"d{v.name}"  # readable adjoint programs: dh is the cotangent of h
        self.ct[v] = new


def backprop_ops(b: Builder, ops: list[Op], cts: Cotangents, module: Module) -> None:
    """Emit the reverse sweep of `ops` (one block) at `b`, updating `cts`."""
    get, structural_ops = cts.ct.get, registry.STRUCTURAL
    for op in reversed(ops):
        out_cts = list(map(get, op.results))
        if not any(out_cts):  # every cotangent a symbolic zero (a Value is never false)
            continue
        structural = structural_ops.get(op.name)
        if structural is not None and structural.reverse is not None:
            in_cts = b.located(op.loc, structural.reverse, b, op, out_cts, cts, module)
        else:
            in_cts = b.located(op.loc, apply_vjp, b, op, out_cts)
        for v, ct in zip(op.operands, in_cts):
            cts.add(v, ct)


def apply_vjp(b: Builder, op: Op, out_cts: list) -> list:
    opdef = registry.REGISTRY.get(op.name) or registry.get(op.name)
    if opdef.vjp is None:
        if opdef.has("no_grad") or opdef.has("constructor"):
            return [None] * len(op.operands)
        raise AdcError(f"op '{op.name}' has no reverse-mode rule", op.loc)
    in_cts = list(opdef.vjp(b, op, out_cts))
    if len(in_cts) != len(op.operands):
        raise AssertionError(f"VJP of {op.name} returned {len(in_cts)} cotangents "
                             f"for {len(op.operands)} operands")
    return in_cts


def captured_values(block: Block) -> list[Value]:
    """Values used in `block` (nested regions included) but defined outside it."""
    inside = set(block.args)
    for op in block.walk():
        inside.update(op.results)
        for r in op.regions:
            inside.update(r.args)
    seen, out = set(), []
    for op in block.walk():
        for v in op.operands:
            if v not in inside and v not in seen:
                seen.add(v)
                out.append(v)
    return out


def build_adjoint(module: Module, fn: Function, wrt: list[str], name: str,
                  seed: tuple[int, ...] = ()) -> Function:
    """The adjoint function of `fn` (whose calls without grad rules are already inlined);
    the results numbered in `seed` (default: all) are seeded with ones, the others with
    zeros."""
    check_wrt(fn, wrt)
    adj, _ = clone_function(fn, name)
    ret = adj.body.ops.pop()
    results = list(ret.operands)
    active = analyze_activity(adj, wrt, results)
    b = Builder(adj.body, ret.loc)
    b.shared_consts = {}
    cts = Cotangents(b, active)
    for k, r in enumerate(results):
        if r in active and (not seed or k in seed):
            cts.add(r, b.emit("ones", shape=r.type.shape, dtype=r.type.dtype))
    backprop_ops(b, list(adj.body.ops), cts, module)
    grads = [cts.get_or_zeros(adj.arg(w)) for w in wrt]
    b.ret(results + grads)
    adj.result_types = list(fn.result_types) + [adj.arg(w).type for w in wrt]
    adj.attrs = {"adjoint_of": fn.name, "wrt": tuple(wrt)}
    if "stacked" in fn.attrs:   # the layers of stacked groups, for paths outside
        adj.attrs["stacked"] = fn.attrs["stacked"]
    if seed:
        adj.attrs["seed"] = tuple(seed)
    return adj


@register_pass("reverse")
@dataclass(frozen=True)
class Reverse(ADPass):
    """Add ``<fn>_grad``, the adjoint of `fn` (default: the module's main function).

    `wrt` names the differentiated inputs (default: the inputs marked ``param``); `seed`
    numbers the results seeded with ones (default: every result; the others get zero
    cotangents, so ``seed=0`` differentiates the first result alone).
    """

    seed: tuple[int, ...] = ()

    def derive(self, module: Module, fn_name: str) -> Module:
        m = Inline(fn=fn_name, rules=("grad",)).run(module)
        fn = m[fn_name]
        wrt = resolve_wrt(fn, self.wrt)
        n = len(fn.result_types)
        for k in self.seed:
            if not 0 <= k < n:
                raise AdcError(f"reverse: seed={k}, but '{fn_name}' has {n} result"
                               f"{'s' if n != 1 else ''}", fn.loc)
        m.add(build_adjoint(m, fn, wrt, f"{fn_name}_grad", tuple(self.seed)))
        return m
