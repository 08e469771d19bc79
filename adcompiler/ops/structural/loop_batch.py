"""A ``for`` loop over a batch of examples (the ``batch`` pass, `adcompiler.passes.batch`):
a carry becomes batched when its update is (found by iterating to a fixed point), batched
scanned inputs have their examples moved behind the iteration axis, and batched stacked
outputs come back with the examples in front again."""
from __future__ import annotations

from ...ir.builder import Builder
from ...ir.core import Block, Op


def batch(batcher, b: Builder, op: Op) -> None:
    """Rewrite the ``for`` loop `op` at `b` through the `Batcher` `batcher`."""
    nc = op.attrs["n_carry"]
    inits = [batcher.env[v] for v in op.operands[:nc]]
    xs = [batcher.env[v] for v in op.operands[nc:]]
    carried = [f for _, f in inits]
    body = op.regions[0]
    while True:   # a carry becomes batched when its update is; at most nc rounds
        saved = dict(batcher.env)
        nbody, yielded = _body(batcher, body, carried, xs)
        flags = [f for _, f in yielded[:nc]]
        grown = [c or f for c, f in zip(carried, flags)]
        if grown == carried:
            break
        carried, batcher.env = grown, saved
    nb = Builder(nbody)
    outs = []
    for k, (v, f) in enumerate(yielded):
        if k < nc and carried[k] and not f:
            v = batcher.materialize(nb, v)
        outs.append(v)
    nb.yield_(outs)
    init = [batcher.materialize(b, v) if c and not f else v
            for (v, f), c in zip(inits, carried)]
    scanned = [batcher.iteration_first(b, v) if f else v for v, f in xs]
    new = b.for_(op.attrs["n"], nbody, init, scanned, reverse=op.attrs.get("reverse", False),
                 result_names=[r.name for r in op.results])
    new.attrs = {**op.attrs, **new.attrs}
    for k, (old, res) in enumerate(zip(op.results, new.results)):
        if k < nc:
            batcher.env[old] = (res, carried[k])
        elif yielded[k][1]:   # stacked [n_iter, batch, ...]: examples in front again
            perm = [1, 0] + list(range(2, res.type.rank))
            batcher.env[old] = (b.emit("transpose", res, perm=perm), True)
        else:
            batcher.env[old] = (res, False)


def _body(batcher, body: Block, carried: list[bool], xs) -> tuple[Block, list]:
    """The loop body rewritten for the carries flagged in `carried` (batched or not), and
    the new values and flags of what it yields."""
    nc = len(carried)
    counter, carries, slices = body.args[0], body.args[1:nc + 1], body.args[nc + 1:]
    types = [counter.type]
    types += [batcher.batched_type(a.type) if c else a.type for a, c in zip(carries, carried)]
    types += [batcher.batched_type(a.type) if f else a.type
              for a, (_, f) in zip(slices, xs)]
    nbody = Block(types, [a.name for a in body.args])
    flags = [False] + list(carried) + [f for _, f in xs]
    for old, new, f in zip(body.args, nbody.args, flags):
        batcher.env[old] = (new, f)
    nb = Builder(nbody)
    batcher.block(nb, body)
    return nbody, [batcher.env[v] for v in body.ops[-1].operands]
