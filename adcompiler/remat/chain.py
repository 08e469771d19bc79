"""Straight-line remat as a chain: the forward code cut into segments, solved by a dynamic
program (Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, "Optimal checkpointing for
heterogeneous chains", the Rotor DP).

Most networks are chains of blocks: the cut points of the forward code (program points
where one forward value alone is live, `saved.chain_boundaries`) that the reverse sweep also
reads split it into segments 1..K. Segment ``i`` has its own costs and sizes: the FLOPs to
compute its output ``c_i`` from ``c_{i-1}`` (``uf``) and to recompute its tape (the values
its reverse reads, ``ut``; both, ``ua``), the bytes of ``c_i`` (``a``), of its tape with
``c_i`` (``abar``), its forward working set and the bytes the schedule cannot move during its
reverse (``over``: gradients, adjoints, inputs not yet freed, from `Problem.fixed`, and
no more than the exact store-all profile shows there beside the tapes it holds).

The DP, with ``m`` the bytes left for held values (in units that divide the checkpoints'
sizes when they can, counted from the least ``over``; sizes rounded to units):

* ``C[s, t, m]``: the least FLOPs to run the reverse of segments t..s with ``c_{s-1}`` held;
  a single segment recomputes its tape; otherwise either recompute all of segment s and
  keep its tape (``C[s+1, t, m - abar_s] + ua_s``), or run forward to a later ``c_{s'-1}``,
  keep it, and solve both sides (``uf_s..uf_{s'-1} + C[s', t, m - a_{s'-1}] + C[s, s'-1, m]``);
* ``D[s, m]``: the same in the original forward pass, where running forward is free, and
  one more choice: keep nothing of s..s'-1 and recompute all of it from ``c_{s-1}`` right
  before the reverse of s' (``ua_s..ua_{s'-1} + D[s'+1, m - abar_{s'}]``), so that none of
  it is held while the reverse of the later segments runs (the reverse of s' reads
  ``c_{s'-1}``, which Rotor's chains would keep from the forward pass).

Where the DP keeps segment s's tape (in ``C``, ``D`` and for one segment), it chooses
among the segment's tape options (`tapes`): keep part of the tape (``abar`` of the option
held instead) and recompute the rest during the reverse of s (the option's FLOPs added, its
bytes there counted), so that inside a segment that is not a chain (attention beside a
residual branch) cheap values are recomputed and costly ones kept.

The plan becomes clones (`dag.apply_clones`): each recomputation pass goes right before the
reverse of the segment it serves (the reverse ops carry their primal op's location), and
each clone replaces the value from there on, so a checkpoint lives until the pass that
recomputes it again. The exact peak then comes from `memory.predict_peak`; while it misses
the budget, the plan for fewer units is taken (`solve_chain`). The DP is optimal for its
chain model (checkpoints only at the segments' ends, a segment's tape kept as one of its
options); the memory model is checked on its plan, not optimized.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..ir.core import Module, Value
from ..memory.flops import op_flops
from .dag import Problem, recomputable
from .saved import chain_boundaries
from .tapes import TapeOption, closure, segment_options, signature, working_set

INF = float("inf")
UNITS = 128            # memory resolution of the DP: the budget in this many units
COARSE = 32            # ... when looking for the least peak first
SECOND_FINE = 48       # the second chain of `solve_chains` in UNITS up to this many segments
MAX_SEGMENTS = 192     # longer chains are coarsened (adjacent segments merged)


@dataclass
class Chain:
    stages: list[list[int]]                   # forward op indices of each segment
    cut: list[Value | None]                   # c_i, the output of segment i (None: last)
    a: list[int]                              # bytes of c_i (a[0] = 0: the inputs)
    abar: list[int]                           # bytes of the tape of i and c_i
    fwn: list[int]                            # working set of segment i run forward
    fwt: list[int]                            # ... keeping its tape
    over: list[int]                           # bytes not held by the schedule, in reverse
    start: list[int | None]                   # the time of segment i's recomputation pass
    need_c: list[list[int]] = field(default_factory=list)     # ops computing c_i
    need_t: list[list[int]] = field(default_factory=list)     # ops computing the tape
    uf: list[float] = field(default_factory=list)
    ut: list[float] = field(default_factory=list)
    ua: list[float] = field(default_factory=list)
    raw_over: list[int] = field(default_factory=list)   # `over` before the calibration
    options: list[list[TapeOption]] = field(default_factory=list)   # per segment (`tapes`)

    @property
    def size(self) -> int:
        return len(self.stages)


def _merge_single_ops(prob: Problem, cuts: list[Value]) -> list[Value]:
    """The cuts without those that end a one-op segment followed by a segment of several
    ops: that op's output becomes a tape value of the next segment, which its options may
    drop and recompute (a layernorm before a feed-forward block), where as a cut it could
    only be kept or recomputed with everything after it. Chains of one-op segments keep
    every cut."""
    ends = [-1] + [prob.born[c] for c in cuts] + [prob.boundary - 1]
    return [c for i, c in enumerate(cuts)
            if not (ends[i + 1] - ends[i] == 1 and ends[i + 2] - ends[i + 1] > 1)]


def build_chain(prob: Problem, module: Module, dims, with_options: bool = True,
                merge: bool = True) -> Chain | None:
    """The chain of segments of `prob`'s forward code, or None when it has fewer than 2;
    `with_options`: each segment's tape options (`tapes`), else its whole tape only;
    `merge`: one-op segments merged into the next (`_merge_single_ops`)."""
    B = prob.boundary
    read = set(prob.reverse_uses)
    cuts = [c for c in chain_boundaries(prob) if c in read]
    if merge:
        cuts = _merge_single_ops(prob, cuts)
    if len(cuts) > MAX_SEGMENTS:                 # coarsen evenly
        step = len(cuts) / MAX_SEGMENTS
        cuts = [cuts[int((k + 1) * step) - 1] for k in range(MAX_SEGMENTS)]
    if not cuts:
        return None
    ends = [prob.born[c] for c in cuts]
    if ends[-1] < B - 1:
        ends.append(B - 1)
    K = len(ends)
    if K < 2:
        return None
    stage_of = [0] * B
    stages, lo = [], 0
    for i, e in enumerate(ends):
        stages.append(list(range(lo, e + 1)))
        for k in range(lo, e + 1):
            stage_of[k] = i
        lo = e + 1
    cut: list[Value | None] = list(cuts[:K]) + [None] * (K - len(cuts))
    tape: list[list[Value]] = [[] for _ in range(K)]
    for v in prob.reverse_uses:
        if 0 <= prob.born[v] < B:
            tape[stage_of[prob.born[v]]].append(v)
    nb = prob.nbytes
    # the reverse of segment i: reverse ops carrying the location of one of its ops
    where: dict = {}
    for k in range(B):
        loc = prob.ops[k].loc
        if loc is not None:
            where.setdefault(str(loc), set()).add(stage_of[k])
    window: list[list[int]] = [[] for _ in range(K)]
    for t in range(B, len(prob.ops)):
        loc = prob.ops[t].loc
        for i in where.get(str(loc), ()) if loc is not None else ():
            window[i].append(t)
    # bytes the schedule does not hold (fixed bytes and the inputs still live), and all
    # live bytes under store-all; difference arrays over the times
    T = len(prob.ops)
    d_in, d_all = [0] * (T + 1), [0] * (T + 1)
    for v in prob.free:
        if prob.uses[v]:
            lo, hi = prob.born[v] + 1, min(prob.uses[v][-1], T - 1)
            d_all[lo] += nb[v]
            d_all[hi + 1] -= nb[v]
            if prob.born[v] < 0:
                d_in[lo] += nb[v]
                d_in[hi + 1] -= nb[v]
    base, live = list(prob.fixed), list(prob.fixed)
    run_in = run_all = 0
    for t in range(T):
        run_in += d_in[t]
        run_all += d_all[t]
        base[t] += run_in
        live[t] += run_all
    start: list[int | None] = []
    over: list[int] = []
    raw_over: list[int] = []
    held = 0            # store-all holds the tapes of segments 0..i during i's reverse
    for i in range(K):
        held += sum(nb[v] for v in set(tape[i]) | ({cut[i]} if cut[i] is not None else set()))
        first = [t for v in tape[i] for t in prob.uses[v] if t >= B]
        ts = sorted(window[i]) or sorted(first)
        start.append(ts[0] if ts else None)
        span = range(ts[0], ts[-1] + 1) if ts else range(0)
        raw = max((base[t] for t in span), default=0)
        raw_over.append(raw)
        # at most what store-all shows beside the tapes it holds there
        over.append(max(0, min(raw, max((live[t] for t in span), default=0) - held)))
    ch = Chain(stages, cut, [0] * (K + 1), [0] * K, [0] * K, [0] * K, over, start)
    ch.raw_over = raw_over
    cost: dict[int, float] = {}
    options: dict[tuple, list[TapeOption]] = {}      # by segment structure: blocks repeat
    for i, ops in enumerate(stages):
        inside = set(ops)
        c = cut[i]
        ch.a[i + 1] = nb[c] if c is not None else 0
        ch.abar[i] = sum(nb[v] for v in set(tape[i]) | ({c} if c is not None else set()))
        ch.need_c.append(sorted(closure(prob, [c], inside)) if c is not None else [])
        ch.need_t.append(sorted(closure(prob, tape[i], inside)))
        for k in ops:
            if k not in cost:
                op = prob.ops[k]
                cost[k] = INF if not recomputable(op) else \
                    float(prob.cost.get(op.result, op_flops(op, dims, module)) + 1)
        ch.uf.append(sum(cost[k] for k in ch.need_c[i]))
        ch.ut.append(sum(cost[k] for k in ch.need_t[i]))
        ch.ua.append(sum(cost[k] for k in set(ch.need_c[i]) | set(ch.need_t[i])))
        # working sets: stage values live during each op, freed after their last use in
        # the segment (fwn), or with the tape kept to the end (fwt)
        fwn, fwt = working_set(prob, ops, set(tape[i]))
        ch.fwn[i] = fwn
        ch.fwt[i] = max(fwt, ch.abar[i])
        if with_options:
            key = signature(prob, ops, c, set(tape[i]), start[i], cost)
            if key not in options:
                options[key] = segment_options(prob, ops, c, set(tape[i]), start[i], cost)
            ch.options.append(options[key])
    return ch


@dataclass
class Plan:
    """What the DP found: its FLOPs (chain model), the clones, the units it worked in."""
    flops: float
    clones: dict[int, list[int]]
    unit: int


class _Tables:
    """The DP tables for one budget (in units of `unit` bytes)."""

    def __init__(self, ch: Chain, budget: int, units: int = UNITS):
        K, Q = ch.size, units
        self.ch, self.Q = ch, Q
        # every condition reads m >= bytes + over[.]: count from the least `over` up, in
        # units that divide the sizes of the checkpoints when they allow it
        self.floor = floor = min(ch.over)
        room = max(budget - floor, 1)
        g = 0
        for x in ch.a[1:] + ch.abar:
            g = math.gcd(g, x)
        q = -(-room // Q)
        if g:
            q = g * -(-q // g) if q > g else g // (g // q)
        self.unit = q
        near = lambda b: min(Q + 1, max(int(b > 0), (int(b) + q // 2) // q))              # noqa: E731
        up = lambda b: min(Q + 1, max(0, -(-(int(b) - floor) // q)))     # noqa: E731
        a = [near(x) for x in ch.a]
        abar = [near(x) for x in ch.abar]
        over = [up(x) for x in ch.over]                 # over[s] - floor, rounded up
        fwn = [near(x) for x in ch.fwn]
        fwt = [near(x) for x in ch.fwt]
        self.a, self.abar, self.over, self.fwn, self.fwt = a, abar, over, fwn, fwt
        # tape options (`tapes`): per segment and option, in units; padding never wins
        opts = [ch.options[i] if ch.options else
                [TapeOption((), (), ch.abar[i], ch.abar[i], ch.fwt[i], ch.ua[i], ch.ut[i], 0.0)]
                for i in range(K)]
        O = max(len(o) for o in opts)
        oab = np.full((K, O), Q + 1, dtype=np.int64)
        orv, ofw = oab.copy(), oab.copy()
        oua, out, oex = np.full((K, O), INF), np.full((K, O), INF), np.full((K, O), INF)
        for i, row in enumerate(opts):
            for o, op in enumerate(row):
                oab[i, o], orv[i, o], ofw[i, o] = near(op.abar), near(op.rev), near(op.fwt)
                oua[i, o], out[i, o], oex[i, o] = op.ua, op.ut, op.extra
        self.opts, self.oab = opts, oab
        m = np.arange(Q + 1)
        C = np.full((K, K, Q + 1), INF)      # C[s, t] (0-based, s <= t)
        SH = np.full((K, K, Q + 1), INF)     # SH[t, s'][m] = C[s', t][m - a_{s'}]
        Cc = np.full((K, K, Q + 1), -1, dtype=np.int16)   # -1: keep s's tape; s': split
        uf = np.array(ch.uf)
        cum = np.concatenate([[0.0], np.cumsum(np.where(np.isinf(uf), 0.0, uf))])
        cinf = np.concatenate([[0], np.cumsum(np.isinf(uf))])   # uf_s + .. + uf_{s'-1}:
        # cum[s'] - cum[s], or INF when a segment between cannot be recomputed
        a_, abar_, over_ = np.array(a), np.array(abar), np.array(over)
        fwt_, ua = np.array(fwt), np.array(ch.ua)
        FM = np.zeros((K, K), dtype=np.int64)          # FM[s, e] = max fwn[s..e]
        for s in range(K):
            FM[s, s:] = np.maximum.accumulate(np.array(fwn[s:]))

        def shifted(rows, by):
            """rows[i][m - by[i]] (INF below 0), for a stack of rows."""
            idx = m[None, :] - by[:, None]
            out = np.take_along_axis(rows, np.clip(idx, 0, Q), axis=1)
            out[idx < 0] = INF
            return out
        ks = np.arange(K)
        # one segment: its tape (an option's kept values, then its clones) from c_{s-1}
        need = np.maximum(ofw, orv) + over_[:, None]
        diag = np.where(m[None, None, :] >= need[:, :, None], (out + oex)[:, :, None], INF)
        C[ks, ks] = diag.min(axis=1)
        Cc[ks, ks] = -1 - diag.argmin(axis=1)
        SH[ks, ks] = shifted(C[ks, ks], a_[:K])
        for d in range(1, K):
            s = np.arange(K - d)
            t = s + d
            # keep the tape of s (an option of it): recompute all of s, then t..s+1, then
            # the reverse of s (with the option's clones); -1 - option in Cc
            b = shifted(np.repeat(C[s + 1, t], O, axis=0), oab[s].ravel())
            b = b.reshape(K - d, O, Q + 1) + (oua[s] + oex[s])[:, :, None]
            thr = np.maximum(orv[s] + over_[s][:, None], ofw[s] + over_[t][:, None])
            b[m[None, None, :] < thr[:, :, None]] = INF
            arg = b.argmin(axis=1)
            best = np.take_along_axis(b, arg[:, None, :], axis=1)[:, 0, :]
            keep = (-1 - arg).astype(np.int16)
            # forward to c_{s'-1} and keep it: s' = s + 1 + j, j in 0..d-1
            j = np.arange(d)
            sp = s[:, None] + 1 + j[None, :]
            cand = SH[t[:, None], sp] + C[s[:, None], sp - 1]
            run = np.where(cinf[sp] > cinf[s][:, None], INF, cum[sp] - cum[s][:, None])
            cand += run[:, :, None]
            fw = FM[s[:, None], sp - 1] + over_[t][:, None]
            cand[m[None, None, :] < fw[:, :, None]] = INF
            arg = cand.argmin(axis=1)
            val = np.take_along_axis(cand, arg[:, None, :], axis=1)[:, 0, :]
            better = val < best
            Cc[s, t] = np.where(better, arg + s[:, None] + 1, keep)
            C[s, t] = np.minimum(val, best)
            SH[t, s] = shifted(C[s, t], a_[s])
        # the original forward pass: D[s][m], s..K-1 left, running forward free. Besides
        # Rotor's two choices, a third: store nothing of s..s'-1 and recompute all of it
        # from c_{s-1} right before the reverse of s' (whose tape the forward keeps), so
        # that none of it is held while the later segments' reverse runs (choice K + s')
        D = np.full((K + 1, Q + 1), INF)
        Dc = np.zeros((K + 1, Q + 1), dtype=np.int16)
        DS = np.full((K + 1, Q + 1), INF)      # DS[s'] = D[s' + 1][m - abar_{s'}]
        D[K] = 0.0
        cua = np.concatenate([[0.0], np.cumsum(np.where(np.isinf(ua), 0.0, ua))])
        cuinf = np.concatenate([[0], np.cumsum(np.isinf(ua))])
        for s in range(K - 1, -1, -1):
            DS[s] = shifted(D[s + 1:s + 2], abar_[s:s + 1])[0]      # the whole tape kept
            # keep an option of s's tape: -1 - option
            b = shifted(np.repeat(D[s + 1:s + 2], O, axis=0), oab[s]) + oex[s][:, None]
            b[m[None, :] < (orv[s] + over[s])[:, None]] = INF
            arg = b.argmin(axis=0)
            best = b[arg, m]
            choice = (-1 - arg).astype(np.int16)
            sp = np.arange(s + 1, K + 1)
            cand = shifted(D[sp], a_[sp]) + C[s, sp - 1]
            k = np.argmin(cand, axis=0)
            val = cand[k, m]
            better = val < best
            best = np.where(better, val, best)
            choice = np.where(better, sp[k], choice)
            if s + 1 < K:
                jp = np.arange(s + 1, K)                  # s'
                held = np.cumsum(abar_[s:]) + over_[s:]   # during the reverse of s + j
                thr = np.maximum.accumulate(held)[1:]     # ... for every j up to s'
                thr = np.maximum(thr, np.maximum.accumulate(fwt_[s:K - 1]) + over_[jp])
                again = np.where(cuinf[jp] > cuinf[s], INF, cua[jp] - cua[s])
                jc = DS[jp] + again[:, None]
                jc[m[None, :] < thr[:, None]] = INF
                k = np.argmin(jc, axis=0)
                val = jc[k, m]
                better = val < best
                best = np.where(better, val, best)
                choice = np.where(better, K + jp[k], choice)
            D[s], Dc[s] = best, choice
        self.C, self.Cc, self.D, self.Dc = C, Cc, D, Dc

    def units(self, budget: int) -> int:
        """The units of `budget` (at most Q)."""
        return max(0, min(self.Q, (budget - self.floor) // self.unit))

    def least(self) -> int | None:
        """The fewest units at which the chain has a schedule."""
        ok = np.nonzero(np.isfinite(self.D[0]))[0]
        return int(ok[0]) if len(ok) else None

    def plan(self, m: int) -> Plan | None:
        """The clones of the DP's schedule with `m` units."""
        if not np.isfinite(self.D[0, m]):
            return None
        ch, a, abar = self.ch, self.a, self.abar
        passes: dict[int, set[int]] = {}

        def add(t, ops):
            if t is not None and ops:
                passes.setdefault(t, set()).update(ops)

        def again(i, o):
            """The clones of option `o` during the reverse of segment i."""
            for p, dt in self.opts[i][o].again:
                add(ch.start[i] + dt, [ch.stages[i][p]])

        def ops_of(i, o, field):
            return [ch.stages[i][p] for p in getattr(self.opts[i][o], field)]
        work = [("D", 0, ch.size - 1, m)]
        while work:
            kind, s, t, mm = work.pop()
            if kind == "D":
                if s >= ch.size:
                    continue
                c = int(self.Dc[s, mm])
                if c > ch.size:       # all of s..c'-1 again, right before the reverse of c'
                    c -= ch.size
                    add(ch.start[c], [k for i in range(s, c)
                                      for k in set(ch.need_c[i]) | set(ch.need_t[i])])
                    work.append(("D", c + 1, t, mm - abar[c]))
                    continue
                if c < 0:
                    again(s, -1 - c)
                    work.append(("D", s + 1, t, mm - self.oab[s, -1 - c]))
                else:       # C(s, c-1) runs after D(c): pushed first
                    work.append(("C", s, c - 1, mm))
                    work.append(("D", c, t, mm - a[c]))
                continue
            c = int(self.Cc[s, t, mm])
            if s == t:
                o = -1 - c
                add(ch.start[s], ops_of(s, o, "ut_ops") if o else ch.need_t[s])
                again(s, o)
                continue
            if c < 0:
                o = -1 - c
                add(ch.start[t], ops_of(s, o, "ua_ops") if o else
                    set(ch.need_c[s]) | set(ch.need_t[s]))
                again(s, o)
                work.append(("C", s + 1, t, mm - self.oab[s, o]))
            else:
                add(ch.start[t], [k for i in range(s, c) for k in ch.need_c[i]])
                work.append(("C", s, c - 1, mm))
                work.append(("C", c, t, mm - a[c]))
        clones = {t: sorted(ops) for t, ops in passes.items()}
        return Plan(float(self.D[0, m]), clones, self.unit)


def _least(ch: Chain, store_all: int, exact, tab: _Tables | None = None,
           units: int = UNITS) -> tuple[Plan, int] | None:
    """The DP's schedule of least peak and its exact peak: found in `tab` when given (a
    table for a budget near the least peak), else in coarse units of the store-all peak,
    then again in finer units."""
    if tab is None:
        tab = _Tables(ch, store_all, units=COARSE)
        m = tab.least()
        if m is None:
            return None
        fine = _Tables(ch, tab.floor + (m + 1) * tab.unit, units)
        tab = fine if fine.least() is not None else tab
    m = tab.least()
    if m is None:
        return None
    plan = tab.plan(m)
    return plan, exact(plan.clones)


def _first(ch: Chain, budget: int, exact, tries: int, units: int, model: Chain | None = None):
    """The DP's schedules for `budget` in `model` (default `ch`), fewer units by the
    shortfall while the exact peak misses (at most `tries`): ((plan, peak) or None, table)."""
    tab = _Tables(model or ch, budget, units)
    m = tab.units(budget)
    for _ in range(tries):
        plan = tab.plan(m) if m >= 0 else None
        if plan is None:
            break
        peak = exact(plan.clones)
        if peak <= budget:
            return (plan, peak), tab
        m -= max(1, -(-(peak - budget) // tab.unit))
    return None, tab


def _fallbacks(ch: Chain, budget: int, store_all: int, exact, tries: int, units: int):
    """After `_first`: the bytes alone for `over`, the least peak of that table, then the
    schedule of least peak (`min-memory`'s)."""
    got, tab = (None, None) if not ch.raw_over else \
        _first(ch, budget, exact, tries, units, replace(ch, over=ch.raw_over))
    if got is not None:
        return got
    for table in (tab, None):
        least = _least(ch, store_all, exact, table, units)
        if least is not None and least[1] <= budget:
            return least
    return None


def solve_chain(ch: Chain, budget: int | None, store_all: int, exact,
                tries: int = 4, units: int = UNITS) -> tuple[Plan, int] | None:
    """The DP's schedule for `budget` (None: the least peak) and its exact peak
    (`exact(clones)`). While the exact peak misses the budget (the chain model rounds sizes
    to its units and does not see every byte), the DP's schedule for fewer units is taken,
    fewer by the shortfall (at most `tries` schedules), first with `over` calibrated on the
    store-all profile, then with the bytes alone (more room kept); when neither has a
    schedule that fits, the schedule of least peak in the last table is tried, then the one
    of `budget` None (so that `min-memory`'s peak is always a budget that fits). None if
    nothing fits."""
    if budget is None:
        return _least(ch, store_all, exact, units=units)
    got, _ = _first(ch, budget, exact, tries, units)
    return got if got is not None else _fallbacks(ch, budget, store_all, exact, tries, units)


def solve_chains(prob: Problem, module: Module, dims, budget: int | None, store_all: int,
                 exact, tries: int = 4) -> tuple[list[Chain], tuple[Plan, int, Chain] | None]:
    """The chains of `prob` (one-op segments merged into the next, and every cut when that
    differs) and the DP's best schedule over them: the fewest FLOPs that fit `budget`, or
    (None) the least peak; (plan, exact peak, its chain). Beyond `SECOND_FINE` segments the
    second chain is solved in half the memory units (the DP's time grows as K^3). With a
    budget, `solve_chain`'s fallbacks run only when neither chain's first schedules fit,
    first on the chain whose model reaches the lower peak, and stop at the first that fits."""
    chains = [ch for ch in (build_chain(prob, module, dims),
                            build_chain(prob, module, dims, merge=False)) if ch is not None]
    if len(chains) == 2 and chains[0].stages == chains[1].stages:
        chains.pop()
    units = [UNITS // 2 if k and ch.size > SECOND_FINE else UNITS for k, ch in enumerate(chains)]
    if budget is None:
        got = [(solve_chain(ch, None, store_all, exact, units=u), ch)
               for ch, u in zip(chains, units)]
        got = [(g[1], g[0].flops, k, g, ch) for k, (g, ch) in enumerate(got) if g is not None]
    else:
        firsts = [(_first(ch, budget, exact, tries, u), ch, u) for ch, u in zip(chains, units)]
        got = [(g[0].flops, g[1], k, g, ch) for k, ((g, _), ch, _) in enumerate(firsts)
               if g is not None]
        if not got:
            def reach(tab):
                m = tab.least()
                return INF if m is None else tab.floor + m * tab.unit
            for (_, tab), ch, u in sorted(firsts, key=lambda f: reach(f[0][1])):
                g = _fallbacks(ch, budget, store_all, exact, tries, u)
                if g is not None:
                    got = [(g[0].flops, g[1], 0, g, ch)]
                    break
    if not got:
        return chains, None
    _, _, _, (plan, peak), ch = min(got, key=lambda c: c[:3])
    return chains, (plan, peak, ch)
