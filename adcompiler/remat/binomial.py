"""Binomial checkpointing of a chain of steps (Griewank & Walther, ACM TOMS 26(1), 2000).

A chain of ``l`` steps is reversed with ``c`` checkpoint slots. What is counted:

* the state before the first step occupies one of the ``c`` slots;
* every step is *taped* (run while recording the values its reverse needs) exactly once,
  right before its reverse; the tape holds ``leaf`` steps at most (``leaf = 1`` is the
  classical setting);
* the cost is the number of *advances*: step evaluations that do not record. For the whole
  adjoint this is exactly the number of forward steps recomputed beyond storing everything
  (the initial sweep's advances included, as the final leaf is taped by that sweep).

For ``leaf = 1`` the minimum has the closed form ``t(l, c) = r*l - beta(c+1, r-1)`` with
``beta(c, r) = binom(c+r, c)`` and ``beta(c, r-1) < l <= beta(c, r)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import comb

INF = float("inf")


def beta(c: int, r: int) -> int:
    return comb(c + r, c) if r >= 0 else 0


def min_advances(l: int, c: int) -> int:
    """The closed form ``t(l, c)`` (``leaf = 1``; ``c >= 1``)."""
    if l <= 1:
        return 0
    r = 0
    while beta(c, r) < l:
        r += 1
    return r * l - beta(c + 1, r - 1)


@dataclass(frozen=True)
class Leaf:
    """Tape steps ``a..b-1`` from the state at ``a``, then reverse them."""
    a: int
    b: int


@dataclass(frozen=True)
class Split:
    """Advance from ``a`` to ``m``, keep the state at ``m``, reverse ``[m, b)`` (`right`),
    drop that state, then reverse ``[a, m)`` (`left`) from the state at ``a``."""
    a: int
    m: int
    b: int
    right: "Plan"
    left: "Plan"


Plan = Leaf | Split


def advances(plan: Plan) -> int:
    if isinstance(plan, Leaf):
        return 0
    return plan.m - plan.a + advances(plan.right) + advances(plan.left)


def slots(plan: Plan) -> int:
    """Checkpoint slots the plan needs (the chain's initial state counts as one)."""
    def need(p: Plan) -> int:
        if isinstance(p, Leaf):
            return 0
        return max(1 + need(p.right), need(p.left), 1)
    return max(1, need(plan))


def tape_length(plan: Plan) -> int:
    if isinstance(plan, Leaf):
        return plan.b - plan.a
    return max(tape_length(plan.right), tape_length(plan.left))


@lru_cache(maxsize=None)
def _cost(l: int, c: int, leaf: int) -> float:
    """Minimal advances for `l` steps, `c` slots, tapes of `leaf` steps (see module doc)."""
    if l <= leaf:
        return 0
    if c <= 0:
        return INF
    if leaf == 1:
        return min_advances(l, c)
    return min(m + _cost(l - m, c - 1, leaf) + _cost(m, c, leaf) for m in range(1, l))


def cost(l: int, c: int, leaf: int = 1) -> float:
    return _cost(l, min(c, l), leaf)


def _best_split(l: int, c: int, leaf: int) -> int:
    best, arg = INF, 1
    for m in range(1, l):
        v = m + cost(l - m, c - 1, leaf) + cost(m, c, leaf)
        if v < best:
            best, arg = v, m
    return arg


def binomial_plan(n: int, c: int, leaf: int = 1) -> Plan:
    """An optimal plan for `n` steps with `c` slots and tapes of `leaf` steps."""
    if c < 1:
        raise ValueError("binomial checkpointing needs at least one checkpoint slot")

    def build(a: int, b: int, c: int) -> Plan:
        if b - a <= leaf:
            return Leaf(a, b)
        m = a + _best_split(b - a, min(c, b - a), leaf)
        return Split(a, m, b, build(m, b, c - 1), build(a, m, c))
    return build(0, n, c)


def segment_plan(n: int, bounds: list[int]) -> Plan:
    """Checkpoints at `bounds` (increasing, starting at 0): each segment is one leaf."""
    cuts = list(bounds) + [n]

    def build(k: int) -> Plan:
        if k == len(cuts) - 2:
            return Leaf(cuts[k], n)
        return Split(cuts[k], cuts[k + 1], n, build(k + 1), Leaf(cuts[k], cuts[k + 1]))
    return build(0)


def sqrt_plan(n: int) -> Plan:
    """About √n segments of about √n steps (Chen et al. 2016)."""
    if n <= 0:  # a loop that runs no step: nothing to checkpoint
        return Leaf(0, 0)
    k = max(1, round(n ** 0.5))
    s = -(-n // k)
    size, extra = divmod(n, s)
    bounds, a = [], 0
    for j in range(s):
        bounds.append(a)
        a += size + (1 if j < extra else 0)
    return segment_plan(n, bounds)
