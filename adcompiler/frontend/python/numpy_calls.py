"""What the handlers of `numpy_table` and `numpy_shapes` share (a mixin of the lowerer):
arrays from arguments, axes, ranks and shapes, casts, compile-time folding."""
from __future__ import annotations

import math

import numpy as np

from . import numpy_shapes, numpy_table  # noqa: F401  (they fill the call tables)
from ..tdsl import ast
from .calls import CallDispatch
from .values import TDSL_DTYPE, Tensor, describe, has_tensor, is_number, plain_number


class NumpyCalls(CallDispatch):
    def fold_call(self, fn, args, call):
        """`fn` of compile-time numbers, computed now (``np.sqrt(2.0)``)."""
        for x in args:
            if x is not None and not is_number(x) and not isinstance(x, (bool, np.bool_)):
                raise self.src.error(f"{call.name}() of {describe(x)}", call.node)
        try:
            with np.errstate(all="raise"):
                r = fn(*[plain_number(x) for x in args])
        except (ArithmeticError, ValueError, FloatingPointError) as e:
            raise self.src.error(f"{call.name}() of compile-time numbers fails ({e})",
                                 call.node) from None
        return plain_number(r) if isinstance(r, np.generic) else r

    def array(self, v, call):
        """An array argument: a run-time value, a number or a sequence (stacked)."""
        if isinstance(v, Tensor) or is_number(v) or isinstance(v, (bool, np.bool_)):
            return v
        if isinstance(v, (tuple, list)) and v:
            items = [self.array(x, call) for x in v]
            return self.op("stack", items, call, axis=0)
        raise self.src.error(f"{call.name}(): expected an array, got {describe(v)}",
                             call.node)

    def binary_op(self, sym: str, x, y, call):
        span = self.src.span(call.node)
        return Tensor(ast.Binary(sym, self.tdsl(x, call.node), self.tdsl(y, call.node), span,
                                 call.name_span))

    def negate(self, x, call):
        return self.op("neg", [x], call)

    def rank(self, x, call) -> int:
        return len(self.shape(x, call))

    def shape(self, x, call) -> tuple:
        if not isinstance(x, Tensor):
            return ()
        t = self.tensor_type(x, call.node)
        return tuple(t.shape)

    def cast(self, x, dtype, call):
        x = self.array(x, call)
        if isinstance(x, Tensor):
            t = self.type_of(x)
            if t is not None and t.dtype == TDSL_DTYPE[np.dtype(dtype)]:
                return x
            return self.op("cast", [x], call, dtype=np.dtype(dtype))
        return plain_number(np.dtype(dtype).type(x))

    def cast_default(self, v, dtype, call):
        return self.array(v, call) if dtype is None else self.cast(v, dtype, call)

    def int_option(self, v, call) -> int:
        if has_tensor(v) or not is_number(v) or not isinstance(plain_number(v), int):
            raise self.src.error(f"{call.name}(): expected an integer known at compile time, "
                                 f"got {describe(v)}", call.node)
        return int(v)

    def axes(self, axis, call):
        """An ``axis`` argument as a TDSL option: None, an int or a tuple of ints."""
        if axis is None:
            return None
        if isinstance(axis, (tuple, list)):
            return tuple(self.int_option(a, call) for a in axis)
        return self.int_option(axis, call)

    def axis_index(self, axis, n: int, call) -> int:
        k = self.int_option(axis, call)
        if not -n <= k < n:
            raise self.src.error(f"{call.name}(): axis {k} is out of range for rank {n}",
                                 call.node)
        return k % n

    def perm(self, x, axes, call) -> tuple:
        n = self.rank(x, call)
        if not isinstance(axes, (tuple, list)) or len(axes) != n:
            raise self.src.error(f"{call.name}(): axes must list each of the {n} axes",
                                 call.node)
        return tuple(self.axis_index(a, n, call) for a in axes)

    def reduced_count(self, x, axis, call) -> int:
        shape = self.shape(x, call)
        if axis is None:
            return math.prod(shape)
        axes = axis if isinstance(axis, tuple) else (axis,)
        return math.prod(shape[self.axis_index(a, len(shape), call)] for a in axes)
