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

Here: the plan's right spine grouped into runs, the two sweeps and the parts' functions;
the loops of single pieces, runs and chains are `loop_pieces`'s, the pairs `loop_pairs`'s.
"""
from __future__ import annotations

from ..ir.builder import Builder
from ..ir.calls import calls_bottom_up
from ..ir.core import Block, Function, Module, Op, Value, replace_all_uses
from ..ir.types import TensorType
from ..ops.control import CALL
from ..passes.dce import dce_function
from .binomial import Chain, Leaf, Plan, Segments, Split, expand
from .loop_pairs import LoopPair, Rewrite
from .loop_pieces import I64, LoopPieces
from .parts import length


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


class LoopRewriter(LoopPieces):
    """Emits the forward and reverse sweeps of one `LoopPair` under one plan."""

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
