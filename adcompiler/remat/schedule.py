"""Choosing and applying a plan for every loop of an adjoint function.

`schedule` is what the ``remat`` pass runs. Per loop (forward loop + reverse loop with a
static trip count) the policy picks a `binomial.Plan`:

* ``sqrt``: about √n equal segments; ``revolve:C``: the binomial plan with C slots;
* ``budget:SIZE``: among plans with c slots and tapes of L steps (binomial plans, optimal for
  their c and L), the fewest recomputed steps whose *predicted peak of the whole function*
  fits SIZE. Each candidate's peak is computed exactly on its rewritten IR
  (`memory.predict_peak`); see `_best_for_loop` for the search. With several loops they are
  settled one at a time, largest residuals first (greedy across loops);
* ``min-memory``: the budget equal to the smallest peak any plan reaches (1 slot, 1 step).

Under ``budget`` and ``min-memory`` the straight-line code is scheduled next
(`straight.schedule_straight`, a MILP): loops first by the exact chain DP (with the least
peak they reach alone when the budget is beyond them), then the forward values outside
loops are stored or recomputed. The two steps are not optimized jointly.
Loops with symbolic trip counts keep every value (noted).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..diagnostics import AdcError
from ..ir.core import Function, Module
from ..memory.liveness import predict_peak
from ..memory.sizes import format_bytes, value_bytes
from ..ops.registry import has_trait
from ..passes.clone import clone_module
from ..passes.dce import dce_function
from .binomial import Leaf, Plan, binomial_plan, cost, sqrt_plan
from .loop_pairs import LoopPair, Rewrite, find_loop_pairs
from .loops import rewrite_loop
from .policy import Policy, parse_policy
from .straight import StraightLine, schedule_baseline, schedule_straight


@dataclass
class Schedule:
    module: Module
    fn: str
    policy: Policy
    plans: list[Plan | None] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    peak_bytes: int | None = None
    straight: StraightLine | None = None


def adjoint_functions(module: Module, fn: str = "") -> list[str]:
    if fn:
        if fn not in module:
            raise AdcError(f"remat: no function '{fn}' (functions: {', '.join(module.functions)})")
        return [fn]
    return [name for name, f in module.functions.items() if "adjoint_of" in f.attrs]


def apply_plans(module: Module, fn: str, plans: list[Plan | None]) -> tuple[Module, list[Rewrite]]:
    """A copy of `module` whose function `fn` has its loop pairs rewritten by `plans`."""
    if all(p is None or isinstance(p, Leaf) for p in plans):
        return module, []
    out = clone_module(module)
    f = out[fn]
    rewrites = []
    for pair, plan in zip(find_loop_pairs(f), plans):
        if plan is not None:
            r = rewrite_loop(out, f, pair, plan)
            if r is not None:
                rewrites.append(r)
    dce_function(f, out)
    return out, rewrites


def _loop_sizes(pair: LoopPair, dims) -> int:
    """Bytes of one step's residuals."""
    return sum(value_bytes(pair.fwd.results[k], dims) for k in pair.residual) // max(pair.n, 1)


def _state_bytes(pair: LoopPair, dims) -> int:
    """Bytes of one checkpoint: the loop's carries."""
    return sum(value_bytes(v, dims) for v in pair.fwd.operands[:pair.fwd.attrs["n_carry"]])


def _leaves(n: int) -> list[int]:
    """Tape lengths tried: a geometric ladder (ratio 1.5), n/2 ... n/8 rounded up, and
    n - n/2 ... n - n/8 (fine steps near storing everything)."""
    leaves, L = set(), 1.0
    while L < n:
        leaves.add(int(L))
        L *= 1.5
    leaves |= {-(-n // s) for s in (2, 3, 4, 6, 8)} | {n - n // s for s in range(2, 9)}
    return sorted(x for x in leaves if 1 <= x < n)


def _plan(n: int, c: int, L: int) -> Plan:
    return Leaf(0, n) if L >= n else binomial_plan(n, c, L, runs=True)


class _Peaks:
    """Exact predicted peaks of the function under loop plans given as (n, c, L), cached."""

    def __init__(self, module: Module, fn: str, dims):
        self.module, self.fn, self.dims, self.cache = module, fn, dims, {}

    def __call__(self, specs: list[tuple[int, int, int]]) -> int:
        key = tuple(specs)
        if key not in self.cache:
            m, _ = apply_plans(self.module, self.fn, [_plan(*s) for s in specs])
            self.cache[key] = predict_peak(m, self.fn, self.dims).peak_bytes
        return self.cache[key]


def _candidates(n: int, room: int, state: int, step: int) -> list[tuple[int, int, int]]:
    """(advances, c, L), cheapest first: for each tape length L, the most slots c whose
    extra bytes over one slot and a one-step tape, ``(c-1)*state + (L-1)*step``, fit in
    `room`. Each is the binomial optimum for its c and L (`binomial.cost`, closed form)."""
    out = []
    for L in [1] + _leaves(n):
        left = room - (L - 1) * step
        if left < 0:
            break
        blocks = -(-n // L)
        c = blocks if state == 0 else max(1, min(blocks, left // state + 1))
        out.append((cost(n, c, L), c, L))
    return sorted(out)


EXACT_STEPS = 256      # loops up to this length: every tape length bisected on exact peaks


def _best_for_loop(n: int, fits, room: int, state: int, step: int,
                   tries: int = 8) -> tuple[int, int]:
    """The (c, L) with the fewest recomputed steps that fits: `fits(c, L)` is True, or the
    bytes by which the plan's exact peak misses the budget; (1, 1) fits, leaving `room`
    bytes below the budget.

    For each tape length L of a ladder, a search on exact peaks finds the most slots that
    fit (the peak grows with the slots and with L; `_most_slots`). Beyond `EXACT_STEPS`
    steps, where every exact peak means rewriting a long loop, only one-step tapes are
    searched (c1 slots) and longer tapes are tried by a model of the peak, the room
    taken by ``(c-1)*state + (L-1)*step`` (slots and tape full at once): the cheapest plan
    of the model that beats (c1, 1) is checked exactly; when the model was short, the room
    is cut by the shortfall and the search repeated (at most `tries` times).
    """
    if fits(1, n) is True:
        return 1, n
    best = (cost(n, 1, 1), 1, 1)
    for L in [1] + (_leaves(n) if n <= EXACT_STEPS else []):
        if fits(1, L) is not True:
            break
        blocks = -(-n // L)
        guess = blocks if state == 0 else 1 + max(room - (L - 1) * step, 0) // state
        lo = _most_slots(lambda c, L=L: fits(c, L) is True, blocks, guess)
        best = min(best, (cost(n, lo, L), lo, L))
    if n <= EXACT_STEPS:
        return best[1], best[2]
    for _ in range(tries):
        for adv, c, L in _candidates(n, room, state, step):
            if adv >= best[0]:
                return best[1], best[2]
            if L == 1:
                continue
            over = fits(c, L)
            if over is True:
                return c, L
            room -= max(over, 1)
            break
        else:
            break
    return best[1], best[2]


def _most_slots(fits, hi: int, guess: int) -> int:
    """The most slots ``c <= hi`` with ``fits(c)``, given ``fits(1)``: from the model's
    `guess`, steps of doubling length towards the boundary, then a bisection, so a close
    guess costs a few exact peaks."""
    lo, g = 1, min(max(guess, 1), hi)
    if g == 1 or fits(g):
        lo, d = g, 1
        while lo < hi:
            p = min(hi, lo + d)
            if not fits(p):
                hi = p - 1
                break
            lo, d = p, 2 * d
    else:
        hi, d = g - 1, 1
        while lo < hi:
            p = max(lo + 1, hi - d + 1)
            if fits(p):
                lo = p
                break
            hi, d = p - 1, 2 * d
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def solve_budget(module: Module, fn: str, pairs: list[LoopPair], budget: int | None,
                 dims: Mapping[str, int], strict: bool = True) -> list[Plan]:
    """The cheapest plans whose predicted peak fits `budget` (None: the smallest peak).
    A budget below the smallest peak is an error, or (not `strict`) gives the plans of the
    smallest peak."""
    peaks = _Peaks(module, fn, dims)
    plans = [(p.n, 1, 1) for p in pairs]
    floor = peaks(plans)
    if budget is None or (floor > budget and not strict):
        budget = floor
    if floor > budget:
        raise AdcError(f"remat budget {format_bytes(budget)} ({budget} bytes) cannot be met: "
                       f"the smallest feasible peak is {format_bytes(floor)} ({floor} bytes)")
    order = sorted(range(len(pairs)), key=lambda k: -_loop_sizes(pairs[k], dims) * pairs[k].n)
    for k in order:
        n, room = pairs[k].n, budget - peaks(plans)
        state, step = _state_bytes(pairs[k], dims), _loop_sizes(pairs[k], dims)

        def fits(c, L, k=k, n=n, room=room, state=state, step=step):
            """True, or by how many bytes the plan's exact peak misses the budget. Beyond
            `EXACT_STEPS` steps, a plan whose modelled extra bytes over one slot and
            one-step tapes (`_candidates`) already miss the room is not built."""
            short = (c - 1) * state + (L - 1) * step - room
            if n > EXACT_STEPS and short > 0:
                return short
            peak = peaks(plans[:k] + [(n, c, L)] + plans[k + 1:])
            return True if peak <= budget else peak - budget
        c, L = _best_for_loop(n, fits, room, state, step)
        plans[k] = (n, c, L)
    return [_plan(*s) for s in plans]


def schedule(module: Module, policy: str | Policy, fn: str = "",
             dims: Mapping[str, int] | None = None,
             time_limit: float | None = None) -> Schedule:
    """Apply `policy` to the adjoint function(s) of `module` (the output of ``reverse``);
    `time_limit`: seconds per MILP solve of the straight-line solver (default: in
    proportion to its model, `milp.deadline`)."""
    pol = parse_policy(policy) if isinstance(policy, str) else policy
    dims = dict(dims or {})
    names = adjoint_functions(module, fn)
    sched = Schedule(module, names[0] if names else fn, pol)
    if pol.kind == "none":
        return sched
    for name in names:
        f = module[name]
        _note_skipped(f, sched)
        pairs = find_loop_pairs(f)
        budget = pol.budget or None
        if pol.kind == "sqrt":
            plans = [sqrt_plan(p.n) for p in pairs]
        elif pol.kind == "revolve":
            plans = [binomial_plan(p.n, pol.checkpoints, runs=True) for p in pairs]
        elif pol.kind == "mincut":      # straight-line code only, as AOTAutograd's
            plans = [None] * len(pairs)
        else:
            plans = solve_budget(module, name, pairs, budget, dims, strict=False) if pairs else []
        module, rewrites = apply_plans(module, name, plans)
        sched.plans += plans
        sched.rewrites += rewrites
        if pol.kind in ("budget", "min-memory"):
            module, sched.straight = schedule_straight(module, name, budget, dims, time_limit)
        elif pol.kind == "mincut":
            module, sched.straight = schedule_baseline(module, name, dims, "mincut")
    sched.module = module
    return sched


def _note_skipped(f: Function, sched: Schedule) -> None:
    for op in f.body.ops:
        if has_trait(op, "loop") and op.attrs["reverse"] and not isinstance(op.attrs["n"], int):
            sched.notes.append(f"loop at {op.loc}: trip count {op.attrs['n']} is symbolic; "
                               f"its residuals are stored in full (adc compile: bind it "
                               f"with --bind; adc run binds it from the inputs)")
