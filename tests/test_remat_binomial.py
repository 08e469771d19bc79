"""Binomial checkpointing against values computed here independently.

Counted: *advances*, forward steps run without recording, which is the number of steps
recomputed beyond storing everything. The chain's initial state holds one of the c slots;
each step is recorded once, right before its reverse.
"""
from functools import lru_cache
from math import comb

import pytest

from adcompiler.remat.binomial import (Leaf, Split, advances, binomial_plan, cost,
                                       min_advances, slots, sqrt_plan, tape_length)


def closed_form(l, c):
    """Griewank & Walther (2000): r*l - beta(c+1, r-1), beta(c, r) = binom(c+r, c)."""
    if l <= 1:
        return 0
    r = next(r for r in range(l + 1) if comb(c + r, c) >= l)
    return r * l - (comb(c + r, c + 1) if r >= 1 else 0)


@lru_cache(maxsize=None)
def brute(l, c):
    """Exhaustive: from the state at 0, advance m steps and keep that state, or (if l == 1)
    record and reverse the only step."""
    if l == 1:
        return 0
    if c == 0:
        return float("inf")
    return min(m + brute(l - m, c - 1) + brute(m, c) for m in range(1, l))


TABLE = {  # t(l, c) for a few entries, worked out by hand from the recursion
    (2, 1): 1, (3, 1): 3, (5, 1): 10, (10, 1): 45, (3, 2): 2, (4, 2): 4, (5, 2): 6,
    (10, 2): 20, (6, 3): 7, (30, 1): 435,
}


def test_hand_table():
    for (l, c), want in TABLE.items():
        assert closed_form(l, c) == want == brute(l, c), (l, c)


@pytest.mark.parametrize("c", [1, 2, 3, 4, 5])
def test_table_up_to_30(c):
    for n in range(1, 31):
        want = brute(n, c)
        assert closed_form(n, c) == want
        assert min_advances(n, c) == want, (n, c)
        plan = binomial_plan(n, c)
        assert advances(plan) == want, (n, c)
        assert slots(plan) <= c
        assert tape_length(plan) == 1
        simulate(plan, n, c)


def simulate(plan, n, c):
    """Run a plan on an abstract machine: states held in slots, steps reversed n-1 .. 0."""
    reversed_steps, held = [], {0}
    peak = [1]

    def run(p, state_kept):
        if isinstance(p, Leaf):
            reversed_steps.extend(range(p.b - 1, p.a - 1, -1))
            return
        assert p.a in held
        held.add(p.m)
        peak[0] = max(peak[0], len(held))
        run(p.right, True)
        held.discard(p.m)
        run(p.left, state_kept)
    run(plan, True)
    assert reversed_steps == list(range(n - 1, -1, -1))
    # the state a leaf starts from right after an advance need not be kept
    assert peak[0] <= c + 1


def test_longer_tapes_cost_less():
    assert cost(64, 1, 64) == 0
    assert cost(64, 8, 8) == 56           # advance to each of 7 later segment starts
    assert cost(12, 1, 4) == 8 + 4        # from 0: advance 8, then 4; then tape [0, 4)


def test_sqrt_plan_segments():
    plan = sqrt_plan(64)
    assert tape_length(plan) == 8 and advances(plan) == 56 and slots(plan) == 7
    starts = []
    p = plan
    while isinstance(p, Split):
        starts.append(p.m)
        assert isinstance(p.left, Leaf)
        p = p.right
    assert starts == [8, 16, 24, 32, 40, 48, 56]
    uneven = sqrt_plan(10)
    assert advances(uneven) == 8 and tape_length(uneven) == 3  # segments 3, 3, 2, 2


def test_split_point_is_optimal_for_long_chains():
    """The closed-form first checkpoint reaches t(l, c): checked on both sides with the
    closed form (the exhaustive recursion above pins the closed form itself)."""
    from adcompiler.remat.binomial import split_point
    for c in range(1, 9):
        for l in list(range(2, 400)) + [997, 1000, 4096, 10**4 + 7]:
            m = split_point(l, c)
            assert 1 <= m < l
            right = min_advances(l - m, c - 1) if c > 1 else (0 if l - m == 1 else None)
            assert right is not None and m + right + min_advances(m, c) == min_advances(l, c)


@pytest.mark.parametrize("c", [1, 2, 5, 100_000])
def test_plans_of_a_hundred_thousand_steps_build_without_recursion(c):
    n = 100_000
    plan = binomial_plan(n, c)
    assert advances(plan) == min_advances(n, min(c, n)) == closed_form(n, min(c, n))
    assert slots(plan) == min(c, n - 1) and tape_length(plan) == 1


def test_block_plans_and_sqrt_of_a_million_steps():
    plan = binomial_plan(100_000, 3, 7)       # tapes of 7 steps: 14,286 blocks
    assert tape_length(plan) == 7 and slots(plan) == 3
    assert advances(plan) == cost(100_000, 3, 7) < 7 * closed_form(14_286, 3)
    big = sqrt_plan(10**6)
    assert (advances(big), slots(big), tape_length(big)) == (999_000, 999, 1000)


@lru_cache(maxsize=None)
def brute_tapes(l, c, L):
    """Exhaustive, with tapes of up to L steps: any split point."""
    if l <= L:
        return 0
    if c == 0:
        return float("inf")
    return min(m + brute_tapes(l - m, c - 1, L) + brute_tapes(m, c, L) for m in range(1, l))


def test_block_plans_match_the_exhaustive_optimum_with_longer_tapes():
    for n in range(2, 33):
        for c in range(1, 5):
            for L in range(1, n):
                want = brute_tapes(n, c, L)
                plan = binomial_plan(n, c, L)
                assert cost(n, c, L) == advances(plan) == want, (n, c, L)
                assert tape_length(plan) <= L and slots(plan) <= c
                simulate(plan, n, c)
