"""The TDSL syntax tree. Every node carries the `Span` of the source text it came from.

Expressions keep the position of the token that names their operation (`op_span`: the
operator of a binary expression, the name of a call, the ``[`` of an index), which is where
the IR op they lower to is located.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Union


class Span(NamedTuple):
    """A range of source text; lines and columns count from 1, the end is exclusive.

    A named tuple rather than a frozen dataclass: the parsers make several per token, and
    a frozen dataclass's constructor (an `object.__setattr__` per field) costs three
    times as much."""

    line: int
    col: int
    end_line: int
    end_col: int

    def to(self, other: "Span") -> "Span":
        """The span from the start of `self` to the end of `other`."""
        return new_span(Span, (self.line, self.col, other.end_line, other.end_col))


# ``new_span(Span, (line, col, end_line, end_col))`` is ``Span(line, col, ...)`` without the
# named tuple's `__new__`, a Python function: half the time, for the parsers' hottest object.
new_span = tuple.__new__


# ---- expressions ---------------------------------------------------------------------

@dataclass(eq=False)
class Number:
    value: int | float
    span: Span


@dataclass(eq=False)
class Name:
    id: str
    span: Span


@dataclass(eq=False)
class String:
    value: str
    span: Span


@dataclass(eq=False)
class Bool:
    value: bool
    span: Span


@dataclass(eq=False)
class ListExpr:
    items: list["Expr"]
    span: Span


@dataclass(eq=False)
class Neg:
    operand: "Expr"
    span: Span          # starts at the minus sign


@dataclass(eq=False)
class Binary:
    """``left OP right``; `op` is the operator text (``+ - * / @ ** < <= > >= == !=``)."""

    op: str
    left: "Expr"
    right: "Expr"
    span: Span
    op_span: Span


@dataclass(eq=False)
class Keyword:
    name: str
    value: "Expr"
    span: Span          # the keyword's name


@dataclass(eq=False)
class Call:
    func: str
    args: list["Expr"]
    kwargs: list[Keyword]
    span: Span
    op_span: Span       # the callee's name


@dataclass(eq=False)
class Slice:
    """``start:stop:step``; absent parts are None."""

    start: "Expr | None"
    stop: "Expr | None"
    step: "Expr | None"
    span: Span


@dataclass(eq=False)
class Index:
    value: "Expr"
    subscripts: list["Expr | Slice"]
    span: Span
    op_span: Span       # the opening bracket


@dataclass(eq=False)
class FieldOf:
    """``value.name``: a field of a parameter group."""

    value: "Expr"
    name: str
    span: Span
    op_span: Span       # the field's name


Expr = Union[Number, Name, String, Bool, ListExpr, Neg, Binary, Call, Index, FieldOf]


# ---- statements ----------------------------------------------------------------------

@dataclass(eq=False)
class Target:
    name: str
    span: Span


@dataclass(eq=False)
class Assign:
    """``a = e`` or ``a, b = e`` (one target per result)."""

    targets: list[Target]
    value: Expr
    span: Span


@dataclass(eq=False)
class For:
    var: Target
    count: int | str    # an integer literal or a symbolic dimension
    count_span: Span
    body: list["Stmt"]
    span: Span          # the ``for`` keyword
    close_span: Span    # the closing brace of the body


@dataclass(eq=False)
class Return:
    values: list[Expr]
    span: Span          # the ``return`` keyword


Stmt = Union[Assign, For, Return]


# ---- definitions ---------------------------------------------------------------------

@dataclass(eq=False)
class TypeExpr:
    """``f32``, ``f32[]`` or ``f32[B, 3]``; dims are ints or symbol names. A group type
    may have `args`, its dims (``Linear(64, 10)``), and a shape, its stack (``Block[L]``).
    `roles`: the ``@ROLE`` annotations after it, each ``(name, span)``."""

    dtype: str
    shape: tuple
    span: Span
    args: tuple = ()
    roles: tuple = ()


@dataclass(eq=False)
class Param:
    name: str
    type: TypeExpr
    is_param: bool
    span: Span
    is_state: bool = False      # ``state``: read and replaced by a step, not differentiated
    init: float = 0.0           # a state input's initial value (``state v: f32[C] = 1``)


@dataclass(eq=False)
class FuncDef:
    name: str
    params: list[Param]
    results: list[TypeExpr]
    body: list[Stmt]
    span: Span          # the ``def`` keyword
    name_span: Span
    close_span: Span    # the closing brace


@dataclass(eq=False)
class RuleDef:
    """``grad f(...) {...}`` or ``tangent f(...) {...}``: a custom derivative of `name`."""

    kind: str           # "grad" or "tangent"
    name: str
    params: list[Target]
    body: list[Stmt]
    span: Span
    name_span: Span
    close_span: Span


@dataclass(eq=False)
class Field:
    """``name: TYPE`` in a group; TYPE is a tensor type or a group (``Block[L]``).
    ``state name: TYPE = INIT`` is a state field (a running statistic)."""

    name: str
    type: TypeExpr
    span: Span
    is_state: bool = False
    init: float = 0.0


@dataclass(eq=False)
class GroupDef:
    """``group NAME(DIM, ...) { field: TYPE ... }``: a parameter group, generic in `params`."""

    name: str
    fields: list[Field]
    span: Span          # the ``group`` keyword
    name_span: Span
    close_span: Span    # the closing brace
    params: list[Target] = field(default_factory=list)


@dataclass(eq=False)
class Module:
    defs: list[FuncDef | RuleDef | GroupDef] = field(default_factory=list)
