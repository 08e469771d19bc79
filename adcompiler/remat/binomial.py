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
``beta(c, r) = binom(c+r, c)`` and ``beta(c, r-1) < l <= beta(c, r)``, and an optimal first
checkpoint has the closed form of `split_point`, so a plan is built in O(l) without search.
Tapes of ``leaf = L`` steps treat the chain as ``ceil(l / L)`` blocks of L steps (the first
one shorter: it is the one advanced over most often) and checkpoint the blocks binomially;
the tests pin this to the exhaustive optimum over all split points on short chains.

Everything here is iterative: chains of any length, no recursion limit. With ``runs=True``
a plan keeps two regular parts as single nodes instead of a split per block, so that a plan
of 10^5 steps has as many nodes as it has irregular splits: a part left with one slot
(`Chain`: each block taped by advancing from the part's first state) and a part with a slot
per block (`Segments`: a checkpoint at every block).
"""
from __future__ import annotations

from typing import NamedTuple
from math import comb, exp, lgamma, log

INF = float("inf")


def beta(c: int, r: int) -> int:
    return comb(c + r, c) if r >= 0 else 0


def repetitions(l: int, c: int) -> int:
    """The least r with ``beta(c, r) >= l``: how often the hardest step is advanced over."""
    if c <= 0:
        return 0 if l <= 1 else -1
    if c == 1:
        return max(l - 1, 0)
    # beta(c, r) >= r**c / c!, so r >= (l c!)**(1/c) - c: start there, at most c steps up
    r = max(0, int(exp((log(l) + lgamma(c + 1)) / c)) - c - 1) if l > 1 else 0
    while beta(c, r) < l:
        r += 1
    return r


def min_advances(l: int, c: int) -> int:
    """The closed form ``t(l, c)`` (``leaf = 1``; ``c >= 1``)."""
    if l <= 1:
        return 0
    r = repetitions(l, c)
    return r * l - beta(c + 1, r - 1)


def split_point(l: int, c: int) -> int:
    """An optimal first checkpoint for ``l >= 2`` steps and ``c >= 1`` slots: advancing
    ``m`` steps, reversing the last ``l - m`` with ``c - 1`` slots and the first ``m`` with
    ``c`` costs ``t(l, c)`` (pinned against the exhaustive recursion by the tests)."""
    r = repetitions(l, c)
    return max(1, min(l - 1, l - beta(c - 1, r - 1), beta(c, r - 1)))


class Leaf(NamedTuple):
    """Tape steps ``a..b-1`` from the state at ``a``, then reverse them."""
    a: int
    b: int


class Split(NamedTuple):
    """Advance from ``a`` to ``m``, keep the state at ``m``, reverse ``[m, b)`` (`right`),
    drop that state, then reverse ``[a, m)`` (`left`) from the state at ``a``."""
    a: int
    m: int
    b: int
    right: "Plan"
    left: "Plan"


class Chain(NamedTuple):
    """Steps ``[a, a + f + q*ell)``, a first block of ``f`` steps and ``q >= 1`` blocks of
    ``ell``, reversed with one slot: for the last block first, advance from the state at
    ``a`` to the block, tape and reverse it; the first block is taped from ``a``."""
    a: int
    f: int
    ell: int
    q: int


class Segments(NamedTuple):
    """Steps ``[a, a + f + q*ell)`` as in `Chain`, with a checkpoint at every block: advance
    through the blocks keeping each block's first state, then tape and reverse them from
    their checkpoints, last block first."""
    a: int
    f: int
    ell: int
    q: int


Plan = Leaf | Split | Chain | Segments


def starts(p: Chain | Segments) -> range:
    """The first steps of the blocks of `p` after its first one."""
    return range(p.a + p.f, p.a + p.f + p.q * p.ell, p.ell)


def expand(p: Chain | Segments) -> Split:
    """`p` as splits and leaves (one level: the part of `p` it splits off stays a node)."""
    last = p.a + p.f + (p.q - 1) * p.ell
    rest = Leaf(p.a, p.a + p.f) if p.q == 1 else None
    if isinstance(p, Chain):
        return Split(p.a, last, last + p.ell, Leaf(last, last + p.ell),
                     rest or p._replace(q=p.q - 1))
    first = p.a + p.f
    right = Leaf(first, first + p.ell) if p.q == 1 else Segments(first, p.ell, p.ell, p.q - 1)
    return Split(p.a, first, last + p.ell, right, Leaf(p.a, first))


def nodes(plan: Plan):
    """Every node of `plan`, parents first (iterative)."""
    stack = [plan]
    while stack:
        p = stack.pop()
        yield p
        if isinstance(p, Split):
            stack += (p.left, p.right)


def _advances(p) -> int:
    if isinstance(p, Split):
        return p.m - p.a
    if isinstance(p, Chain):
        return p.q * p.f + p.ell * p.q * (p.q - 1) // 2
    if isinstance(p, Segments):
        return p.f + (p.q - 1) * p.ell
    return 0


def advances(plan: Plan) -> int:
    return sum(_advances(p) for p in nodes(plan))


def tape_length(plan: Plan) -> int:
    return max(p.b - p.a if isinstance(p, Leaf) else max(p.f, p.ell)
               for p in nodes(plan) if not isinstance(p, Split))


def checkpoint_steps(plan: Plan) -> list[int]:
    """The steps whose state the plan keeps or advances to (every split point)."""
    out = set()
    for p in nodes(plan):
        if isinstance(p, Split):
            out.add(p.m)
        elif not isinstance(p, Leaf):
            out.update(starts(p))
    return sorted(out)


def slots(plan: Plan) -> int:
    """Checkpoint slots the plan needs (the chain's initial state counts as one): a split
    holds its state at ``m`` while its right part runs, and the state at ``a`` throughout."""
    need: dict[int, int] = {}
    for p in reversed(list(nodes(plan))):      # children before parents
        if isinstance(p, Split):
            need[id(p)] = max(1 + need[id(p.right)], need[id(p.left)], 1)
        else:
            need[id(p)] = {Chain: 1, Segments: getattr(p, "q", 0)}.get(type(p), 0)
    return max(1, need[id(plan)])


def _spine(l: int, c: int) -> int:
    """How often the plan of `l` steps and `c` slots advances from its start (its splits
    with ``a = 0``): the left parts keep all c slots. With one slot every block but the
    first is advanced to from the start."""
    if c == 1:
        return max(l - 1, 0)
    k = 0
    while l > 1:
        l = split_point(l, min(c, l))
        k += 1
    return k


def cost(l: int, c: int, leaf: int = 1) -> float:
    """Advances of `binomial_plan(l, c, leaf)`: ``leaf * t(blocks, c)``, less what the
    shorter first block saves each time it is advanced over."""
    if l <= leaf:
        return 0
    if c <= 0:
        return INF
    blocks = -(-l // leaf)
    first = l - (blocks - 1) * leaf
    c = min(c, blocks)
    return leaf * min_advances(blocks, c) - (leaf - first) * _spine(blocks, c)


def _build(n: int, at, c: int, runs: bool = False) -> Plan:
    """The binomial plan over ``n`` blocks, block ``k`` being steps ``at(k) .. at(k+1)-1``;
    built bottom-up with an explicit stack (no recursion). With `runs`, a part of two or
    more blocks with one slot is a `Chain` and one with a slot per block `Segments` (the
    splits they stand for are the ones built here: `split_point` of one slot is the last
    block, of a slot per block the first)."""
    todo: list[tuple] = [(0, n, min(c, n))]
    built: list[Plan] = []
    while todo:
        task = todo.pop()
        if len(task) == 4:                      # both parts built: left, then right on top
            right = built.pop()
            built.append(Split(at(task[0]), at(task[1]), at(task[2]), right, built.pop()))
            continue
        a, b, k = task
        if b - a <= 1:
            built.append(Leaf(at(a), at(b)))
            continue
        if runs and (k == 1 or k >= b - a - 1):
            node = Chain if k == 1 else Segments
            built.append(node(at(a), at(a + 1) - at(a), at(b) - at(b - 1), b - a - 1))
            continue
        m = a + split_point(b - a, k)
        todo += [(a, m, b, None), (m, b, min(k - 1, b - m)), (a, m, min(k, m - a))]
    return built[0]


def binomial_plan(n: int, c: int, leaf: int = 1, runs: bool = False) -> Plan:
    """An optimal plan for `n` steps with `c` slots and tapes of `leaf` steps (for
    ``leaf > 1``: optimal over blocks of `leaf` steps); `runs`: with `Chain` and
    `Segments` nodes (see `_build`)."""
    if c < 1:
        raise ValueError("binomial checkpointing needs at least one checkpoint slot")
    if n <= leaf:
        return Leaf(0, n)
    blocks = -(-n // leaf)
    first = n - (blocks - 1) * leaf
    return _build(blocks, (lambda k: k) if leaf == 1 else
                  (lambda k: 0 if k == 0 else first + (k - 1) * leaf), c, runs)


def segment_plan(n: int, bounds: list[int]) -> Plan:
    """Checkpoints at `bounds` (increasing, starting at 0): each segment is one leaf."""
    cuts = list(bounds) + [n]
    plan: Plan = Leaf(cuts[-2], n)
    for k in range(len(cuts) - 3, -1, -1):
        plan = Split(cuts[k], cuts[k + 1], n, plan, Leaf(cuts[k], cuts[k + 1]))
    return plan


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
