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

Each segment offers tape options (`tapes`, refined by an exact MILP over the segment alone,
`segment_milp`); `chain_dp` solves a chain by the DP; `chain_solve` turns its plans into
clones checked against the exact peak.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Module, Value
from ..memory.flops import op_flops
from .dag import Problem, recomputable
from .saved import chain_boundaries
from .segment_milp import Report, refine_cached
from .tapes import TapeOption, closure, segment_options, signature, working_set

INF = float("inf")
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
    milp: Report = field(default_factory=Report)        # the segment MILPs (`segment_milp`)

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
                merge: bool = True, segment_milp: bool = True) -> Chain | None:
    """The chain of segments of `prob`'s forward code, or None when it has fewer than 2;
    `with_options`: each segment's tape options (`tapes`), else its whole tape only;
    `merge`: one-op segments merged into the next (`_merge_single_ops`); `segment_milp`:
    the options refined by the segment's MILP (`segment_milp`, reported in `Chain.milp`)."""
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
                if segment_milp:
                    options[key], rep, cached = refine_cached(
                        key, prob, ops, c, set(tape[i]), start[i], cost, options[key])
                    ch.milp.add(rep, seconds=not cached)
            ch.options.append(options[key])
    return ch
