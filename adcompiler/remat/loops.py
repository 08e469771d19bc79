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

Long runs of equal segments (`MIN_RUN` or more consecutive checkpoints ``ell`` steps apart
whose segments are taped whole: √n plans, `Segments` of binomial plans) are
emitted as two nested loops instead of one loop per segment: forward, a loop over the
segments around a loop over their steps, stacking each segment's first state (the
checkpoints, ``[g, *state]``); in reverse, a reverse loop over the segments that scans those
checkpoints and, per segment, records its ``ell`` steps and runs their reverse loop. The
index of a step is ``j + (seg * ell + a0)``, so the scheduled program has the same size for
any number of segments, and every step still runs the same ops on the same values.

Long chains with one slot (a `Chain` of `MIN_RUN` or more blocks of ``ell`` steps after a first
block of ``f``, each reversed by advancing from the chain's first state: the whole of a
``revolve:1`` plan, the one-slot ends of binomial plans) are emitted as a reverse loop over
the blocks whose body advances ``ell*i + f`` steps from that state (a ``repeat``, whose trip
count is affine in the loop's index), records the block and runs its reverse loop.

Shorter runs and chains are emitted a loop per piece, as the rest of the plan: the compact
form allocates the stacked per-step outputs of its segment loops (the reverse loop's
cotangents of scanned inputs, the primal outputs) for the whole run at its start, where
pieces would fill up one by one, so it can raise the peak; it pays off on long loops.

A plan of `parts.MIN_PIECES` pieces or more is emitted with shared parts (`parts`): the
forward sweep as above, then each part to reverse from a checkpoint as a call of the
function emitted once for all parts of its shape, whose body advances to its split point,
reverses the right part (a call again, a leaf, or a run or chain as nested loops from two
blocks on) and then the left part, and joins their stacked outputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.builder import Builder
from ..ir.calls import calls_bottom_up
from ..ir.core import Block, Function, Module, Op, Value, replace_all_uses, uses
from ..ops.control import CALL, REPEAT
from ..ir.types import TensorType
from ..ops.registry import has_trait
from ..passes.clone import clone_op
from ..passes.dce import dce_function
from .binomial import Chain, Leaf, Plan, Segments, Split, expand
from .parts import MIN_PIECES, captured, length, part_keys, pieces

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


MIN_RUN = 100   # runs and chains of this many blocks on are emitted as nested loops

Start = int | Value    # the first iteration of a piece: a constant, or an i64[] of the enclosing loop


def _spine(plan: Plan) -> tuple[list[tuple[int, int, int, Plan | None]], Leaf]:
    """`plan`'s splits along its right spine, as ``(a, ell, g, left)``: `g` consecutive
    splits `ell` steps apart from ``a`` whose left parts are single leaves (``left`` None),
    or one split whose left part is `left` (``g = 1``); and the leaf it ends in. A
    `Segments` node stays one entry, whatever its length."""
    items = []
    while True:
        if isinstance(plan, Segments):
            items.append((plan.a, plan.f, 1, None))
            if plan.q > 1:
                items.append((plan.a + plan.f, plan.ell, plan.q - 1, None))
            last = plan.a + plan.f + (plan.q - 1) * plan.ell
            plan = Leaf(last, last + plan.ell)
        if isinstance(plan, Chain):
            plan = expand(plan)
        if not isinstance(plan, Split):
            return items, plan
        left = None if isinstance(plan.left, Leaf) else plan.left
        items.append((plan.a, plan.m - plan.a, 1, left))
        plan = plan.right


def _runs(items: list[tuple[int, int, int, Plan | None]], min_run: int) -> list[tuple]:
    """Spine items grouped: ``("run", a0, ell, g)`` for `min_run` or more consecutive
    checkpoints `ell` steps apart whose left parts are single leaves; ``("one", a, m, left)``
    for the others."""
    out, k = [], 0
    while k < len(items):
        a, ell, g, left = items[k]
        k += 1
        if left is not None:
            out.append(("one", a, a + ell, left))
            continue
        while k < len(items) and items[k][3] is None and items[k][1] == ell:
            g += items[k][2]
            k += 1
        if g >= min_run:
            out.append(("run", a, ell, g))
        else:
            out += [("one", x, x + ell, Leaf(x, x + ell)) for x in range(a, a + g * ell, ell)]
    return out


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


class LoopRewriter:
    """Emits the forward and reverse sweeps of one `LoopPair` under one plan."""

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

    # -- sweeps -----------------------------------------------------------------------
    def advance(self, b: Builder, plan: Plan, state: list[Value], primal: bool):
        """Along `plan`'s right spine from `state`, keeping the checkpoints: (the state at
        its last leaf, the left parts to reverse afterwards (last first), primal ys)."""
        items, leaf = _spine(plan)
        later, ys_pieces = [], []
        for grp in _runs(items, self.min_run):
            if grp[0] == "one":
                _, a, m, left = grp
                mid, ys, _ = self.run_steps(b, a, m - a, state, primal, False)
                self.info.checkpoints += mid
                later.append(("plan", left, state))
            else:
                _, a0, ell, g = grp
                mid, ckpts, ys = self.run_segments(b, a0, ell, g, state, primal)
                self.info.checkpoints += ckpts
                later.append(("run", a0, ell, g, ckpts))
            ys_pieces.append(ys)
            state = mid
        return leaf, state, later, ys_pieces

    def reverse_later(self, b: Builder, later: list[tuple], cts: list[Value],
                      pieces: dict[int, list[Value]]) -> list[Value]:
        """Reverse the left parts `later` (last first), recomputing from their checkpoints;
        returns the cotangents. Right parts before left parts (an explicit stack)."""
        todo = list(later)
        while todo:
            item = todo.pop()
            if item[0] == "run":
                _, a0, ell, g, ckpts = item
                cts, pieces[a0] = self.reverse_segments(b, a0, ell, g, cts, ckpts)
                continue
            if isinstance(item[1], Chain) and item[1].q >= self.min_run:
                cts = self.reverse_chain(b, item[1], item[2], cts, pieces)
                continue
            if self.shared and isinstance(item[1], Split):
                cts, pieces[item[1].a] = self.call_part(b, item[1], item[2], cts)
                continue
            leaf, state, more, _ = self.advance(b, item[1], item[2], False)
            cts, pieces[leaf.a] = self.tape_and_reverse(b, leaf.a, leaf.b - leaf.a, state, cts)
            todo += more
        return cts

    # -- shared parts (`parts`) ------------------------------------------------------
    def call_part(self, b: Builder, plan: Split, state: list[Value],
                  cts: list[Value]) -> tuple[list[Value], list[Value]]:
        """Reverse `plan` from `state` by a call of its part's function: (cotangents, its
        steps' stacked outputs)."""
        name = self.parts.get(self.keys[id(plan)])
        if name is None:
            name = self.parts[self.keys[id(plan)]] = self.declare_part(plan)
        start = self.pos(b, plan.a)
        if not isinstance(start, Value):
            start = b.const(start, "i64")
        args = [start] + list(state) + list(cts) + [self.outer.get(v, v) for v in self.captures]
        op = b.insert(Op(CALL, args, self.module[name].result_types, {"callee": name}))
        self.calls[self.ctx].append(name)
        ncr = len(cts)
        return list(op.results[:ncr]), list(op.results[ncr:])

    def declare_part(self, plan: Split) -> str:
        """A new function for the part `plan` stands for; its body is emitted later."""
        rev, l = self.pair.rev, length(plan)
        ncr = rev.attrs["n_carry"]
        state = [v.type for v in self.pair.fwd.operands[:self.nc]]
        cts = [v.type for v in rev.operands[:ncr]]
        ys = [TensorType(r.type.dtype, (l,) + tuple(r.type.shape[1:]))
              for r in (rev.results[ncr + k] for k in self.ys_used)]
        k, name = 0, f"{self.fn.name}.part{l}"
        while name in self.module:
            k += 1
            name = f"{self.fn.name}.part{l}.{k}"
        block = Block([I64] + state + cts + [v.type for v in self.captures],
                      ["start"] + [v.name for v in self.body.args[1:1 + self.nc]]
                      + [v.name for v in rev.regions[0].args[1:1 + ncr]]
                      + [v.name for v in self.captures])
        self.module.add(Function(name, block, list(cts) + ys, attrs={"borrows_args": True},
                                 loc=self.fn.loc))
        self.todo.append((name, plan))
        self.steps[name], self.calls[name] = 0, []
        return name

    def emit_part(self, name: str, plan: Split) -> None:
        """The body of part function `name`: reverse `plan` from its arguments. It advances
        to the split and keeps that state while the right part runs, then reverses the left
        part from its own state; either part is a call when it is a split too, so a body
        has a few ops and the slots in use are the frames on the call stack."""
        f = self.module[name]
        ncr = self.pair.rev.attrs["n_carry"]
        args = f.body.args
        self.ctx, self.offset, self.base = name, args[0], plan.a
        state, cts = list(args[1:1 + self.nc]), list(args[1 + self.nc:1 + self.nc + ncr])
        self.outer = dict(zip(self.captures, args[1 + self.nc + ncr:]))
        b = Builder(f.body, self.pair.rev.loc)
        mid, _, _ = self.run_steps(b, plan.a, plan.m - plan.a, state, False, False)
        self.info.checkpoints += mid
        pieces: dict[int, list[Value]] = {}
        cts = self.reverse_later(b, [("plan", plan.left, state), ("plan", plan.right, mid)],
                                 cts, pieces)
        b.ret(cts + self.joined(b, pieces))

    def joined(self, b: Builder, pieces: dict[int, list[Value]]) -> list[Value]:
        """The stacked outputs of the pieces, in the order of their steps."""
        order = sorted(pieces)
        out = []
        for pos in range(len(pieces[order[0]])):
            parts = [pieces[a][pos] for a in order]
            out.append(parts[0] if len(parts) == 1 else b.emit("concat", *parts, axis=0))
        return out

    def total_steps(self) -> int:
        """Recomputed steps of the whole rewrite: each body's, its callees' per call."""
        total: dict[str, int] = {}
        for name in calls_bottom_up(self.module, self.fn.name):     # callees first
            if name in self.steps:
                total[name] = self.steps[name] + sum(total[c] for c in self.calls[name])
        return self.steps[None] + sum(total[c] for c in self.calls[None])

    # -- the whole rewrite ------------------------------------------------------------
    def rewrite(self) -> Rewrite:
        fwd, rev, body = self.pair.fwd, self.pair.rev, self.fn.body
        b = Builder(body, fwd.loc, body.ops.index(fwd))
        leaf, state, later, ys_pieces = self.advance(b, self.plan, list(fwd.operands[:self.nc]),
                                                     True)
        final, ys, stacks = self.run_steps(b, leaf.a, leaf.b - leaf.a, state, True, True)
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
        cts, pieces[leaf.a] = self.reverse_leaf(b, leaf.a, leaf.b - leaf.a,
                                                list(rev.operands[:ncr]), stacks)
        cts = self.reverse_later(b, later, cts, pieces)
        mapping.update(zip(rev.results[:ncr], cts))
        mapping.update(zip([rev.results[ncr + k] for k in self.ys_used], self.joined(b, pieces)))
        body.ops.remove(rev)
        replace_all_uses(body, mapping)
        k = 0
        while k < len(self.todo):      # part functions, each emitted once
            self.emit_part(*self.todo[k])
            dce_function(self.module[self.todo[k][0]], self.module)   # as `fn` is, after
            k += 1
        self.info.recomputed_steps = self.total_steps()
        return self.info


def rewrite_loop(module: Module, fn: Function, pair: LoopPair, plan: Plan) -> Rewrite | None:
    """Rewrite `pair` in `fn` (of `module`) by `plan`; a plan that stores everything leaves
    it as is. A long plan adds its parts' functions to `module` (`parts`)."""
    if isinstance(plan, Leaf):
        return None
    return LoopRewriter(module, fn, pair, plan).rewrite()
