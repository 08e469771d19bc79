"""The tangent of a ``for`` loop (the ``jvp`` pass, `adcompiler.passes.jvp`): one loop
carrying primal and tangent values side by side. Its carries are the primal carries, then
the tangents of the active carries; its sliced inputs are the primal ones, then the
tangents of the active ones; it yields the primal per-iteration outputs, then the tangents
of those that have one."""
from __future__ import annotations

from ...ir.core import Block, Op, Value
from ...passes.jvp import Tangents


def forward(tb, op: Op, outer: Tangents) -> None:
    """Emit, through the `TangentBuilder` `tb`, the loop `op` rebuilt with its tangents
    beside its values; `tb.subst` maps the old loop's results to the new one's."""
    b, active = tb.b, tb.active
    body, nc, n = op.regions[0], op.attrs["n_carry"], op.attrs["n"]
    carry_args, x_args = body.args[1:1 + nc], body.args[1 + nc:]
    xs = op.operands[nc:]
    carries = [k for k in range(nc) if carry_args[k] in active or op.results[k] in active]
    sliced = [j for j, x in enumerate(x_args)
              if x in active and outer.get(xs[j]) is not None]

    nbody = Block([body.args[0].type], [body.args[0].name])
    tb.subst[body.args[0]] = nbody.args[0]
    new_carry = [nbody.add_arg(a.type, a.name) for a in carry_args]
    t_carry = [nbody.add_arg(carry_args[k].type, _t(carry_args[k])) for k in carries]
    new_x = [nbody.add_arg(a.type, a.name) for a in x_args]
    t_x = [nbody.add_arg(x_args[j].type, _t(x_args[j])) for j in sliced]
    tb.subst.update(zip(carry_args + x_args, new_carry + new_x))

    inner = Tangents(b, outer)
    inner.t.update(zip([new_carry[k] for k in carries], t_carry))
    inner.t.update(zip([new_x[j] for j in sliced], t_x))
    with b.inside(nbody), b.at(op.loc):
        tb.ops(body.ops[:-1], inner)
        yielded = [tb.subst.get(v, v) for v in body.ops[-1].operands]
        ys = yielded[nc:]
        with_t = [j for j, y in enumerate(ys) if inner.get(y) is not None
                  and op.results[nc + j] in active]
        b.yield_(yielded[:nc] + [inner.get_or_zeros(yielded[k]) for k in carries]
                 + ys + [inner.get(ys[j]) for j in with_t])

    with b.at(op.loc):
        init = list(op.operands[:nc]) + [outer.get_or_zeros(op.operands[k]) for k in carries]
        names = ([r.name for r in op.results[:nc]] + [_t(op.results[k]) for k in carries]
                 + [r.name for r in op.results[nc:]]
                 + [_t(op.results[nc + j]) for j in with_t])
        new = b.for_(n, nbody, init, list(xs) + [outer.get(xs[j]) for j in sliced],
                     reverse=op.attrs.get("reverse", False), result_names=names)
    res, nt, ny = new.results, len(carries), len(ys)
    tb.subst.update(zip(op.results[:nc], res[:nc]))
    tb.subst.update(zip(op.results[nc:], res[nc + nt:nc + nt + ny]))
    for pos, k in enumerate(carries):
        outer.set(res[k], res[nc + pos])
    for pos, j in enumerate(with_t):
        outer.set(res[nc + nt + j], res[nc + nt + ny + pos])


def _t(v: Value) -> str | None:
    return f"t_{v.name}" if v.name else None
