"""Tape options of a segment from an exact MILP over that segment alone.

`tapes` enumerates which tape values a segment keeps, and recomputes each dropped one once,
right before its first use in the segment's reverse, holding it to its last use. Inside a
segment that is not a chain (attention, a feed-forward beside its skip) that is not the
best use of memory: a value read twice can be recomputed twice and freed in between, a value
that is not in the tape (an intermediate of the softmax) can be kept to make a dropped one
cheap, and clones can wait for the op that needs them. The MILP here decides all of that for
one segment, under the option's own memory (bytes kept until its reverse, bytes held during
it), Checkmate-style over the segment's values and the times of its reverse:

* ``K[v]``: `v` is kept from the forward pass until the reverse starts;
* ``L[v, t]``: `v` (its original or latest clone) is held during op ``t`` of the reverse;
  forced where op ``t`` reads it; held only if held at ``t-1`` (or kept, at the start) or
  cloned at ``t``;
* ``R[v, t]``: a clone of `v` right before op ``t`` where the window reads it or a clone
  of a user goes (so that the model depends on the segment's `tapes.signature` alone); its
  operands from the segment held at ``t``; the segment's input and the function's inputs
  are there (the chain holds them).

Minimize the clones' FLOPs (then, by weights worth less than one FLOP in all, the bytes
kept and held) with the kept bytes at most ``abar`` and the held bytes at every time at
most ``rev``. Each enumerated option is the incumbent of the solve at its own ``abar`` and
``rev``, as a cutoff (`highs`: at most its FLOPs): the solution recomputes no more and
holds no more, and often less, since the model frees a kept value after its last use
where the enumeration counts it for the whole reverse. One more solve per option, at a
``rev`` halfway down to the bytes always kept, may find a point the enumeration cannot
reach. The new options join the enumerated ones, and those no other beats are kept. The segment's reverse is modelled as the MILP's window
alone: what the DP adds around it (``over``, the segment's input) is the chain's, as for the
enumerated options.

Every solve has a deadline (`SECONDS`); one stopped there keeps its best solution, if any
(the incumbent stays among the options anyway), and is counted in `Report` as not proven. The options are computed once per segment structure in a process (`refine_cached`):
blocks repeat within a network and across the budgets of a sweep. Measured on transformer
blocks, the segments solve in 1 to 2 ms each, far under the deadline
(benchmarks/remat_warm_start.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..ir.core import Value
from .dag import Problem
from .tapes import TapeOption, closure, pareto, working_set

SECONDS = 0.05        # per solve
MAX_VARIABLES = 3000  # a larger segment keeps its enumerated options
_CACHE: dict[tuple, tuple[list[TapeOption], Report]] = {}    # by `tapes.signature`
_CACHE_SIZE = 1024


@dataclass
class Report:
    """What the segment MILPs did, summed over the segment structures that ran them."""
    segments: int = 0         # distinct segment structures whose MILP ran
    solves: int = 0
    proven: int = 0           # proved optimal (or that nothing fits the caps)
    stopped: int = 0          # stopped at the deadline: their best solution kept
    gap: float | None = 0.0   # the largest relative gap of a stopped solve (None: unknown)
    improved: int = 0         # options found that the enumeration did not have
    seconds: float = 0.0      # spent in this schedule (structures solved before: cached)

    def add(self, other: "Report", seconds: bool = True) -> None:
        for k in ("segments", "solves", "proven", "stopped", "improved"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.gap = None if self.gap is None or other.gap is None else max(self.gap, other.gap)
        self.seconds += other.seconds if seconds else 0.0

    def as_dict(self) -> dict:
        return {k: round(v, 3) if k == "seconds" else v for k, v in vars(self).items()}


class SegmentModel:
    """The MILP of one segment (see the module docstring), built once, solved per cap."""

    def __init__(self, prob: Problem, ops: list[int], cut: Value | None, tape: set[Value],
                 start: int, cost: dict[int, float]):
        self.prob, self.ops, self.cut, self.tape, self.start, self.cost = \
            prob, ops, cut, tape, start, cost
        B, inside = prob.boundary, set(ops)
        vals = [prob.ops[k].result for k in ops if len(prob.ops[k].results) == 1]
        rev_uses = {v: [t for t in prob.uses[v] if t >= B] for v in vals}
        # always kept: the output, and tape values that cannot be recomputed in the window
        self.always = ({cut} if cut is not None else set()) | \
            {v for v in tape if v not in prob.clone_times} | \
            {v for v in vals if any(t < start for t in rev_uses[v])}
        self.const = sum(prob.nbytes[v] for v in self.always)
        self.vals = [v for v in vals if v not in self.always]
        col: dict[tuple, int] = {}
        lb: list[float] = []
        cst: list[float] = []

        def var(key, low=0.0, c=0.0):
            col[key] = len(lb)
            lb.append(low)
            cst.append(c)
        # clone times from the segment alone (a use in the window, or a user's clone), so
        # that the model depends on the segment's `tapes.signature` only
        ctimes: dict[Value, list[int]] = {}
        users: dict[Value, list[Value]] = {}
        for w in self.vals:
            for u in set(prob.operands(w)):
                users.setdefault(u, []).append(w)
        for v in reversed(self.vals):
            if v in prob.clone_times:
                ts = set(rev_uses[v]) | {t for w in users.get(v, ()) for t in ctimes.get(w, ())}
                if ts:
                    ctimes[v] = sorted(ts)
        need_at = {v: list(rev_uses[v]) + [t for w in users.get(v, ()) for t in ctimes.get(w, ())]
                   for v in self.vals}
        self.last = {v: max(ts) for v, ts in need_at.items() if ts}
        # a model past MAX_VARIABLES is not solved: counted, not built (a dense block's
        # segment holds thousands of values over thousands of times)
        self.variables = sum(1 + max(self.last.get(v, start - 1) - start + 1, 0)
                             + sum(t <= self.last.get(v, -1) for t in ctimes.get(v, ()))
                             for v in self.vals)
        self.h = self.caps = None
        if self.variables > MAX_VARIABLES:
            self.col, self.lb, self.cst, self.rows, self.memory, self.kept_row = \
                {}, [], [], [], [], {}
            return
        for v in self.vals:
            var(("K", v))
            for t in range(start, self.last.get(v, start - 1) + 1):
                var(("L", v, t), 1.0 if t in rev_uses[v] else 0.0)
            for t in ctimes.get(v, ()):
                if t <= self.last.get(v, -1):
                    var(("R", v, t), 0.0, float(cost[prob.born[v]]))
        # among schedules of equal FLOPs (integers apart), the fewest bytes kept and held:
        # weights that add up to less than one FLOP
        held = {c: prob.nbytes[key[1]] for key, c in col.items() if key[0] in "KL"}
        scale = 0.5 / (sum(held.values()) + 1)
        for c, nb in held.items():
            cst[c] = nb * scale
        self.col, self.lb, self.cst = col, lb, cst
        rows: list[tuple[dict[int, float], float, float]] = []
        for v in self.vals:
            for t in range(start, self.last.get(v, start - 1) + 1):
                prev = col[("K", v)] if t == start else col[("L", v, t - 1)]
                row = {col[("L", v, t)]: 1.0, prev: -1.0}
                if ("R", v, t) in col:
                    row[col[("R", v, t)]] = -1.0
                rows.append((row, -np.inf, 0.0))
        for (kind, v, *rest), c in list(col.items()):
            if kind != "R":
                continue
            t = rest[0]
            rows.append(({c: 1.0, col[("L", v, t)]: -1.0}, -np.inf, 0.0))
            for u in set(prob.operands(v)):
                if prob.born[u] in inside and u not in self.always:
                    if ("L", u, t) not in col:      # cannot be held there: no clone
                        rows.append(({c: 1.0}, -np.inf, 0.0))
                    else:
                        rows.append(({c: 1.0, col[("L", u, t)]: -1.0}, -np.inf, 0.0))
        self.rows = rows
        end = max(self.last.values(), default=start)
        self.memory = [{col[("L", v, t)]: float(prob.nbytes[v]) for v in self.vals
                        if ("L", v, t) in col} for t in range(start, end + 1)]
        self.kept_row = {col[("K", v)]: float(prob.nbytes[v]) for v in self.vals}
        self.h = self.caps = None

    @property
    def size(self) -> int:
        return self.variables

    def _highs(self):
        """The model in HiGHS, once; its last rows are the caps (`solve` sets them): the
        kept bytes, the clones' FLOPs (the cutoff), the held bytes at each time."""
        if self.h is None:
            from .highs import build, triplets
            n = len(self.lb)
            flops = {c: self.cst[c] for key, c in self.col.items() if key[0] == "R"}
            caps = [(self.kept_row, -np.inf, 0.0), (flops, -np.inf, np.inf)] + \
                [(row, -np.inf, 0.0) for row in self.memory if row]
            rows, cols, vals, lo, hi = triplets(self.rows + caps)
            self.caps = np.arange(len(self.rows), len(lo), dtype=np.int32)
            self.h = build(self.cst, rows, cols, vals, lo, hi, self.lb, np.ones(n),
                           np.ones(n))
        return self.h

    def solve(self, abar: int, rev: int, cutoff: float | None, seconds: float):
        """The least FLOPs of clones keeping at most `abar` bytes and holding at most `rev`
        during the reverse, then the fewest bytes; `cutoff`: at most that many FLOPs (an
        incumbent's: the search prunes everything costlier)."""
        from .highs import run
        h = self._highs()
        k = len(self.caps)
        hi = np.full(k, float(rev - self.const))
        hi[0] = float(abar - self.const)
        hi[1] = np.inf if cutoff is None else float(cutoff)
        h.changeRowsBounds(k, self.caps, np.full(k, -np.inf), hi)
        return run(h, seconds)

    def option(self, x: np.ndarray) -> TapeOption:
        """The tape option of a solution."""
        prob, ops, start = self.prob, self.ops, self.start
        pos = {k: j for j, k in enumerate(ops)}
        x = np.round(x).astype(int)
        kept = {v for v in self.vals if x[self.col[("K", v)]]}
        again = sorted((pos[prob.born[v]], rest[0] - start)
                       for (kind, v, *rest), c in self.col.items() if kind == "R" and x[c])
        held = max((sum(int(w) for c, w in row.items() if x[c]) for row in self.memory),
                   default=0)
        keep_all = kept | self.always
        abar = sum(prob.nbytes[v] for v in keep_all)
        inside = set(ops)
        cut = self.cut
        keep_ops = closure(prob, keep_all - ({cut} if cut not in self.tape else set()), inside)
        all_ops = keep_ops | closure(prob, [cut] if cut is not None else [], inside)
        return TapeOption(
            keep=tuple(sorted(pos[prob.born[v]] for v in keep_all
                              if v is not cut or cut in self.tape)),
            again=tuple(again), abar=abar, rev=max(abar, self.const + held),
            fwt=max(working_set(prob, ops, keep_all)[1], abar),
            ua=sum(self.cost[k] for k in all_ops), ut=sum(self.cost[k] for k in keep_ops),
            extra=float(sum(self.cost[ops[p]] for p, _ in again)),
            ua_ops=tuple(sorted(pos[k] for k in all_ops)),
            ut_ops=tuple(sorted(pos[k] for k in keep_ops)))


def refine(prob: Problem, ops: list[int], cut: Value | None, tape: set[Value],
           start: int | None, cost: dict[int, float], options: list[TapeOption],
           seconds: float | None = None) -> tuple[list[TapeOption], Report]:
    """`options` with those the segment's MILP finds added (see the module docstring)."""
    rep = Report()
    if start is None or len(options) < 2:      # nothing droppable: a chain link
        return options, rep
    t0 = time.perf_counter()
    model = SegmentModel(prob, ops, cut, tape, start, cost)
    if not model.vals or model.size > MAX_VARIABLES:
        return options, rep
    seconds = SECONDS if seconds is None else seconds
    rep.segments = 1
    found = []
    for o in options:
        caps = [(o.abar, o.rev, o.extra)]      # its own caps, no more FLOPs than it
        lower = model.const + (o.rev - model.const) // 2
        if o.abar <= lower < o.rev:            # less held during the reverse
            caps.append((o.abar, lower, None))
        for abar, rev, cutoff in caps:
            res = model.solve(abar, rev, cutoff, seconds)
            rep.solves += 1
            if res.status in ("optimal", "infeasible"):
                rep.proven += 1
            else:
                rep.stopped += 1
                rep.gap = None if rep.gap is None or res.gap is None else max(rep.gap, res.gap)
            if res.x is not None:
                found.append(model.option(res.x))
    known = {o.quantities for o in options}
    out = pareto(options + found)
    rep.improved = sum(o.quantities not in known for o in out)
    rep.seconds = time.perf_counter() - t0
    return out, rep


def refine_cached(key: tuple, *args) -> tuple[list[TapeOption], Report, bool]:
    """`refine` once per segment structure (`key`, its `tapes.signature`) in this process:
    blocks repeat within a program and across the budgets of a sweep. (options, report,
    whether it came from the cache)."""
    if key in _CACHE:
        return _CACHE[key] + (True,)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[key] = refine(*args)
    return _CACHE[key] + (False,)
