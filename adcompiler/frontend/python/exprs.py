"""Translating Python expressions (a mixin of `lowerer.PyLowerer`).

`pyval(node)` gives a `Tensor` (the TDSL expression of a run-time value) or a Python object
known at compile time. Arithmetic on compile-time values is done in Python; arithmetic that
meets a run-time value becomes the TDSL operator it spells (``+ - * / ** @``, comparisons,
unary minus), located at the operator in the user's file.
"""
from __future__ import annotations

import ast as py
import builtins
import math
import operator
import types

import numpy as np

from ...ir.core import Block, Value
from ..tdsl import ast
from .values import (NUMPY_DTYPE, Tensor, describe, has_tensor, is_number,
                     plain_number)

_BINOPS = {py.Add: ("+", operator.add), py.Sub: ("-", operator.sub),
           py.Mult: ("*", operator.mul), py.Div: ("/", operator.truediv),
           py.Pow: ("**", operator.pow), py.MatMult: ("@", operator.matmul),
           py.FloorDiv: ("//", operator.floordiv), py.Mod: ("%", operator.mod),
           py.LShift: ("<<", operator.lshift), py.RShift: (">>", operator.rshift),
           py.BitAnd: ("&", operator.and_), py.BitOr: ("|", operator.or_),
           py.BitXor: ("^", operator.xor)}
_TENSOR_BINOPS = ("+", "-", "*", "/", "**", "@")
_COMPARE = {py.Lt: ("<", operator.lt), py.LtE: ("<=", operator.le),
            py.Gt: (">", operator.gt), py.GtE: (">=", operator.ge),
            py.Eq: ("==", operator.eq), py.NotEq: ("!=", operator.ne),
            py.Is: ("is", operator.is_), py.IsNot: ("is not", operator.is_not),
            py.In: ("in", lambda a, b: a in b),
            py.NotIn: ("not in", lambda a, b: a not in b)}
_STATIC_TYPES = (int, float, bool, str, bytes, type(None), np.generic, np.dtype, type,
                 types.ModuleType, types.FunctionType, types.BuiltinFunctionType, np.ufunc,
                 range, slice, type(Ellipsis))


class PyExprs:
    # ---- helpers ---------------------------------------------------------------------
    def span_of(self, node):
        return self.src.span(node)

    def tdsl(self, v, node):
        """`v` as a TDSL expression: a run-time value, or a number or bool literal."""
        if isinstance(v, Tensor):
            return v.expr
        if isinstance(v, (bool, np.bool_)):
            return ast.Bool(bool(v), self.span_of(node))
        if is_number(v):
            return ast.Number(plain_number(v), self.span_of(node))
        raise self.src.error(f"expected an array or a number, got {describe(v)}", node)

    def type_of(self, v: Tensor, node=None):
        """The IR type of run-time value `v` (None for a literal without a dtype yet),
        found by lowering its expression into a scratch block."""
        e = v.expr
        if isinstance(e, ast.Name):
            b = self.scope.lookup(e.id)
            if b is not None:
                return b.value.type if isinstance(b.value, Value) else None
        hit = self.type_cache.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        saved_calls, saved_locals = len(self.calls), dict(self.loop_locals)
        try:
            with self.b.inside(Block()):
                r = self.value(e)
        finally:
            del self.calls[saved_calls:]
            self.loop_locals = saved_locals
        t = r.type if isinstance(r, Value) else None
        self.type_cache[id(e)] = (e, t)
        return t

    def tensor_type(self, v: Tensor, node):
        t = self.type_of(v, node)
        if t is None:
            raise self.src.error("this value has no shape yet (a number): give it one, "
                                 "e.g. np.asarray(x, dtype=np.float64)", node)
        return t

    # ---- dispatch ----------------------------------------------------------------------
    def pyval(self, node):
        self.pydepth += 1
        try:
            if self.pydepth > 200:
                raise self.src.error("expression is nested too deeply", node)
            handler = _EXPRS.get(type(node))
            if handler is None:
                raise self.src.error(f"{_what(node)} is not supported in a compiled function",
                                     node)
            return handler(self, node)
        finally:
            self.pydepth -= 1

    def e_constant(self, node: py.Constant):
        if isinstance(node.value, complex):
            raise self.src.error("complex numbers are not supported", node)
        return node.value

    def e_name(self, node: py.Name):
        name = node.id
        if name in self.statics:
            return self.statics[name]
        tname = self.alias.get(name, name)
        if self.scope.lookup(tname) is not None:
            return Tensor(ast.Name(tname, self.span_of(node)))
        return self.global_value(name, node)

    def global_value(self, name: str, node):
        """A name the function reads from its closure, its module or the builtins."""
        f = self.pyfunc
        code = f.__code__
        if name in code.co_freevars and f.__closure__:
            cell = f.__closure__[code.co_freevars.index(name)]
            try:
                value = cell.cell_contents
            except ValueError:
                raise self.src.error(f"'{name}' is not bound yet", node) from None
        elif name in f.__globals__:
            value = f.__globals__[name]
        elif hasattr(builtins, name):
            value = getattr(builtins, name)
        else:
            raise self.src.error(f"unknown name '{name}'", node)
        return self.checked_global(name, value, node)

    def checked_global(self, name, value, node):
        if isinstance(value, np.ndarray):
            if value.ndim == 0 and value.dtype.kind in "fib":
                return value.item()
            raise self.src.error(f"'{name}' is a NumPy array defined outside the function; "
                                 "only numbers are compile-time constants: pass the array "
                                 "as an argument", node)
        if isinstance(value, (tuple, list)):
            if not all(isinstance(x, _STATIC_TYPES) for x in value):
                raise self.src.error(f"'{name}' is {describe(value)} that holds objects "
                                     "other than numbers; pass it as an argument", node)
            return tuple(value) if isinstance(value, tuple) else list(value)
        if isinstance(value, _STATIC_TYPES) or getattr(value, "_adc_op", None) is not None \
                or callable(value):
            return value
        raise self.src.error(f"'{name}' is {describe(value)}, not an array or a number "
                             "(pass arrays as arguments)", node)

    # ---- containers ----------------------------------------------------------------------
    def e_tuple(self, node: py.Tuple):
        return tuple(self.starred_items(node.elts))

    def e_list(self, node: py.List):
        return self.starred_items(node.elts)

    def starred_items(self, elts) -> list:
        out = []
        for e in elts:
            if isinstance(e, py.Starred):
                v = self.pyval(e.value)
                if not isinstance(v, (tuple, list)):
                    raise self.src.error(f"cannot unpack {describe(v)} with *", e)
                out.extend(v)
            else:
                out.append(self.pyval(e))
        return out

    def e_dict(self, node: py.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                d = self.pyval(v)
                if not isinstance(d, dict):
                    raise self.src.error(f"cannot unpack {describe(d)} with **", v)
                out.update(d)
                continue
            key = self.pyval(k)
            if has_tensor(key):
                raise self.src.error("a dict key must be known at compile time", k)
            out[key] = self.pyval(v)
        return out

    def e_comprehension(self, node):
        """``[e for x in seq if c]`` over a compile-time sequence: unrolled."""
        if len(node.generators) != 1 or node.generators[0].is_async:
            raise self.src.error("only comprehensions with one 'for' are supported", node)
        gen = node.generators[0]
        seq = self.pyval(gen.iter)
        if isinstance(seq, Tensor):
            raise self.src.error("a comprehension over an array's rows is not supported; "
                                 "loop over range(x.shape[0])", gen.iter)
        saved = dict(self.statics)
        names = [n.id for n in py.walk(gen.target) if isinstance(n, py.Name)]
        out = []
        try:
            for item in list(seq):
                self.bind_target(gen.target, item, gen.iter)
                if all(self.static_test(c, "if") for c in gen.ifs):
                    out.append(self.pyval(node.elt))
        finally:
            for n in names:
                self.statics.pop(n, None)
            self.statics.update({k: v for k, v in saved.items() if k in names})
        return tuple(out) if isinstance(node, py.GeneratorExp) else out

    # ---- operators -----------------------------------------------------------------------
    def binop(self, node: py.BinOp):
        sym, fn = _BINOPS[type(node.op)]
        a, b = self.pyval(node.left), self.pyval(node.right)
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            return self.fold(fn, a, b, node, sym)
        if sym not in _TENSOR_BINOPS:
            raise self.src.error(f"operator '{sym}' on arrays is not supported", node)
        if sym == "@":
            for v, side in ((a, node.left), (b, node.right)):
                if not isinstance(v, Tensor) or (self.type_of(v) or _SCALAR).rank == 0:
                    raise self.src.error("'@' needs arrays of rank 1 or more on both sides",
                                         side)
        left, right = self.tdsl(a, node.left), self.tdsl(b, node.right)
        span = self.span_of(node)
        op_span = self.src.after(self.span_of(node.left), sym)
        return Tensor(ast.Binary(sym, left, right, span, op_span))

    def fold(self, fn, a, b, node, sym):
        try:
            r = fn(plain_number(a), plain_number(b))
        except ZeroDivisionError:
            raise self.src.error("division by zero in a compile-time expression",
                                 node) from None
        except Exception as e:  # noqa: BLE001 - a TypeError of the user's Python
            raise self.src.error(f"'{sym}' cannot combine {describe(a)} and {describe(b)} "
                                 f"({e})", node) from None
        return r

    def e_unary(self, node: py.UnaryOp):
        v = self.pyval(node.operand)
        if isinstance(node.op, py.Not):
            if has_tensor(v):
                raise self.src.error("'not' of a run-time value: use np.logical_not "
                                     "(or compare)", node)
            return not v
        if not isinstance(v, Tensor):
            try:
                return {py.USub: operator.neg, py.UAdd: operator.pos,
                        py.Invert: operator.invert}[type(node.op)](plain_number(v))
            except TypeError:
                raise self.src.error(f"bad operand {describe(v)}", node) from None
        if isinstance(node.op, py.UAdd):
            return v
        if isinstance(node.op, py.Invert):
            raise self.src.error("'~' on arrays is not supported", node)
        return Tensor(ast.Neg(v.expr, self.span_of(node)))

    def e_compare(self, node: py.Compare):
        left = self.pyval(node.left)
        values = [self.pyval(c) for c in node.comparators]
        if not any(isinstance(v, Tensor) for v in [left] + values):
            result = True
            for op, right in zip(node.ops, values):
                result = result and bool(_COMPARE[type(op)][1](left, right))
                left = right
            return result
        if len(node.ops) != 1:
            raise self.src.error("a chained comparison of arrays is not supported "
                                 "(combine two comparisons with np.logical_and)", node)
        sym = _COMPARE[type(node.ops[0])][0]
        if sym in ("is", "is not", "in", "not in"):
            raise self.src.error(f"'{sym}' on an array is not supported", node)
        a, b = self.tdsl(left, node.left), self.tdsl(values[0], node.comparators[0])
        op_span = self.src.after(self.span_of(node.left), sym)
        return Tensor(ast.Binary(sym, a, b, self.span_of(node), op_span))

    def e_boolop(self, node: py.BoolOp):
        is_and = isinstance(node.op, py.And)
        v = None
        for e in node.values:
            v = self.pyval(e)
            if has_tensor(v):
                raise self.src.error("'and'/'or' of a run-time value: use np.logical_and / "
                                     "np.logical_or, or np.where", e)
            if bool(v) != is_and:
                return v
        return v

    def e_ifexp(self, node: py.IfExp):
        return self.pyval(node.body if self.static_test(node.test, "if") else node.orelse)

    # ---- attributes and subscripts -------------------------------------------------------
    def e_attribute(self, node: py.Attribute):
        obj = self.pyval(node.value)
        name = node.attr
        if isinstance(obj, Tensor):
            return self.tensor_attribute(obj, name, node)
        if isinstance(obj, types.ModuleType) and obj.__name__ == "adcompiler.ops":
            from ...ops.namespace import op_function
            try:   # adc.ops.NAME is the op NAME, even where a submodule has that name
                return op_function(name)
            except AttributeError:
                raise self.src.error(f"adc.ops has no op '{name}'", node) from None
        if isinstance(obj, types.ModuleType):
            if not hasattr(obj, name):
                raise self.src.error(f"module '{obj.__name__}' has no attribute '{name}'",
                                     node)
            return self.checked_global(f"{obj.__name__}.{name}", getattr(obj, name), node)
        if isinstance(obj, np.dtype) and name in ("itemsize", "kind", "name"):
            return getattr(obj, name)
        if isinstance(obj, (int, float)) and name in ("real", "imag"):
            return getattr(obj, name)
        if isinstance(obj, dict) and name in ("items", "keys", "values", "get"):
            return _DictMethod(obj, name)
        raise self.src.error(f"'.{name}' of {describe(obj)} is not supported", node)

    def tensor_attribute(self, v: Tensor, name: str, node):
        if name == "T":
            return self.make_op("transpose", [v], {}, node, node)
        t = self.tensor_type(v, node.value)
        if name == "shape":
            return tuple(t.shape)
        if name == "ndim":
            return t.rank
        if name == "size":
            return math.prod(t.shape)
        if name == "dtype":
            return NUMPY_DTYPE[t.dtype]
        return _BoundMethod(v, name, node)

    def e_subscript(self, node: py.Subscript):
        obj = self.pyval(node.value)
        if isinstance(obj, Tensor):
            return self.index_tensor(obj, node)
        key = self.pyval(node.slice)
        if has_tensor(key):
            raise self.src.error(
                f"{describe(obj)} is indexed with a run-time value (such as the index of a "
                "loop that stays a loop): loop over the sequence itself instead "
                "(for layer in layers: ...)", node.slice)
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError) as e:
            raise self.src.error(f"cannot index {describe(obj)} with {key!r} ({e})",
                                 node) from None

    def e_slice(self, node: py.Slice):
        parts = [None if p is None else self.pyval(p) for p in (node.lower, node.upper,
                                                                 node.step)]
        if any(has_tensor(p) for p in parts):
            raise self.src.error("slice bounds must be known at compile time (a dynamic "
                                 "start needs a loop index: x[i])", node)
        return slice(*parts)

    def index_tensor(self, v: Tensor, node: py.Subscript):
        sl = node.slice
        elts = sl.elts if isinstance(sl, py.Tuple) else [sl]
        t = None
        subs, new_axes, pos = [], [], 0
        items = []
        for e in elts:
            items.append((e, e if isinstance(e, py.Slice) else self.pyval(e)))
        n_real = sum(1 for _, k in items if k is not None and k is not Ellipsis)
        for e, k in items:
            if isinstance(e, py.Slice):
                sb = [None if p is None else self.tdsl(self.static_index(p, "a slice bound"), p)
                      for p in (e.lower, e.upper, e.step)]
                if e.step is not None and self.static_index(e.step, "a slice step") == 0:
                    raise self.src.error("a slice step cannot be zero", e.step)
                subs.append(ast.Slice(*sb, self.span_of(e)))
                pos += 1
            elif k is None:
                new_axes.append(pos)
                pos += 1
            elif k is Ellipsis:
                t = t or self.tensor_type(v, node.value)
                fill = t.rank - n_real
                if fill < 0:
                    raise self.src.error("too many indices for the array", node)
                span = self.span_of(e)
                subs += [ast.Slice(None, None, None, span) for _ in range(fill)]
                pos += fill
            elif isinstance(k, Tensor):
                kt = self.type_of(k)
                if kt is not None and (kt.rank != 0 or kt.dtype not in ("i32", "i64")):
                    raise self.src.error(
                        f"indexing with an array ({kt}) is not supported (basic indexing "
                        "only: integers, slices, a loop index); use np.take or "
                        "adc.ops.take", e)
                subs.append(k.expr)
            elif isinstance(k, slice):
                raise self.src.error("unsupported index", e)
            elif is_number(k) and isinstance(plain_number(k), int):
                subs.append(ast.Number(plain_number(k), self.span_of(e)))
            elif isinstance(k, (tuple, list)):
                raise self.src.error("indexing with a list is not supported (basic indexing "
                                     "only); use np.take or adc.ops.take", e)
            else:
                raise self.src.error(f"cannot index an array with {describe(k)}", e)
        bracket = self.src.after(self.span_of(node.value), "[")
        out = v.expr if not subs else ast.Index(v.expr, subs, self.span_of(node), bracket)
        if new_axes:
            shape = list(self.tensor_type(Tensor(out), node).shape)
            for p in new_axes:
                shape.insert(p, 1)
            out = ast.Call("reshape", [out, self.shape_list(shape, node)], [],
                           self.span_of(node), bracket)
        return Tensor(out)

    def static_index(self, node, what: str) -> int:
        v = self.pyval(node)
        if has_tensor(v) or not is_number(v) or not isinstance(plain_number(v), int):
            raise self.src.error(f"{what} must be an integer known at compile time, got "
                                 f"{describe(v)}", node)
        return plain_number(v)

    def shape_list(self, shape, node):
        span = self.span_of(node)
        return ast.ListExpr([ast.Number(int(d), span) for d in shape], span)

    def e_starred(self, node):
        raise self.src.error("*args here is not supported", node)


_SCALAR = type("Scalar", (), {"rank": 0})()


class _BoundMethod:
    """``x.sum`` before it is called: an array method (see `numpy_calls`)."""

    def __init__(self, obj: Tensor, name: str, node):
        self.obj, self.name, self.node = obj, name, node


class _DictMethod:
    def __init__(self, d: dict, name: str):
        self.d, self.name = d, name

    def __call__(self, *args):
        if self.name == "get":
            return self.d.get(*args)
        return list(getattr(self.d, self.name)())


def _what(node) -> str:
    names = {py.Lambda: "a lambda", py.JoinedStr: "an f-string", py.Await: "await",
             py.Yield: "yield", py.YieldFrom: "yield from", py.NamedExpr: "':='",
             py.Set: "a set", py.SetComp: "a set comprehension"}
    return names.get(type(node), type(node).__name__)


_EXPRS = {
    py.Constant: PyExprs.e_constant, py.Name: PyExprs.e_name, py.Tuple: PyExprs.e_tuple,
    py.List: PyExprs.e_list, py.Dict: PyExprs.e_dict, py.BinOp: PyExprs.binop,
    py.UnaryOp: PyExprs.e_unary, py.Compare: PyExprs.e_compare,
    py.BoolOp: PyExprs.e_boolop, py.IfExp: PyExprs.e_ifexp,
    py.Attribute: PyExprs.e_attribute, py.Subscript: PyExprs.e_subscript,
    py.Slice: PyExprs.e_slice, py.ListComp: PyExprs.e_comprehension,
    py.GeneratorExp: PyExprs.e_comprehension, py.Starred: PyExprs.e_starred,
    py.Call: lambda self, node: self.e_call(node),
}
