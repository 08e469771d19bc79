"""The adjoint of a ``for`` loop (the ``reverse`` pass, `adcompiler.passes.reverse`): a
reverse loop over the same trip count whose carries are the carries' cotangents plus
accumulators for captured values, and which reads per-iteration values that the forward
loop now stacks as extra outputs."""
from __future__ import annotations

from ...ir.builder import Builder
from ...ir.core import Block, Module, Op, Value
from ...ir.types import TensorType
from ...passes.ad import zeros_like
from ...passes.reverse import Cotangents, backprop_ops, captured_values
from .. import registry


def reverse(b: Builder, op: Op, out_cts: list, outer: Cotangents, module: Module) -> list:
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


def _rebuildable(v: Value, defined: set[Value], index: Value) -> bool:
    d = v.defining_op
    if d is None or d.regions or len(d.results) != 1:
        return False
    if not d.operands:
        return registry.has_trait(d, "constructor")
    # a view of values the reverse loop can see costs no arithmetic: rebuilding it there
    # is cheaper than stacking its values
    return registry.has_trait(d, "view") and all(
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
