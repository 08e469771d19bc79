"""Tape options of a chain segment: which of the values its reverse reads are kept, and which
are recomputed during its reverse instead.

A segment that is not itself a chain (a transformer block: attention beside the residual
branch, a feed-forward beside its skip) holds several values for its reverse. The chain DP
(`chain`) would keep them all or recompute them all; here each segment gets a small set of
options in between. Option ``S`` keeps the droppable tape values in ``S`` (and the rest of
the tape: the segment's output, values that cannot be recomputed); every dropped value is
recomputed during the segment's own reverse, from the segment's input and ``S``, once, right
before its first use there (its operands in the segment just before theirs), and held until
its last use. What an option costs and holds, in the DP's terms:

* ``abar``: bytes kept until the reverse of the segment (the kept values and the output);
* ``rev``: the most bytes held during that reverse (``abar`` and the clones live at once);
* ``fwt``: the working set of the segment run forward keeping them;
* ``ua``, ``ut``: FLOPs of computing the output and the kept values (``ua``) or the kept
  values alone (``ut``) from the segment's input; ``extra``: FLOPs of the clones.

Up to `MAX_ENUM` droppable values, every subset is evaluated (an exact enumeration of this
option model); beyond, the values are dropped greedily, cheapest FLOPs per byte first, in
two orders: by the value's own op, and by what recomputing it with the rest of the tape
kept costs (`_alone`). The
options that no other beats on every one of these quantities are kept (at most
`MAX_OPTIONS`, spread over ``abar``). Option 0 keeps the whole tape. Blocks repeat, so the
options are computed once per structure (`signature`) and stored relative to the segment:
positions of its ops, times counted from the start of its reverse.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from ..ir.core import Value
from .dag import Problem

MAX_ENUM = 10       # droppable tape values: every subset up to this many
MAX_OPTIONS = 8     # options per segment, at most
MAX_PREFIXES = 32   # greedy options of a segment past MAX_ENUM droppable values, at most


@dataclass(frozen=True)
class TapeOption:
    keep: tuple[int, ...]                  # positions of the kept droppable values
    again: tuple[tuple[int, int], ...]     # (position, time from the reverse's start): clones
    abar: int
    rev: int
    fwt: int
    ua: float
    ut: float
    extra: float
    ua_ops: tuple[int, ...] = ()           # positions of the ops computing output and kept
    ut_ops: tuple[int, ...] = ()           # ... the kept values alone

    @property
    def quantities(self) -> tuple:
        """What the DP weighs."""
        return (self.abar, self.rev, self.fwt, self.ua, self.ut, self.extra)


def working_set(prob: Problem, ops: list[int], keep: set[Value]) -> tuple[int, int]:
    """Peak bytes of the segment's own values while its ops run forward: each freed after
    its last use in the segment, or (second) the values in `keep` held to the end."""
    B, inside = prob.boundary, set(ops)
    nb = prob.nbytes
    live_n = live_t = peak_n = peak_t = 0
    dies: dict[int, list[Value]] = {}
    for k in ops:
        for r in prob.ops[k].results:
            last = max([t for t in prob.uses.get(r, []) if t < B and t in inside], default=k)
            dies.setdefault(last, []).append(r)
            live_n += nb[r]
            live_t += nb[r]
        peak_n, peak_t = max(peak_n, live_n), max(peak_t, live_t)
        for r in dies.pop(k, ()):
            live_n -= nb[r]
            live_t -= 0 if r in keep else nb[r]
    return peak_n, peak_t


def signature(prob: Problem, ops: list[int], cut: Value | None, tape: set[Value],
              start: int | None, cost: dict[int, float]) -> tuple:
    """Everything the options of a segment depend on, relative to the segment: segments
    with the same signature have the same options."""
    pos = {k: j for j, k in enumerate(ops)}
    sig = []
    for k in ops:
        op = prob.ops[k]
        refs = tuple(("in", pos[prob.born[u]]) if prob.born.get(u, -1) in pos
                     else ("out", prob.nbytes.get(u, 0)) for u in op.operands)
        res = tuple((str(r.type), prob.nbytes[r], r in tape, r is cut,
                     _reverse_uses(prob, r, cut, start)) for r in op.results)
        sig.append((op.name, repr(sorted(op.attrs.items(), key=lambda kv: kv[0])), refs, res,
                    cost[k]))
    return tuple(sig)


def _reverse_uses(prob: Problem, v: Value, cut: Value | None, start: int | None):
    """When the reverse reads `v`, counted from `start`, where it matters: not for the
    output (always kept) nor for values read before `start` (never dropped)."""
    ts = [t - start for t in prob.uses[v] if t >= prob.boundary] if start is not None else []
    return None if v is cut or start is None else "early" if min(ts, default=0) < 0 \
        else tuple(ts)


def closure(prob: Problem, roots, inside: set[int]) -> set[int]:
    """Ops in `inside` that `roots` depend on, through values defined in `inside`."""
    seen: set[int] = set()
    stack = [prob.born[v] for v in roots]
    while stack:
        k = stack.pop()
        if k in seen or k not in inside:
            continue
        seen.add(k)
        stack += [prob.born[u] for u in prob.ops[k].operands if prob.born.get(u, -1) >= 0]
    return seen


def _option(prob: Problem, ops: list[int], cut: Value | None, tape: set[Value],
            dropped: tuple[Value, ...], start: int, cost: dict[int, float]) -> TapeOption | None:
    """The option that drops `dropped`, or None when a value it needs cannot be
    recomputed in the segment's reverse."""
    B, nb, inside = prob.boundary, prob.nbytes, set(ops)
    pos = {k: j for j, k in enumerate(ops)}
    kept = (tape - set(dropped)) | ({cut} if cut is not None else set())
    # the values to recompute: the dropped ones and what they need that is not kept
    need: set[Value] = set()
    stack = list(dropped)
    while stack:
        v = stack.pop()
        if v in need:
            continue
        if v not in prob.clone_times:
            return None
        need.add(v)
        stack += [u for u in prob.operands(v) if prob.born[u] in inside and u not in kept]
    users: dict[Value, list[Value]] = {}
    for v in need:
        for u in prob.operands(v):
            if u in need:
                users.setdefault(u, []).append(v)
    when: dict[Value, int] = {}
    last: dict[Value, int] = {}
    for v in sorted(need, key=lambda v: -prob.born[v]):       # users first
        rev = [t for t in prob.uses[v] if t >= B]
        ts = rev + [when[w] for w in users.get(v, ())]
        if not ts or min(ts) < start:
            return None
        when[v], last[v] = min(ts), max(ts)
    # the most bytes of clones held at once: a sweep over their [when, last] intervals
    delta: dict[int, int] = {}
    for v in need:
        delta[when[v]] = delta.get(when[v], 0) + nb[v]
        delta[last[v] + 1] = delta.get(last[v] + 1, 0) - nb[v]
    held = live = 0
    for t in sorted(delta):
        live += delta[t]
        held = max(held, live)
    abar = sum(nb[v] for v in kept)
    keep_ops = closure(prob, kept - ({cut} if cut not in tape else set()), inside)
    all_ops = keep_ops | closure(prob, [cut] if cut is not None else [], inside)
    return TapeOption(
        keep=tuple(sorted(pos[prob.born[v]] for v in tape - set(dropped))),
        again=tuple(sorted((pos[prob.born[v]], when[v] - start) for v in need)),
        abar=abar, rev=abar + held,
        fwt=max(working_set(prob, ops, tape - set(dropped))[1], abar),
        ua=sum(cost[k] for k in all_ops), ut=sum(cost[k] for k in keep_ops),
        extra=sum(cost[prob.born[v]] for v in need),
        ua_ops=tuple(sorted(pos[k] for k in all_ops)),
        ut_ops=tuple(sorted(pos[k] for k in keep_ops)))


def _dominated(a: TapeOption, b: TapeOption) -> bool:
    """b is no worse than a in every quantity and differs."""
    qa, qb = a.quantities, b.quantities
    return qa != qb and all(y <= x for x, y in zip(qa, qb))


def segment_options(prob: Problem, ops: list[int], cut: Value | None, tape: set[Value],
                    start: int | None, cost: dict[int, float]) -> list[TapeOption]:
    """The options of one segment, the whole tape first (see the module docstring)."""
    full = _option(prob, ops, cut, tape, (), start if start is not None else 0, cost)
    if start is None:
        return [full]
    B = prob.boundary
    droppable = [v for v in sorted(tape - {cut}, key=lambda v: prob.born[v])
                 if v in prob.clone_times and all(t >= start for t in prob.uses[v] if t >= B)]
    if len(droppable) <= MAX_ENUM:
        subsets = (d for r in range(1, len(droppable) + 1)
                   for d in combinations(droppable, r))
    else:
        # two orders: by the value's own FLOPs, and with what its recomputation needs
        inside = set(ops)
        orders = [sorted(droppable, key=lambda v: cost[prob.born[v]] / max(prob.nbytes[v], 1)),
                  sorted(droppable, key=lambda v: _alone(prob, v, tape, inside, cost)
                         / max(prob.nbytes[v], 1))]
        subsets = iter(dict.fromkeys(tuple(sorted(order[:r], key=lambda v: prob.born[v]))
                                     for order in orders for r in _prefixes(len(order))))
    opts = [full]
    for d in subsets:
        o = _option(prob, ops, cut, tape, d, start, cost)
        if o is not None:
            opts.append(o)
    return pareto(opts)


def _alone(prob: Problem, v: Value, tape: set[Value], inside: set[int],
           cost: dict[int, float]) -> float:
    """FLOPs of recomputing `v` alone, the rest of the tape kept: its op and the ops of the
    segment between it and kept values (a batch norm's output is cheap from its kept
    centred input, the centred input dear: the convolution before it is not kept)."""
    seen: set[Value] = set()
    stack, total = [v], 0.0
    while stack:
        w = stack.pop()
        if w in seen:
            continue
        seen.add(w)
        total += cost[prob.born[w]]
        stack += [u for u in prob.operands(w) if prob.born[u] in inside and u not in tape]
    return total


def _prefixes(n: int) -> list[int]:
    """How many of `n` greedily ordered values to drop: every count up to `MAX_PREFIXES`,
    beyond that as many counts spread evenly, the last included (each option costs a pass
    over the segment: a dense block's segment has hundreds of droppable values, and at most
    `MAX_OPTIONS` options survive)."""
    if n <= MAX_PREFIXES:
        return list(range(1, n + 1))
    return sorted({1 + round(j * (n - 1) / (MAX_PREFIXES - 1)) for j in range(MAX_PREFIXES)})


def pareto(opts: list[TapeOption]) -> list[TapeOption]:
    """`opts[0]` (the whole tape), then the options that no other beats, at most
    `MAX_OPTIONS` in all, spread over ``abar``; of equal ones, the first."""
    full = opts[0]
    seen: dict[tuple, TapeOption] = {}
    for o in opts:
        if not any(_dominated(o, p) for p in opts):
            seen.setdefault(o.quantities, o)
    rest = sorted((o for q, o in seen.items() if q != full.quantities),
                  key=lambda o: (o.abar, o.extra))
    if len(rest) > MAX_OPTIONS - 1:
        n = MAX_OPTIONS - 1
        rest = [rest[round(j * (len(rest) - 1) / (n - 1))] for j in range(n)]
    return [full] + rest
