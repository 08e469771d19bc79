"""Building IR: the one way ops are created (frontend lowering, derivative rules, passes).

    b = Builder(block, loc)
    y = b.emit("add", x, b.const(1.0, "f32"))
    s = b.emit("sum", y, axis=(0,), keepdims=False)

`emit` looks the op up in the registry, fills in default options, infers the result types
and appends the op at the insertion point. Type errors are `ShapeError`s located at the
builder's current location.
"""
from __future__ import annotations

from contextlib import contextmanager
from operator import attrgetter

from ..diagnostics import Loc, ShapeError
from ..ops import registry
from ..ops.registry import REGISTRY
from ..ops.control import CALL, FOR, RETURN, YIELD
from .core import Block, Function, Op, Value
from .types import TensorType


# `map(TYPE_OF, values)` lists the values' types without a comprehension's frame (Python
# 3.11 makes one per comprehension): the passes that build ops create them by the million
TYPE_OF = attrgetter("type")

# The result types of ops without options, by op name and operand types, with the op's
# definition they came from: a type rule reads nothing else, and the derivative passes ask
# it about the same few operand types for every op they create (types are interned, so a
# key hashes in C). Errors are not kept: a bad op raises each time.
_INFERRED: dict[tuple, tuple] = {}


class Builder:
    def __init__(self, block: Block, loc: Loc | None = None, index: int | None = None):
        self.block = block
        self.loc = loc
        self.index = index  # insertion position; None appends
        self.shared_consts: dict | None = None  # see `const`

    # -- positioning -------------------------------------------------------------------
    def at(self, loc: Loc | None) -> "_At":
        """Temporarily set the location given to new ops (derivative ops use the primal's):
        ``with b.at(op.loc): ...``."""
        return _At(self, loc)

    def located(self, loc: Loc | None, rule, *args):
        """``rule(*args)`` with new ops given `loc`, as inside ``with self.at(loc)``: the
        derivative passes call it once per op, where a context object would cost ten
        times the call."""
        saved = self.loc
        if loc is not None:
            self.loc = loc
        try:
            return rule(*args)
        finally:
            self.loc = saved

    @contextmanager
    def inside(self, block: Block):
        """Temporarily append to `block` (e.g. a loop body)."""
        saved = (self.block, self.index)
        self.block, self.index = block, None
        try:
            yield self
        finally:
            self.block, self.index = saved

    def insert(self, op: Op) -> Op:
        if op.loc is None:
            op.loc = self.loc
        if self.index is None:
            self.block.append(op)
        else:
            self.block.insert(self.index, op)
            self.index += 1
        return op

    # -- registry ops ------------------------------------------------------------------
    def create(self, name: str, operands, attrs: dict | None = None, names=None) -> Op:
        """Create and insert a registry op; returns the `Op`."""
        opdef = REGISTRY.get(name) or registry.get(name)  # `get` raises for an unknown op
        try:
            if attrs or opdef.options:
                # a new dict: `complete_attrs` copies, and the caller's stays its own
                attrs = opdef.complete_attrs(attrs or {})
                types = opdef.infer(list(map(TYPE_OF, operands)), attrs)
            else:
                attrs = {}
                key = (name, *map(TYPE_OF, operands))
                known = _INFERRED.get(key)
                if known is not None and known[0] is opdef:
                    types = known[1]
                else:
                    types = opdef.infer(list(key[1:]), attrs)
                    if len(_INFERRED) >= 4096:
                        _INFERRED.clear()
                    _INFERRED[key] = (opdef, types)
        except ShapeError as e:
            raise e.with_loc(self.loc)
        op = Op(name, operands, [types] if isinstance(types, TensorType) else types, attrs,
                None, self.loc, names)
        if self.index is None:  # `insert`, inlined: derivative passes create ops by the million
            op.parent = self.block
            self.block.ops.append(op)
            return op
        return self.insert(op)

    def emit(self, name: str, *operands: Value, **attrs):
        """Create a registry op; returns its result (or the list of results)."""
        results = self.create(name, operands, attrs).results
        return results[0] if len(results) == 1 else results

    def const(self, value, dtype: str) -> Value:
        """A scalar constant of `dtype`.

        With `shared_consts` set to a dict, a constant appended to a block serves every
        later request for it there: derivative rules ask for the same few (``1.0``,
        ``2.0``) once per op, and CSE would merge them into the first anyway. Equal means
        as CSE has it: ``1`` and ``1.0``, and ``0.0`` and ``-0.0``, differ. The value
        returned may be shared, so a caller never renames it.
        """
        if self.shared_consts is None or self.index is not None:
            return self.emit("const", value=value, dtype=dtype)
        key = (self.block, dtype,
               value.hex() if isinstance(value, float) else (type(value), value))
        v = self.shared_consts.get(key)
        if v is None:
            v = self.shared_consts[key] = self.emit("const", value=value, dtype=dtype)
        return v

    # -- structural ops ----------------------------------------------------------------
    def call(self, fn: Function, args: list[Value]) -> list[Value]:
        op = Op(CALL, args, fn.result_types, {"callee": fn.name}, loc=self.loc)
        return self.insert(op).results

    def ret(self, values: list[Value]) -> Op:
        return self.insert(Op(RETURN, values, [], loc=self.loc))

    def yield_(self, values: list[Value]) -> Op:
        return self.insert(Op(YIELD, values, [], loc=self.loc))

    def for_(self, n, body: Block, carry_init: list[Value], xs: list[Value] = (),
             result_types: list[TensorType] | None = None, reverse: bool = False,
             result_names=None) -> Op:
        """A scan loop (see `core`); `body` must already end in ``yield``.

        `result_types` defaults to the carried types followed by the yielded per-iteration
        outputs stacked along a new leading axis of size `n`.
        """
        if result_types is None:
            ys = body.terminator.operands[len(carry_init):]
            result_types = [v.type for v in carry_init] + [
                TensorType(y.type.dtype, (n,) + y.type.shape) for y in ys]
        op = Op(FOR, list(carry_init) + list(xs), result_types,
                {"n": n, "n_carry": len(carry_init), "reverse": reverse},
                regions=[body], loc=self.loc, result_names=result_names)
        return self.insert(op)


class _At:
    """`Builder.at`'s context: a class, not a generator, since the derivative passes enter
    one per op."""

    __slots__ = ("b", "loc", "saved")

    def __init__(self, b: Builder, loc: Loc | None):
        self.b, self.loc = b, loc

    def __enter__(self) -> Builder:
        b = self.b
        self.saved = b.loc
        if self.loc is not None:
            b.loc = self.loc
        return b

    def __exit__(self, *exc) -> None:
        self.b.loc = self.saved
