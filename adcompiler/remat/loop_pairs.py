"""The loop pairs remat rewrites: a forward loop, the reverse loop that reads its stacked
residuals, and what a rewrite of them stores and recomputes (`loops.rewrite_loop`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Function, Op, Value, uses
from ..ops.registry import has_trait
from .binomial import Plan


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
