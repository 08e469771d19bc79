"""Rewrite patterns as data, declared on the op they simplify (``register(..., rewrites=)``)
and applied by the ``canonicalize`` pass.

A `Pattern` is a match tree and a rewrite. The tree is a `P` (an op name and one pattern per
operand); an operand pattern is a variable name (bound to the value; the same name twice
matches the same value), a nested `P`, `Splat(v)` (a constant tensor whose every element is
`v`, told by the defining op's `splat` slot) or `Scalar(name)` (a scalar literal, an op with
the trait ``literal``, whose value is bound to `name`). A commutative op (registry trait) is
also matched with its operands swapped. The rewrite builds the replacement with a `Builder`
from the bindings (``"op"`` is the matched op), or returns None to decline.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.types import FLOAT_DTYPES, INT_DTYPES, NUMPY_DTYPE
from . import registry


@dataclass(frozen=True)
class P:
    """Matches a value defined by op `name` whose operands match `args`."""

    name: str
    args: tuple

    def __init__(self, name: str, *args):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)


@dataclass(frozen=True)
class Splat:
    """Matches a constant tensor whose every element equals `value`."""

    value: float


@dataclass(frozen=True)
class Scalar:
    """Matches a scalar literal and binds its value to `bind`."""

    bind: str


Rewrite = Callable[..., "object | None"]  # (Builder, bindings) -> Value or None


@dataclass(frozen=True)
class Pattern:
    match: P
    rewrite: Rewrite
    doc: str
    needs: tuple[str, ...] = ()  # ops the rewrite emits

    def available(self) -> bool:
        """Whether every op the pattern matches or emits is registered."""
        return all(n in registry.REGISTRY for n in _names(self.match) | set(self.needs))


def _names(pat) -> set[str]:
    if isinstance(pat, P):
        return {pat.name}.union(*(_names(a) for a in pat.args))
    return set()


# ---- matching -------------------------------------------------------------------------

def splat_value(v):
    """The number every element of `v` equals, if its defining op says (its `splat` slot)."""
    op = v.defining_op
    d = registry.lookup(op.name) if op is not None else None
    return d.splat(op) if d is not None and d.splat is not None else None


def _match(pat, v, env: dict) -> bool:
    if isinstance(pat, str):
        if pat in env:
            return env[pat] is v
        env[pat] = v
        return True
    if isinstance(pat, Splat):
        c = splat_value(v)
        return c is not None and not isinstance(c, bool) and c == pat.value
    op = v.defining_op
    if isinstance(pat, Scalar):
        if op is None or not registry.has_trait(op, "literal"):
            return False
        env[pat.bind] = op.attrs["value"]
        return True
    return op is not None and match_op(pat, op, env)


def match_op(pat: P, op, env: dict) -> bool:
    """Whether `op` matches `pat`; on success the bindings are added to `env`."""
    if op.name != pat.name or len(op.results) != 1 or len(op.operands) != len(pat.args):
        return False
    orders = [op.operands]
    if len(op.operands) == 2 and registry.get(op.name).has("commutative"):
        orders.append(op.operands[::-1])
    for operands in orders:
        trial = dict(env)
        if all(_match(p, v, trial) for p, v in zip(pat.args, operands)):
            env.update(trial)
            return True
    return False


def may_match(pat: P, op, swap: bool) -> bool:
    """A quick necessary condition for `match_op` (`swap`: `op` is commutative): each
    operand is defined by the op its pattern names, or passes its leaf test. Most ops fail
    it, and cheaply, before a full match copies any bindings."""
    args, operands = pat.args, op.operands
    if len(args) != len(operands):
        return False
    return _roots_match(args, operands) or (swap and _roots_match(args, operands[::-1]))


def root_names(pat: P) -> tuple:
    """Per operand of `pat`, the names of the ops that may define it (None: any value): a
    necessary condition of `match_op` that asks only the operands' defining ops' names."""
    defs = {**registry.STRUCTURAL, **registry.REGISTRY}
    splat = frozenset(n for n, d in defs.items() if d.splat is not None)
    literal = frozenset(n for n, d in defs.items() if "literal" in d.traits)
    kinds = {P: lambda a: frozenset((a.name,)), Splat: lambda a: splat,
             Scalar: lambda a: literal}
    return tuple(kinds[type(a)](a) if type(a) in kinds else None for a in pat.args)


def names_fit(roots: tuple, names: tuple) -> bool:
    """Whether operands defined by ops `names` (None: a block argument) pass `roots`."""
    for allowed, name in zip(roots, names):
        if allowed is not None and name not in allowed:
            return False
    return True


def _roots_match(args: tuple, operands) -> bool:
    for pat, v in zip(args, operands):
        if isinstance(pat, str):
            continue
        if isinstance(pat, P):
            op = v.defining_op
            if op is None or op.name != pat.name:
                return False
        elif not _match(pat, v, {}):
            return False
    return True


# ---- rewrite helpers ------------------------------------------------------------------

def bound(name: str) -> Rewrite:
    """The value bound to `name`."""
    return lambda b, m: m[name]


def same_type(b, m: dict):
    """``x`` when it has the matched op's result type (e.g. a sum over no axes)."""
    return m["x"] if m["x"].type == m["op"].result.type else None


def re_emit(b, m: dict):
    """``f(f(x))`` -> ``f(x)`` with the outer op's shape option."""
    op = m["op"]
    return b.emit(op.name, m["x"], shape=copy.deepcopy(op.attrs["shape"]))


def fold(fn, ints: bool = True) -> Rewrite:
    """Evaluate an op on scalar literals ``a`` (and ``b``) with NumPy in the result's dtype;
    `ints`: whether integer results fold too (not for division)."""
    def rewrite(b, m: dict):
        dtype = m["op"].result.type.dtype
        if dtype not in FLOAT_DTYPES + INT_DTYPES or (not ints and dtype in INT_DTYPES):
            return None
        args = [np.asarray(m[k], dtype=NUMPY_DTYPE[dtype]) for k in ("a", "b") if k in m]
        with np.errstate(all="ignore"):
            r = np.asarray(fn(*args), dtype=NUMPY_DTYPE[dtype])
        if not np.isfinite(r):
            return None
        return b.const(r.item(), dtype)
    return rewrite


def all_patterns() -> list[Pattern]:
    """Every registered op's patterns, in registration order."""
    return [p for d in registry.REGISTRY.values() for p in d.rewrites]
