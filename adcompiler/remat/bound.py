"""A lower bound on the recomputation any straight-line schedule needs under a byte budget.

Where the MILP is too large to bound a schedule (`milp.MAX_VARIABLES`), this bounds it by
one op at a time. During reverse op ``t``, every forward value the reverse still reads (at
``t`` or later) is either held (its bytes count at ``t``: a clone made before ``t`` is held
too) or recomputed after ``t``, by a clone of its op, which costs at least that op's FLOPs.
The bytes the schedule cannot move (`Problem.fixed`) and the values op ``t`` reads are
held in any case. So the FLOPs of the values left out of the room at ``t`` bound the
recomputation from below, and their least total is a 0-1 knapsack, bounded in turn by its
fractional relaxation (values kept by FLOPs per byte, the last one in part). The bound is
the largest over the reverse ops. It ignores that a recomputation needs its operands, and
that one value can be short at several ops, so it can be far below the optimum; it is valid
for every schedule of the clone model (`dag`), the chain DP's and the MILP's alike.
"""
from __future__ import annotations

import numpy as np

from .dag import Problem


def recompute_bound(prob: Problem, budget: int) -> float | None:
    """Recomputed FLOPs that every schedule of `prob` whose peak fits `budget` needs at
    least, or None when no schedule fits (the values that must be held at some reverse op
    exceed the budget already)."""
    B, n_ops = prob.boundary, len(prob.ops)
    if B >= n_ops:
        return 0.0
    held = np.asarray(prob.fixed[B:], dtype=np.float64)
    items: list[tuple[int, int, int]] = []      # (bytes, FLOPs, last reverse use)
    for v in prob.free:
        if prob.born[v] >= B:
            continue
        rev = [t for t in prob.uses[v] if t >= B]
        if not rev:
            continue
        if v not in prob.clone_times:   # not recomputable: held up to its last reverse use
            held[:rev[-1] - B + 1] += prob.nbytes[v]
            continue
        for t in rev:                   # read by op t: held there whatever the schedule
            held[t - B] += prob.nbytes[v]
        items.append((prob.nbytes[v], prob.cost[v], rev[-1], set(rev)))
    room = budget - held
    if (room < 0).any():
        return None
    if not items:
        return 0.0
    # most FLOPs per byte first: the order in which the relaxation keeps them
    items.sort(key=lambda it: -(it[1] / it[0]) if it[0] else -np.inf)
    nbytes = np.array([it[0] for it in items], dtype=np.float64)
    flops = np.array([it[1] for it in items], dtype=np.float64)
    last = np.array([it[2] for it in items])
    best = 0.0
    for t in range(B, n_ops):
        # the values still read after t and not read at t (those are held already)
        open_ = (last > t) & np.array([t not in it[3] for it in items])
        if not open_.any():
            continue
        b, f = nbytes[open_], flops[open_]
        before = np.concatenate(([0.0], np.cumsum(b)[:-1]))
        share = np.clip((room[t - B] - before) / np.where(b > 0, b, 1), 0.0, 1.0)
        share[b == 0] = 1.0
        best = max(best, float(np.sum(f * (1.0 - share))))
    return best
