"""The loops a checkpointing plan's pieces are emitted as (`loops` strings them together):
a stretch of forward steps from a state (recording its residuals or not), a stretch's
reverse loop, a run of equal segments as a loop over the segments around a loop over their
steps (forward, stacking each segment's first state; in reverse, recording and reversing
each from its checkpoint), and a one-slot chain as a reverse loop over its blocks that
advances to each block's first state by a ``repeat``. Every piece is a copy of the loop's
body that reads the global step index, so each step runs the same ops on the same values.
"""
from __future__ import annotations

from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Op, Value
from ..ir.types import TensorType
from ..ops.control import REPEAT
from ..ops.registry import has_trait
from ..passes.clone import clone_op
from .binomial import Chain, Plan
from .loop_pairs import LoopPair, Rewrite
from .parts import MIN_PIECES, captured, part_keys, pieces

I64 = TensorType("i64")


def _mark(op: Op) -> None:
    for o in op.walk():
        if not has_trait(o, "terminator"):
            o.attrs = {**o.attrs, "recompute": True}


MIN_RUN = 100   # runs and chains of this many blocks on are emitted as nested loops

Start = int | Value    # the first iteration of a piece: a constant, or an i64[] of the enclosing loop


def _step_block(body: Block, a: Start, nc: int, xs_full: list[Value], keep_x: list[int],
                scanned: list[int], b: Builder, outer: dict) -> tuple[Block, dict]:
    """A copy of loop body `body` for iterations ``[a, ...)``: index ``j + a``; scanned input
    ``k`` (not in `scanned`) read as ``xs_full[k][j + a]``; the values it reads from outside
    renamed by `outer`. Returns the block (without its yield) and the value map."""
    block = Block([I64] + [v.type for v in body.args[1:1 + nc]],
                  [body.args[0].name] + [v.name for v in body.args[1:1 + nc]])
    vmap: dict[Value, Value] = dict(outer)
    vmap.update(zip(body.args[:1 + nc], block.args))
    x_args = body.args[1 + nc:]
    for k in scanned:
        vmap[x_args[k]] = block.add_arg(x_args[k].type, x_args[k].name)
    with b.inside(block):
        if isinstance(a, Value) or a:
            start = a if isinstance(a, Value) else b.const(a, "i64")
            vmap[body.args[0]] = b.emit("add", block.args[0], start)
        g = vmap[body.args[0]]
        for k in keep_x:
            if k not in scanned:
                vmap[x_args[k]] = b.emit("index", outer.get(xs_full[k], xs_full[k]), g,
                                         idx=("?",))
        for op in body.ops[:-1]:
            b.insert(clone_op(op, vmap))
    return block, vmap


class LoopPieces:
    """The state of one rewrite (one `LoopPair` under one plan) and the loops it emits for
    pieces of the plan; `loops.LoopRewriter` strings them into the two sweeps."""

    def __init__(self, module: Module, fn: Function, pair: LoopPair, plan: Plan):
        self.module, self.fn, self.pair, self.plan = module, fn, pair, plan
        self.info = Rewrite(pair, plan)
        fwd = pair.fwd
        self.nc = fwd.attrs["n_carry"]
        self.body = fwd.regions[0]
        self.yields = self.body.ops[-1].operands
        self.fwd_xs = fwd.operands[self.nc:]
        used = {v for o in self.body.walk() for v in o.operands}
        self.fwd_keep = [k for k, x in enumerate(self.body.args[1 + self.nc:]) if x in used]
        self.times = 1      # how often the pieces being emitted run (inside a segment loop)
        # the reverse loop's stacked outputs that are read: the only ones pieces return
        rev_ys = pair.rev.results[pair.rev.attrs["n_carry"]:]
        read = {v for op in fn.body.walk() for v in op.operands}
        self.ys_used = [k for k, r in enumerate(rev_ys) if r in read]
        # where pieces go: the function being emitted (None: `fn`), its first step (an
        # i64[] argument; None: steps are constants), the plan position that step is, and
        # its arguments standing for the values the loops read from outside
        self.ctx: str | None = None
        self.offset: Value | None = None
        self.base = 0
        self.outer: dict[Value, Value] = {}
        self.steps: dict[str | None, int] = {None: 0}       # recomputed steps per body
        self.calls: dict[str | None, list[str]] = {None: []}
        self.parts: dict[int, str] = {}                     # part key -> its function
        self.todo: list[tuple[str, Plan]] = []
        self.shared = pieces(plan, MIN_RUN) >= MIN_PIECES
        self.min_run = 2 if self.shared else MIN_RUN    # compact runs and chains from here
        if self.shared:    # what the parts' loops read from outside, passed to each part
            self.keys = part_keys(plan)
            rev = pair.rev
            stacks = {fwd.results[k] for k in pair.residual}     # each part records its own
            outer = captured(fwd, rev) + list(fwd.operands[self.nc:]) \
                + list(rev.operands[rev.attrs["n_carry"]:])
            self.captures = [v for v in dict.fromkeys(outer) if v not in stacks]

    def pos(self, b: Builder, a: Start) -> Start:
        """Plan position `a` as the first step of a piece: itself, or (inside a part's
        function) that function's first step plus ``a - base``."""
        if isinstance(a, Value) or self.offset is None:
            return a
        return self.offset if a == self.base else \
            b.emit("add", self.offset, b.const(a - self.base, "i64"))

    def count(self, steps: int) -> None:
        self.steps[self.ctx] += steps * self.times

    # -- forward pieces ---------------------------------------------------------------
    def run_steps(self, b: Builder, a: Start, count: int, state: list[Value], primal: bool,
                  record: bool) -> tuple[list[Value], list[Value], list[Value]]:
        """`count` iterations from ``a``, from `state`: (carries, primal ys, residual stacks)."""
        block, vmap = _step_block(self.body, self.pos(b, a), self.nc, self.fwd_xs,
                                  self.fwd_keep, [], b, self.outer)
        nc, p = self.nc, self.pair
        out = [vmap.get(v, v) for v in self.yields[:nc]]
        ys = [vmap.get(self.yields[k], self.yields[k]) for k in p.primal_ys] if primal else []
        rs = [vmap.get(self.yields[k], self.yields[k]) for k in p.residual] if record else []
        with b.inside(block):
            b.yield_(out + ys + rs)
        loop = b.for_(count, block, state)
        if not primal:
            _mark(loop)
            self.count(count)
        res = loop.results
        return res[:nc], res[nc:nc + len(ys)], res[nc + len(ys):]

    def _segment_loop(self, b: Builder, g: int, ell: int, a0: int, carries: list[Value],
                      slices: list[Value], emit, reverse: bool = False) -> list[Value]:
        """A loop over `g` segments of `ell` steps from ``a0``: its body gets the segment's
        first step ``seg * ell + a0``, the carries and the slices, and yields what `emit`
        returns; per-step stacks ``[g, ell, ...]`` are not reshaped here."""
        block = Block([I64] + [v.type for v in carries]
                      + [TensorType(v.type.dtype, v.type.shape[1:]) for v in slices],
                      ["seg"] + [v.name for v in carries] + [v.name for v in slices])
        start = self.pos(b, a0)
        with b.inside(block):
            first = b.emit("add", b.emit("mul", block.args[0], b.const(ell, "i64")),
                           start if isinstance(start, Value) else b.const(start, "i64"))
            saved, self.times = self.times, self.times * g
            out = emit(first, block.args[1:1 + len(carries)], block.args[1 + len(carries):])
            self.times = saved
            b.yield_(out)
        return b.for_(g, block, carries, slices, reverse=reverse).results

    @staticmethod
    def _flat(b: Builder, stacks: list[Value]) -> list[Value]:
        """Per-step stacks of a segment loop, ``[g, ell, ...]`` -> ``[g * ell, ...]``."""
        return [b.emit("reshape", y, shape=(y.type.shape[0] * y.type.shape[1],)
                       + tuple(y.type.shape[2:])) for y in stacks]

    def run_segments(self, b: Builder, a0: int, ell: int, g: int, state: list[Value],
                     primal: bool) -> tuple[list[Value], list[Value], list[Value]]:
        """`g` segments of `ell` steps from ``a0``, from `state`: (carries, checkpoint stacks
        ``[g, *state]`` (each segment's first state), primal ys)."""
        def step(first, carries, _):
            out, ys, _ = self.run_steps(b, first, ell, list(carries), primal, False)
            return out + list(carries) + ys
        res = self._segment_loop(b, g, ell, a0, state, [], step)
        nc = self.nc
        return res[:nc], res[nc:2 * nc], self._flat(b, res[2 * nc:])

    def advance_by(self, b: Builder, a: int, count: tuple[int, int],
                   state: list[Value]) -> list[Value]:
        """Recompute the state ``ell*i + f`` steps after ``a`` (``count = (ell, f)``, ``i`` the
        enclosing loop's index) from `state`, the state at ``a``: a ``repeat``."""
        block, vmap = _step_block(self.body, self.pos(b, a), self.nc, self.fwd_xs,
                                  self.fwd_keep, [], b, self.outer)
        with b.inside(block):
            b.yield_([vmap.get(v, v) for v in self.yields[:self.nc]])
        op = b.insert(Op(REPEAT, [b.block.args[0]] + list(state), [v.type for v in state],
                         {"count": count, "n_carry": len(state)}, regions=[block]))
        _mark(op)
        return list(op.results)

    # -- reverse pieces ---------------------------------------------------------------
    def reverse_leaf(self, b: Builder, a: Start, count: int, cts: list[Value],
                     stacks: list[Value]) -> tuple[list[Value], list[Value]]:
        rev = self.pair.rev
        ncr = rev.attrs["n_carry"]
        rbody = rev.regions[0]
        rxs = rev.operands[ncr:]
        stack_of = {self.pair.fwd.results[k]: s for k, s in zip(self.pair.residual, stacks)}
        scanned = [k for k, v in enumerate(rxs) if v in stack_of]
        keep = list(range(len(rxs)))
        block, vmap = _step_block(rbody, self.pos(b, a), ncr, list(rxs), keep, scanned, b,
                                  self.outer)
        out = rbody.ops[-1].operands
        with b.inside(block):      # the stacked outputs that are read, only
            b.yield_([vmap.get(v, v) for v in out[:ncr]]
                     + [vmap.get(out[ncr + k], out[ncr + k]) for k in self.ys_used])
        loop = b.for_(count, block, cts, [stack_of[rxs[k]] for k in scanned], reverse=True)
        return loop.results[:ncr], loop.results[ncr:]

    def tape_and_reverse(self, b: Builder, a: Start, count: int, state: list[Value],
                         cts: list[Value]) -> tuple[list[Value], list[Value]]:
        """Record `count` steps from ``a`` (recomputing) and run their reverse loop."""
        _, _, stacks = self.run_steps(b, a, count, state, False, True)
        self.info.residual_stacks += stacks
        return self.reverse_leaf(b, a, count, cts, stacks)

    def reverse_segments(self, b: Builder, a0: int, ell: int, g: int, cts: list[Value],
                         checkpoints: list[Value]) -> tuple[list[Value], list[Value]]:
        """Reverse `g` segments of `ell` steps from ``a0``, each from its checkpoint."""
        ncr = len(cts)

        def step(first, carries, states):
            cts_in, pieces = self.tape_and_reverse(b, first, ell, list(states), list(carries))
            return cts_in + pieces
        res = self._segment_loop(b, g, ell, a0, cts, checkpoints, step, reverse=True)
        return res[:ncr], self._flat(b, res[ncr:])

    def reverse_chain(self, b: Builder, chain: Chain, state: list[Value], cts: list[Value],
                      pieces: dict[int, list[Value]]) -> list[Value]:
        """Reverse `chain` from `state`, the state at its start: a reverse loop over its ``q``
        blocks of ``ell`` steps (block ``i`` starts ``f + ell*i`` steps after ``a``), then its
        first block of ``f`` steps (with shared parts, a first block as long as the others
        is the loop's block 0)."""
        a, f, ell, q = chain
        whole = self.shared and f == ell   # the first block as block 0, advanced over 0 times
        skip = 0 if whole else f

        def step(first, carries, _):
            start = self.advance_by(b, a, (ell, skip), state)
            cts_in, parts = self.tape_and_reverse(b, first, ell, start, list(carries))
            return cts_in + parts
        g = q + 1 if whole else q
        res = self._segment_loop(b, g, ell, a + skip, cts, [], step, reverse=True)
        self.count(ell * g * (g - 1) // 2 + skip * g)
        cts, pieces[a + skip] = res[:len(cts)], self._flat(b, res[len(cts):])
        if not whole:
            cts, pieces[a] = self.tape_and_reverse(b, a, f, state, cts)
        return cts
