"""Canonicalization: algebraic simplification by a table of rewrite patterns.

Each entry of `PATTERNS` is data: a match tree (`P` op patterns whose operands are variable
names, nested `P`s, splat constants `Splat(v)` or scalar literals `Scalar(name)`) and a
rewrite that builds the replacement with a `Builder`, or returns None to decline. One
driver applies the table to a fixed point. It is generic:

* a commutative op (registry trait) is also matched with its operands swapped;
* a replacement must have exactly the type of the value it replaces, so ``x + 0`` is only
  folded when the zero does not broadcast ``x`` to a larger shape or another dtype;
* an entry whose ops are not in the registry is skipped, so the table may name op families
  that are not loaded;
* ops left unused by a rewrite are erased if they are pure.

``x * 0`` is deliberately not folded: it is NaN for ``x = inf`` or NaN, and JAX keeps it too.
"""
from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Op, UseLists, Value
from ..ir.types import FLOAT_DTYPES, INT_DTYPES, NUMPY_DTYPE
from ..ops import registry
from .pipeline import FunctionPass, register_pass

# ---- match trees ----------------------------------------------------------------------

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
    """Matches a scalar ``const`` and binds its literal to `bind`."""

    bind: str


# constructors whose elements all equal a known number
_SPLAT = {"const": lambda op: op.attrs["value"], "full": lambda op: op.attrs["value"],
          "zeros": lambda op: 0, "ones": lambda op: 1,
          "zeros_like": lambda op: 0, "ones_like": lambda op: 1}


def splat_value(v: Value):
    op = v.defining_op
    return _SPLAT[op.name](op) if op is not None and op.name in _SPLAT else None


def _match(pat, v: Value, env: dict) -> bool:
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
        if op is None or op.name != "const":
            return False
        env[pat.bind] = op.attrs["value"]
        return True
    return op is not None and _match_op(pat, op, env)


def _match_op(pat: P, op: Op, env: dict) -> bool:
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


def _names(pat) -> set[str]:
    if isinstance(pat, P):
        return {pat.name}.union(*(_names(a) for a in pat.args))
    return set()


# ---- rewrites -------------------------------------------------------------------------

Rewrite = Callable[[Builder, dict], "Value | None"]


@dataclass(frozen=True)
class Pattern:
    match: P
    rewrite: Rewrite
    doc: str
    needs: tuple[str, ...] = ()  # ops the rewrite emits

    def available(self) -> bool:
        return all(n in registry.REGISTRY for n in _names(self.match) | set(self.needs))


def bound(name: str) -> Rewrite:
    return lambda b, m: m[name]


def _re_emit(name: str) -> Rewrite:
    """``name(name(x))`` -> ``name(x)`` with the outer op's shape option."""
    return lambda b, m: b.emit(name, m["x"], shape=copy.deepcopy(m["op"].attrs["shape"]))


def _perm(op: Op) -> list[int]:
    perm = op.attrs.get("perm")
    rank = op.operands[0].type.rank
    return list(range(rank))[::-1] if perm is None else [p % rank for p in perm]


def _transpose_transpose(b: Builder, m: dict):
    outer, inner = m["op"], m["op"].operands[0].defining_op
    p1, p2 = _perm(inner), _perm(outer)
    q = [p1[j] for j in p2]
    if q == sorted(q):
        return m["x"]
    return b.emit("transpose", m["x"], perm=tuple(q))


def _identity_transpose(b: Builder, m: dict):
    p = _perm(m["op"])
    return m["x"] if p == sorted(p) else None


def _fold(fn) -> Rewrite:
    """Evaluate an op on scalar literals with NumPy in the result's dtype."""
    def rewrite(b: Builder, m: dict):
        op = m["op"]
        dtype = op.result.type.dtype
        if dtype not in FLOAT_DTYPES + INT_DTYPES or (op.name == "div" and dtype in INT_DTYPES):
            return None
        args = [np.asarray(m[k], dtype=NUMPY_DTYPE[dtype]) for k in ("a", "b") if k in m]
        with np.errstate(all="ignore"):
            r = np.asarray(fn(*args), dtype=NUMPY_DTYPE[dtype])
        if not np.isfinite(r):
            return None
        return b.const(r.item(), dtype)
    return rewrite


def _same_type(b: Builder, m: dict):
    return m["x"] if m["x"].type == m["op"].result.type else None


PATTERNS: list[Pattern] = [
    Pattern(P("add", "x", Splat(0)), bound("x"), "x + 0 -> x (and 0 + x)"),
    Pattern(P("sub", "x", Splat(0)), bound("x"), "x - 0 -> x"),
    Pattern(P("mul", "x", Splat(1)), bound("x"), "x * 1 -> x (and 1 * x)"),
    Pattern(P("div", "x", Splat(1)), bound("x"), "x / 1 -> x"),
    Pattern(P("neg", P("neg", "x")), bound("x"), "-(-x) -> x"),
    Pattern(P("add", "x", P("neg", "y")), lambda b, m: b.emit("sub", m["x"], m["y"]),
            "x + -y -> x - y", needs=("sub",)),
    Pattern(P("reshape", "x"), bound("x"), "reshape to the same shape -> x"),
    Pattern(P("broadcast_to", "x"), bound("x"), "broadcast_to the same shape -> x"),
    Pattern(P("sum_to", "x"), bound("x"), "sum_to the same shape -> x"),
    Pattern(P("cast", "x"), bound("x"), "cast to the same dtype -> x"),
    Pattern(P("sum", "x"), _same_type, "sum over no (or size-1 kept) axes -> x"),
    Pattern(P("mean", "x"), _same_type, "mean over no (or size-1 kept) axes -> x"),
    Pattern(P("max", "x"), _same_type, "max over no (or size-1 kept) axes -> x"),
    Pattern(P("min", "x"), _same_type, "min over no (or size-1 kept) axes -> x"),
    Pattern(P("reshape", P("reshape", "x")), _re_emit("reshape"),
            "reshape(reshape(x)) -> reshape(x)"),
    Pattern(P("broadcast_to", P("broadcast_to", "x")), _re_emit("broadcast_to"),
            "broadcast_to(broadcast_to(x)) -> broadcast_to(x)"),
    Pattern(P("sum_to", P("sum_to", "x")), _re_emit("sum_to"), "sum_to(sum_to(x)) -> sum_to(x)"),
    Pattern(P("transpose", "x"), _identity_transpose, "transpose by the identity -> x"),
    Pattern(P("transpose", P("transpose", "x")), _transpose_transpose,
            "transpose(transpose(x)) -> one transpose, or x"),
    Pattern(P("add", Scalar("a"), Scalar("b")), _fold(np.add), "fold a + b"),
    Pattern(P("sub", Scalar("a"), Scalar("b")), _fold(np.subtract), "fold a - b"),
    Pattern(P("mul", Scalar("a"), Scalar("b")), _fold(np.multiply), "fold a * b"),
    Pattern(P("div", Scalar("a"), Scalar("b")), _fold(np.divide), "fold a / b"),
    Pattern(P("neg", Scalar("a")), _fold(np.negative), "fold -a"),
]


# ---- the driver -----------------------------------------------------------------------

def pattern_table(patterns=None) -> dict[str, list[Pattern]]:
    """The available patterns keyed by root op name."""
    table: dict[str, list[Pattern]] = {}
    for p in PATTERNS if patterns is None else patterns:
        if p.available():
            table.setdefault(p.match.name, []).append(p)
    return table


class _Driver:
    """One sweep over a function in program order, each op rewritten until no pattern
    matches it.

    Patterns look only at an op's operands and the ops defining them, never at its users,
    so a sweep in program order reaches the fixed point: when an op is replaced, its users
    come later in the sweep (or inside a later op's region) and are matched then. Ops a
    rewrite builds are matched before the op they replace is dropped. Uses are rewritten
    through use lists, so a fold costs the size of its users, not of the function.
    """

    def __init__(self, fn: Function, table: dict[str, list[Pattern]]):
        self.table = table
        self.uses = UseLists(fn.body)
        self.folds = 0  # rewrites applied (the tests check that this grows linearly)
        self.visits = 0  # ops matched against the table
        self.replaced: dict[Value, Value] = {}

    def block(self, block: Block) -> None:
        old, block.ops = block.ops, []
        for op in old:
            self.op(block, op)

    def op(self, block: Block, op: Op) -> None:
        """Append `op` to `block` unless a pattern replaces it (then its replacement's new
        ops are appended instead, each rewritten first)."""
        for region in op.regions:
            self.block(region)
        self.visits += 1
        for pat in self.table.get(op.name, ()):
            env = {"op": op}
            if not _match_op(pat.match, op, env):
                continue
            scratch = Block()
            scratch.parent = block.parent
            new = pat.rewrite(Builder(scratch, op.loc), env)
            if new is None or new.type != op.result.type:
                continue  # whatever a declined rewrite built is dropped with `scratch`
            self.folds += 1
            for built in scratch.ops:
                self.uses.add(built)
                built.parent = block
                self.op(block, built)
            while new in self.replaced:  # a built op was itself rewritten
                new = self.replaced[new]
            self.replaced[op.result] = new
            self.uses.replace(op.result, new)
            return
        op.parent = block
        block.ops.append(op)


def erase_dead(fn: Function) -> None:
    """Erase pure registry ops (without regions) whose results are unused."""
    counts = Counter(v for op in fn.walk() for v in op.operands)

    def sweep(block: Block) -> None:
        kept = []
        for op in reversed(block.ops):
            for region in op.regions:
                sweep(region)
            if (op.name in registry.REGISTRY and not op.regions
                    and not registry.get(op.name).has("impure")
                    and not any(counts[r] for r in op.results)):
                counts.subtract(op.operands)
                continue
            kept.append(op)
        block.ops = kept[::-1]

    sweep(fn.body)


def canonicalize_function(fn: Function, patterns=None) -> "_Driver":
    """Canonicalize `fn` in place; returns the driver, whose `folds` and `visits` count
    the rewrites applied and the ops matched."""
    driver = _Driver(fn, pattern_table(patterns))
    driver.block(fn.body)
    erase_dead(fn)
    return driver


@register_pass("canonicalize")
@dataclass(frozen=True)
class Canonicalize(FunctionPass):
    """Simplify with the rewrite table `PATTERNS` to a fixed point; erase dead pure ops."""

    def run_on_function(self, fn: Function, module: Module) -> None:
        canonicalize_function(fn)
