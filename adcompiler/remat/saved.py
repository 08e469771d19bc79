"""Straight-line schedules given by the set of forward values they keep.

The exact solver (`milp`) decides per value and per time; the baselines here decide only
*what is saved* for the reverse sweep, and everything else the reverse sweep reads is
recomputed once, right before its first use there (with whatever it is computed from that
is not saved either, at the same time or earlier). That is how the classic policies are
stated, so they can be compared with the exact schedules on the same memory model:

* `chain_boundaries` + `chen_saved`: the forward part as a chain of segments (the program
  points where a single forward value is live), every k-th boundary saved, k about √n
  (Chen et al. 2016, on straight-line code);
* `mincut.mincut_saved`: a minimum cut of the joint graph weighted by bytes.

`clones_for` turns a saved set into the clone times `dag.apply_clones` takes.
"""
from __future__ import annotations

from ..ir.core import Value
from .dag import Problem


def forward_values(prob: Problem) -> list[Value]:
    """Values defined by the forward part, in program order."""
    return [r for op in prob.ops[:prob.boundary] for r in op.results]


def clones_for(prob: Problem, saved: set[Value]) -> dict[int, list[int]] | None:
    """Clone times that recompute every forward value the reverse sweep reads and `saved`
    lacks; None when one of them cannot be recomputed (see `dag.Problem.clone_times`)."""
    B = prob.boundary
    need: set[Value] = set()
    for v in prob.reverse_uses:
        if v not in saved and prob.born[v] >= 0:
            need.add(v)
    stack = list(need)
    while stack:
        v = stack.pop()
        if v not in prob.clone_times:
            return None
        for u in prob.operands(v):
            if prob.born[u] >= 0 and u not in saved and u not in need:
                need.add(u)
                stack.append(u)
    when: dict[Value, int] = {}
    users: dict[Value, list[Value]] = {}
    for v in need:
        for u in prob.operands(v):
            users.setdefault(u, []).append(v)
    for v in sorted(need, key=lambda v: -prob.born[v]):   # users before their operands
        ts = [t for t in prob.uses[v] if t >= B] + [when[w] for w in users.get(v, ())]
        when[v] = min(ts)
    clones: dict[int, list[int]] = {}
    for v, t in when.items():
        clones.setdefault(t, []).append(prob.born[v])
    return clones


def chain_boundaries(prob: Problem) -> list[Value]:
    """Forward values that are, right after their definition, the only forward value that
    the rest of the forward part still reads (function inputs and constants aside): the cut
    points of a chain of segments. One sweep with a difference array."""
    B = prob.boundary
    delta = [0] * (B + 1)
    last_fwd: dict[Value, int] = {}
    constant: set[Value] = set()
    for v in forward_values(prob):
        if all(u in constant for u in v.defining_op.operands):
            constant.add(v)
            continue
        ts = [t for t in prob.uses[v] if t < B]
        if ts and max(ts) > prob.born[v]:
            last_fwd[v] = max(ts)
            delta[prob.born[v]] += 1
            delta[last_fwd[v]] -= 1
    out, live = [], 0
    for t, op in enumerate(prob.ops[:B]):
        live += delta[t]          # values live across the gap after op t
        if live == 1 and len(op.results) == 1 and op.result in last_fwd:
            out.append(op.result)
    return out


def chen_saved(prob: Problem, k: int | None = None) -> set[Value]:
    """Every k-th chain boundary (k about √(boundaries) by default) and what cannot be
    recomputed: Chen et al.'s √n segments on straight-line code."""
    cuts = chain_boundaries(prob)
    if not cuts:
        return set(prob.reverse_uses)
    k = k or max(1, round(len(cuts) ** 0.5))
    saved = set(cuts[k - 1::k])
    saved |= {v for v in prob.reverse_uses if v not in prob.clone_times}
    return saved
