"""Reverse mode: a function ``f`` becomes its adjoint program ``f_grad``.

``f_grad`` takes ``f``'s inputs and returns ``f``'s results followed by one gradient per
differentiated input (each result seeded with ones, like ``backward(ones_like(out))``).
Its body is the forward program followed by the reverse sweep:

* cotangents live in an environment keyed by primal value; a missing entry is a symbolic
  zero, for which no work is emitted; fan-out accumulates with ``add``;
* each op's VJP rule comes from the registry; this driver alone unbroadcasts (``sum_to``);
* only active values (`activity.analyze_activity`) get cotangents;
* calls to a function with a ``grad`` rule call the rule; other calls are inlined first;
* a ``for`` loop becomes a reverse loop (``reverse = true``) over the same trip count whose
  carries are the carries' cotangents plus accumulators for captured values, and which
  reads per-iteration values that the forward loop now stacks as extra outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Op, Value, source_name
from ..ir.types import TensorType
from ..ops import registry
from ..ops.registry import has_trait
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
    for op in reversed(ops):
        out_cts = [cts.get(r) for r in op.results]
        if all(c is None for c in out_cts):
            continue
        with b.at(op.loc):
            if has_trait(op, "loop"):
                in_cts = reverse_loop(b, op, out_cts, cts, module)
            elif has_trait(op, "calls"):
                in_cts = call_rule(b, op, out_cts, module)
            else:
                in_cts = apply_vjp(b, op, out_cts)
        for v, ct in zip(op.operands, in_cts):
            cts.add(v, ct)


def apply_vjp(b: Builder, op: Op, out_cts: list) -> list:
    opdef = registry.get(op.name)
    if opdef.vjp is None:
        if opdef.has("no_grad") or opdef.has("constructor"):
            return [None] * len(op.operands)
        raise AdcError(f"op '{op.name}' has no reverse-mode rule", op.loc)
    in_cts = list(opdef.vjp(b, op, out_cts))
    if len(in_cts) != len(op.operands):
        raise AssertionError(f"VJP of {op.name} returned {len(in_cts)} cotangents "
                             f"for {len(op.operands)} operands")
    return in_cts


def call_rule(b: Builder, op: Op, out_cts: list, module: Module) -> list:
    """A call that survived inlining has a ``grad`` rule: call it."""
    rule = module.rule_for(op.attrs["callee"], "grad")
    if rule is None:
        raise AdcError(f"call to '{source_name(op.attrs['callee'])}' was not inlined", op.loc)
    seeds = [c if c is not None else zeros_like(b, r) for c, r in zip(out_cts, op.results)]
    return b.call(rule, list(op.operands) + list(op.results) + seeds)


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


def reverse_loop(b: Builder, op: Op, out_cts: list, outer: Cotangents, module: Module) -> list:
    """Emit the reverse loop of the forward ``for`` op `op`; returns the operands' cotangents."""
    active = outer.active
    body, nc = op.regions[0], op.attrs["n_carry"]
    index, carry_args, x_args = body.args[0], body.args[1:1 + nc], body.args[1 + nc:]
    yielded = body.ops[-1].operands
    new_carry, ys = yielded[:nc], yielded[nc:]

    carries = [k for k in range(nc) if carry_args[k] in active or op.results[k] in active]
    captured = [v for v in captured_values(body) if v in active]
    y_seeds = [j for j in range(len(ys)) if out_cts[nc + j] is not None]
    x_active = [j for j, x in enumerate(x_args) if x in active]

    rbody = Block([TensorType("i64")], ["i"])
    ct_carry = [rbody.add_arg(carry_args[k].type, _ct_name(carry_args[k])) for k in carries]
    ct_acc = [rbody.add_arg(v.type, _ct_name(v)) for v in captured]
    ct_y = [rbody.add_arg(ys[j].type, _ct_name(ys[j])) for j in y_seeds]

    with b.inside(rbody):
        inner = Cotangents(b, active)
        for k, a in zip(carries, ct_carry):
            inner.add(new_carry[k], a)
        for j, a in zip(y_seeds, ct_y):
            inner.add(ys[j], a)
        backprop_ops(b, body.ops[:-1], inner, module)
        carry_out = [inner.get_or_zeros(carry_args[k]) for k in carries]
        acc_out = [a if inner.get(v) is None else b.emit("add", a, inner.get(v))
                   for v, a in zip(captured, ct_acc)]
        xs_out = [inner.get_or_zeros(x_args[j]) for j in x_active]
        b.yield_(carry_out + acc_out + xs_out)

    residuals = _stack_residuals(op, rbody)
    init = [outer.get_or_zeros(op.results[k]) for k in carries] + [zeros_like(b, v) for v in captured]
    xs = [out_cts[nc + j] for j in y_seeds] + residuals
    names = [a.name for a in rbody.args[1:1 + len(init)]] + [_ct_name(x_args[j]) for j in x_active]
    rev = b.for_(op.attrs["n"], rbody, init, xs, reverse=True, result_names=names)
    res = rev.results
    in_cts: list = [None] * len(op.operands)
    for pos, k in enumerate(carries):
        in_cts[k] = res[pos]
    for pos, v in enumerate(captured):
        outer.add(v, res[len(carries) + pos])
    for pos, j in enumerate(x_active):
        in_cts[nc + j] = res[len(carries) + len(captured) + pos]
    return in_cts


def _ct_name(v: Value) -> str | None:
    return f"d{v.name}" if v.name else None


def _stack_residuals(op: Op, rbody: Block) -> list[Value]:
    """Make the forward loop `op` stack every body value that the reverse body `rbody` reads.

    Each such value becomes a new per-iteration output of `op` and a new sliced input of the
    reverse loop (a slice of a forward input is read from that input directly); the loop
    index maps to the reverse loop's own index. Returns the stacked values, in the order of
    the reverse body's new arguments.
    """
    body = op.regions[0]
    index, yield_op, nc = body.args[0], body.ops[-1], op.attrs["n_carry"]
    x_pos = {a: k for k, a in enumerate(body.args[1 + nc:])}
    defined = set(body.args) | {r for o in body.ops for r in o.results}
    mapping: dict[Value, Value] = {index: rbody.args[0]}
    new_results = []
    rebuilt: list[Op] = []  # the ops rebuilt at the start of the body, in order
    for rop in list(rbody.walk()):
        for v in rop.operands:
            if v in defined and v not in mapping:
                if _rebuildable(v, defined, index):
                    mapping[v] = _rebuild(v, rbody, rebuilt, mapping)
                    continue
                mapping[v] = rbody.add_arg(v.type, v.name)
                if v in x_pos:
                    new_results.append(op.operands[nc + x_pos[v]])
                    continue
                yield_op.operands.append(v)
                res = Value(TensorType(v.type.dtype, (op.attrs["n"],) + v.type.shape),
                            v.name and f"{v.name}_stack", op, len(op.results))
                op.results.append(res)
                new_results.append(res)
    rbody.ops[:0] = rebuilt
    for rop in rbody.walk():
        rop.operands = [mapping.get(v, v) for v in rop.operands]
    return new_results


# Ops that cost no arithmetic (a constant, or a view of a value the reverse loop can see):
# rebuilding them in the reverse loop is cheaper than stacking their values.
_CHEAP = {"index", "reshape", "expand_dims", "squeeze", "transpose", "broadcast_to"}


def _rebuildable(v: Value, defined: set[Value], index: Value) -> bool:
    d = v.defining_op
    if d is None or d.regions or len(d.results) != 1:
        return False
    if not d.operands:
        return registry.get(d.name).has("constructor")
    return d.name in _CHEAP and all(
        u is index or u not in defined or _rebuildable(u, defined, index) for u in d.operands)


def _rebuild(v: Value, rbody: Block, rebuilt: list[Op], mapping: dict[Value, Value]) -> Value:
    """Clone the op defining `v` (and what it needs) into `rebuilt`, the ops that will open
    `rbody`: right after the last rebuilt op it reads, or first. Positions are searched
    among the rebuilt ops only, never the whole body."""
    d = v.defining_op
    operands = [mapping[u] if u in mapping else
                (_rebuild(u, rbody, rebuilt, mapping) if u.defining_op is not None
                  and u.defining_op.parent is d.parent else u)
                for u in d.operands]
    new = Op(d.name, operands, [v.type], dict(d.attrs), loc=d.loc, result_names=[v.name])
    pos = max([rebuilt.index(u.owner) + 1 for u in operands
               if isinstance(u.owner, Op) and u.owner.parent is rbody], default=0)
    rebuilt.insert(pos, new)
    new.parent = rbody
    mapping[v] = new.result
    return new.result


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
    cts = Cotangents(b, active)
    for k, r in enumerate(results):
        if r in active and (not seed or k in seed):
            cts.add(r, b.emit("ones", shape=r.type.shape, dtype=r.type.dtype))
    backprop_ops(b, list(adj.body.ops), cts, module)
    grads = [cts.get_or_zeros(adj.arg(w)) for w in wrt]
    b.ret(results + grads)
    adj.result_types = list(fn.result_types) + [adj.arg(w).type for w in wrt]
    adj.attrs = {"adjoint_of": fn.name, "wrt": tuple(wrt)}
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
        m = Inline(fn=fn_name, rules=("grad",))(module)
        fn = m[fn_name]
        wrt = resolve_wrt(fn, self.wrt)
        n = len(fn.result_types)
        for k in self.seed:
            if not 0 <= k < n:
                raise AdcError(f"reverse: seed={k}, but '{fn_name}' has {n} result"
                               f"{'s' if n != 1 else ''}", fn.loc)
        m.add(build_adjoint(m, fn, wrt, f"{fn_name}_grad", tuple(self.seed)))
        return m
