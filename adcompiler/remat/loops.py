"""Rewriting a loop and its reverse loop by a checkpointing plan (`binomial.Plan`).

After ``reverse``, a forward loop ``F`` stacks residuals (extra per-iteration outputs) that
its reverse loop ``R`` reads as scanned inputs. Under a plan, ``F`` becomes the *forward
sweep* -- advance loops that record nothing, from checkpoint to checkpoint, then the last
leaf, which records its residuals -- and ``R`` becomes the *reverse sweep*: the reverse loop
of that leaf, then for each earlier leaf a recomputation from its checkpoint (advances and a
recording loop) followed by its reverse loop. Every piece is an ordinary ``for`` over a range
``[a, b)`` of the original iterations: the body reads the global index ``j + a`` and indexes
the scanned inputs with it, so each iteration runs the same ops on the same values as before
and the gradient is bit-identical. Recomputed ops carry ``recompute = true`` and the
location of their primal op.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.builder import Builder
from ..ir.core import Block, Function, Op, Value, replace_all_uses, uses
from ..ir.types import TensorType
from ..ops.registry import has_trait
from ..passes.clone import clone_op
from .binomial import Leaf, Plan, Split

I64 = TensorType("i64")


@dataclass
class LoopPair:
    """A forward loop, its reverse loop and what the reverse reads from it."""
    fwd: Op
    rev: Op
    n: int
    residual: list[int]      # indices of fwd's stacked outputs that only rev reads
    primal_ys: list[int]     # indices of fwd's other stacked outputs


@dataclass
class Rewrite:
    """What a rewrite stores for the reverse sweep and what it recomputes."""
    pair: LoopPair
    plan: Plan
    checkpoints: list[Value] = field(default_factory=list)
    residual_stacks: list[Value] = field(default_factory=list)
    recomputed_steps: int = 0


def find_loop_pairs(fn: Function) -> list[LoopPair]:
    """The (forward, reverse) loop pairs of `fn`'s top-level block with a static trip count.
    A forward loop pairs with one reverse loop at most: in a second-order program several
    reverse loops may read its stacks, and rewriting it for the first removes it."""
    table = uses(fn.body)
    pairs, paired = [], set()
    for rev in fn.body.ops:
        if not has_trait(rev, "loop") or not rev.attrs["reverse"]:
            continue
        xs = rev.operands[rev.attrs["n_carry"]:]
        fwd = next((v.owner for v in xs if isinstance(v.owner, Op) and has_trait(v.owner, "loop")
                    and not v.owner.attrs["reverse"] and v.owner.parent is fn.body), None)
        if fwd is None or fwd.attrs["n"] != rev.attrs["n"] or not isinstance(fwd.attrs["n"], int) \
                or fwd in paired:
            continue
        nc = fwd.attrs["n_carry"]
        residual, primal = [], []
        for k in range(nc, len(fwd.results)):
            users = table.get(fwd.results[k], [])
            only_rev = users and all(u is rev for u in users)
            (residual if only_rev else primal).append(k)
        if residual:
            pairs.append(LoopPair(fwd, rev, fwd.attrs["n"], residual, primal))
            paired.add(fwd)
    return pairs


def _mark(op: Op) -> None:
    for o in op.walk():
        if not has_trait(o, "terminator"):
            o.attrs["recompute"] = True


def _step_block(body: Block, a: int, nc: int, xs_full: list[Value], keep_x: list[int],
                scanned: list[int], b: Builder) -> tuple[Block, dict]:
    """A copy of loop body `body` for iterations ``[a, ...)``: index ``j + a``; scanned input
    ``k`` (not in `scanned`) read as ``xs_full[k][j + a]``. Returns the block (without its
    yield) and the value map."""
    block = Block([I64] + [v.type for v in body.args[1:1 + nc]],
                  [body.args[0].name] + [v.name for v in body.args[1:1 + nc]])
    vmap: dict[Value, Value] = dict(zip(body.args[:1 + nc], block.args))
    x_args = body.args[1 + nc:]
    for k in scanned:
        vmap[x_args[k]] = block.add_arg(x_args[k].type, x_args[k].name)
    with b.inside(block):
        if a:
            vmap[body.args[0]] = b.emit("add", block.args[0], b.const(a, "i64"))
        g = vmap[body.args[0]]
        for k in keep_x:
            if k not in scanned:
                vmap[x_args[k]] = b.emit("index", xs_full[k], g, idx=("?",))
        for op in body.ops[:-1]:
            b.insert(clone_op(op, vmap))
    return block, vmap


class LoopRewriter:
    """Emits the forward and reverse sweeps of one `LoopPair` under one plan."""

    def __init__(self, fn: Function, pair: LoopPair, plan: Plan):
        self.fn, self.pair, self.plan = fn, pair, plan
        self.info = Rewrite(pair, plan)
        fwd = pair.fwd
        self.nc = fwd.attrs["n_carry"]
        self.body = fwd.regions[0]
        self.yields = self.body.ops[-1].operands
        self.fwd_xs = fwd.operands[self.nc:]
        used = {v for o in self.body.walk() for v in o.operands}
        self.fwd_keep = [k for k, x in enumerate(self.body.args[1 + self.nc:]) if x in used]

    # -- forward pieces ---------------------------------------------------------------
    def run_steps(self, b: Builder, a: int, stop: int, state: list[Value], primal: bool,
                  record: bool) -> tuple[list[Value], list[Value], list[Value]]:
        """Iterations ``[a, stop)`` from `state`: (carries, primal ys, residual stacks)."""
        block, vmap = _step_block(self.body, a, self.nc, self.fwd_xs, self.fwd_keep, [], b)
        nc, p = self.nc, self.pair
        out = [vmap.get(v, v) for v in self.yields[:nc]]
        ys = [vmap.get(self.yields[k], self.yields[k]) for k in p.primal_ys] if primal else []
        rs = [vmap.get(self.yields[k], self.yields[k]) for k in p.residual] if record else []
        with b.inside(block):
            b.yield_(out + ys + rs)
        loop = b.for_(stop - a, block, state)
        if not primal:
            _mark(loop)
        res = loop.results
        if not primal:
            self.info.recomputed_steps += stop - a
        return res[:nc], res[nc:nc + len(ys)], res[nc + len(ys):]

    # -- reverse pieces ---------------------------------------------------------------
    def reverse_leaf(self, b: Builder, a: int, stop: int, cts: list[Value],
                     stacks: list[Value]) -> tuple[list[Value], list[Value]]:
        rev = self.pair.rev
        ncr = rev.attrs["n_carry"]
        rbody = rev.regions[0]
        rxs = rev.operands[ncr:]
        stack_of = {self.pair.fwd.results[k]: s for k, s in zip(self.pair.residual, stacks)}
        scanned = [k for k, v in enumerate(rxs) if v in stack_of]
        keep = list(range(len(rxs)))
        block, vmap = _step_block(rbody, a, ncr, list(rxs), keep, scanned, b)
        with b.inside(block):
            b.yield_([vmap.get(v, v) for v in rbody.ops[-1].operands])
        loop = b.for_(stop - a, block, cts, [stack_of[rxs[k]] for k in scanned], reverse=True)
        return loop.results[:ncr], loop.results[ncr:]

    def reverse_plan(self, b: Builder, plan: Plan, state: list[Value], cts: list[Value],
                     pieces: dict[int, list[Value]]) -> list[Value]:
        """Reverse `plan` (recomputing) from checkpoint `state`; returns the cotangents.
        Right parts first, then left parts from the same state (an explicit stack)."""
        todo = [(plan, state)]
        while todo:
            p, st = todo.pop()
            if isinstance(p, Leaf):
                _, _, stacks = self.run_steps(b, p.a, p.b, st, False, True)
                self.info.residual_stacks += stacks
                cts, pieces[p.a] = self.reverse_leaf(b, p.a, p.b, cts, stacks)
                continue
            mid, _, _ = self.run_steps(b, p.a, p.m, st, False, False)
            self.info.checkpoints += mid
            todo += [(p.left, st), (p.right, mid)]
        return cts

    # -- the whole rewrite ------------------------------------------------------------
    def rewrite(self) -> Rewrite:
        fwd, rev, body = self.pair.fwd, self.pair.rev, self.fn.body
        b = Builder(body, fwd.loc, body.ops.index(fwd))
        state = list(fwd.operands[:self.nc])
        pending, ys_pieces, plan = [], [], self.plan
        while isinstance(plan, Split):
            mid, ys, _ = self.run_steps(b, plan.a, plan.m, state, True, False)
            self.info.checkpoints += mid
            pending.append((plan.left, state))
            ys_pieces.append(ys)
            state, plan = mid, plan.right
        final, ys, stacks = self.run_steps(b, plan.a, plan.b, state, True, True)
        self.info.residual_stacks += stacks
        ys_pieces.append(ys)
        mapping = dict(zip(fwd.results[:self.nc], final))
        for pos, k in enumerate(self.pair.primal_ys):
            parts = [p[pos] for p in ys_pieces]
            mapping[fwd.results[k]] = parts[0] if len(parts) == 1 else \
                b.emit("concat", *parts, axis=0)
        body.ops.remove(fwd)

        b = Builder(body, rev.loc, body.ops.index(rev))
        ncr = rev.attrs["n_carry"]
        pieces: dict[int, list[Value]] = {}
        cts, pieces[plan.a] = self.reverse_leaf(b, plan.a, plan.b, list(rev.operands[:ncr]),
                                                stacks)
        for left, st in reversed(pending):
            cts = self.reverse_plan(b, left, st, cts, pieces)
        mapping.update(zip(rev.results[:ncr], cts))
        order = sorted(pieces)
        for pos, r in enumerate(rev.results[ncr:]):
            parts = [pieces[a][pos] for a in order]
            mapping[r] = parts[0] if len(parts) == 1 else b.emit("concat", *parts, axis=0)
        body.ops.remove(rev)
        replace_all_uses(body, mapping)
        return self.info


def rewrite_loop(fn: Function, pair: LoopPair, plan: Plan) -> Rewrite | None:
    """Rewrite `pair` in `fn` by `plan`; a plan that stores everything leaves it as is."""
    if isinstance(plan, Leaf):
        return None
    return LoopRewriter(fn, pair, plan).rewrite()
