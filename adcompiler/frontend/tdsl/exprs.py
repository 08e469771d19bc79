"""Lowering TDSL expressions to IR ops (a mixin of the function lowerer in `lower`).

Operators map to ops (``+ - * / ** @`` -> add sub mul div pow matmul, unary ``-`` -> neg,
comparisons -> lt le gt ge eq ne); calls go to module functions first, then to the op
registry. Every op gets the location of its operator or callee name.
"""
from __future__ import annotations

import difflib

from ...diagnostics import AdcError, Loc
from ...ir.core import Op, Value
from ...ir.types import TensorType, join_dtypes
from . import ast
from .calls import CallLowering
from .groups import GroupLowering, GroupValue
from .values import Multi, Weak, checked_value, default_dtype, fold, literal_dtype

BINARY_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow", "@": "matmul",
              "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
LEFT_ASSOC = ("+", "-", "*", "/", "@")
FOLDABLE = ("+", "-", "*", "/", "**")
OPERATOR_WHAT = {op: f"operator '{op}'" for op in BINARY_OPS}  # what type errors name
MAX_DEPTH = 100


class ExprLowering:
    # ---- helpers ---------------------------------------------------------------------
    def loc(self, span: ast.Span) -> Loc:
        return Loc(self.file, span.line, span.col)

    def error(self, message: str, span: ast.Span) -> AdcError:
        return AdcError(message, self.loc(span))

    def emit(self, name: str, operands: list, attrs: dict, span: ast.Span, what: str) -> Op:
        """Create registry op `name` at `span`; type errors are reported for `what`."""
        loc = self.b.loc = Loc(self.file, span.line, span.col)
        try:
            return self.b.create(name, operands, attrs)
        except AdcError as e:
            msg = e.message.removeprefix(f"{name}: ").removeprefix(f"{what}: ")
            if not (what == name and msg.startswith(f"{name} ")):
                msg = f"{what}: {msg}"
            raise AdcError(msg, e.loc or loc) from None
        except Exception as e:  # a type rule that breaks on odd options is still a user error
            raise AdcError(f"{what}: invalid operands or options ({e})", loc) from None

    def const(self, w: Weak, dtype: str, shape=()) -> Value:
        """Give literal `w` a dtype (and broadcast it to `shape`)."""
        value = checked_value(w.value, dtype, lambda m: self.error(m, w.span))
        v = self.emit("const", [], {"value": value, "dtype": dtype}, w.span, "literal")
        v = v.result
        if shape:
            v = self.emit("broadcast_to", [v], {"shape": tuple(shape)}, w.span, "literal").result
        return v

    def to_type(self, v, t: TensorType):
        """A literal given type `t`; a value is returned as is."""
        return self.const(v, t.dtype, t.shape) if isinstance(v, Weak) else v

    def multi_error(self, v: Multi, span):
        return self.error(f"'{v.callee}' returns {len(v.values)} values; unpack them with "
                          f"'{', '.join('abcdefgh'[:len(v.values)])} = {v.callee}(...)'", span)

    def lookup(self, name: str):
        b = self.scope.lookup(name)
        return None if b is None else b.value

    # ---- expressions -----------------------------------------------------------------
    def expr(self, e):
        """Lower `e` to a `Value`, a `Weak` literal or a `Multi` (several call results)."""
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise self.error(f"expression is nested too deeply (more than {MAX_DEPTH} "
                                 "levels)", e.span)
            lower = _LOWER.get(type(e))
            if lower is None:
                raise self.error("unsupported expression", e.span)
            return lower(self, e)
        finally:
            self.depth -= 1

    def value(self, e):
        """Lower `e` to one result (a `Value` or a `Weak` literal)."""
        v = self.expr(e)
        if type(v) is Multi:
            raise self.multi_error(v, e.span)
        if type(v) is GroupValue:
            raise self.group_error(v, e.span)
        return v

    def number_literal(self, e: ast.Number):
        return Weak(e.value, e.span)

    def list_expr(self, e: ast.ListExpr):
        raise self.error("a list is not a tensor; lists are only op arguments such as "
                         "shapes, axes or the operands of concat/stack", e.span)

    def string_literal(self, e: ast.String):
        raise self.error("strings are only op options (e.g. an einsum spec)", e.span)

    def bool_literal(self, e: ast.Bool):  # a bool scalar, as `where(m, x, false)` wants
        return self.emit("const", [], {"value": bool(e.value), "dtype": "bool"}, e.span,
                         "literal").result

    def name(self, e: ast.Name):
        scope = self.scope
        while scope is not None:  # `lookup`, inlined: most expressions are names
            b = scope.vars.get(e.id)
            if b is not None:
                return b.value
            scope = scope.parent
        msg = f"unknown name '{e.id}'"
        if e.id in self.loop_locals:
            line = self.loop_locals[e.id]
            msg += f" ('{e.id}' is local to the body of the loop at line {line})"
        elif e.id in self.symbols:
            msg += f" ('{e.id}' is a symbolic dimension, not a value)"
        else:
            close = difflib.get_close_matches(e.id, list(self.scope.names()), 1)
            if close:
                msg += f"; did you mean '{close[0]}'?"
        raise self.error(msg, e.span)

    def neg(self, e: ast.Neg):
        spans = []
        while isinstance(e, ast.Neg):  # iterative: long chains of minus signs
            spans.append(e.span)
            e = e.operand
        v = self.value(e)
        for span in reversed(spans):
            if isinstance(v, Weak):
                v = Weak(-v.value, span)
            else:
                v = self.emit("neg", [v], {}, span, "unary '-'").results[0]
        return v

    def binary(self, e: ast.Binary):
        if e.op not in LEFT_ASSOC:
            return self.apply(e, self.value(e.left), self.value(e.right))
        rights = []
        while isinstance(e, ast.Binary) and e.op in LEFT_ASSOC:  # iterative left spine
            rights.append(e)
            e = e.left
        v = self.value(e)
        for node in reversed(rights):
            v = self.apply(node, v, self.value(node.right))
        return v

    def apply(self, e: ast.Binary, a, b):
        """Emit binary operator `e` on already lowered operands."""
        if isinstance(a, Weak) and isinstance(b, Weak) and e.op in FOLDABLE:
            return Weak(fold(e.op, a.value, b.value, lambda m: self.error(m, e.op_span)),
                        e.span)
        a, b = self.meet([a, b])
        return self.emit(BINARY_OPS[e.op], [a, b], {}, e.op_span, OPERATOR_WHAT[e.op]).results[0]

    def meet(self, vals):
        """Give each literal among `vals` the dtype of the tensors it meets."""
        for v in vals:
            if isinstance(v, Weak):
                break
        else:
            return vals  # no literal: nothing to give a dtype
        dtypes = [v.type.dtype for v in vals if isinstance(v, Value) and v.type.dtype != "bool"]
        try:
            other = join_dtypes(*dtypes) if dtypes else None
        except AdcError:
            other = dtypes[0]
        if other is None and all(isinstance(v, Weak) for v in vals):
            floats = [v for v in vals if isinstance(v.value, float)]
            other = default_dtype(floats[0].value if floats else 0)
        return [self.const(v, literal_dtype(v.value, other)) if isinstance(v, Weak) else v
                for v in vals]


# The lowering method of each expression node type: one dict lookup per expression instead
# of a chain of isinstance tests.
_LOWER = {
    ast.Number: ExprLowering.number_literal,
    ast.Name: ExprLowering.name,
    ast.Binary: ExprLowering.binary,
    ast.Neg: ExprLowering.neg,
    ast.Call: CallLowering.call,
    ast.Index: CallLowering.index,
    ast.FieldOf: GroupLowering.field_of,
    ast.ListExpr: ExprLowering.list_expr,
    ast.String: ExprLowering.string_literal,
    ast.Bool: ExprLowering.bool_literal,
}
