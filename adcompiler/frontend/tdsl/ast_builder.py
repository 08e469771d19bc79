"""The lark transformer that turns grammar rules into `ast` nodes (run inline by the parser).

Each method receives the rule's children: already-built nodes and the named tokens the
grammar keeps (keywords, operators and brackets, whose positions become spans).
"""
from __future__ import annotations

import math
import re

from lark import Token, Transformer

from . import ast
from .ast import Span


class TreeError(Exception):
    """A malformed construct found while building the tree (the parser adds the file)."""

    def __init__(self, message: str, span: Span):
        super().__init__(message)
        self.message = message
        self.span = span


def span(x) -> Span:
    """The span of a token or node."""
    if isinstance(x, Token):
        return Span(x.line, x.column, x.end_line, x.end_column)
    return x.span


class _Block:
    def __init__(self, stmts, close: Span):
        self.stmts = stmts
        self.close = close


class _TypeArgs:
    def __init__(self, dims):
        self.dims = dims


class _Args:
    def __init__(self, args, kwargs):
        self.args = args
        self.kwargs = kwargs


def _nodes(children):
    return [c for c in children if not isinstance(c, Token)]


def number_value(text: str, where: Span) -> int | float:
    """The value of a NUMBER token's text."""
    if re.fullmatch(r"\d+", text):
        if len(text) > 400:
            raise TreeError("integer literal is too large", where)
        return int(text)
    value = float(text)
    if math.isinf(value):
        raise TreeError(f"number {text} is too large", where)
    return value


def integer_value(text: str, where: Span, message: str) -> int:
    """A dimension or loop count written as a number: a plain integer of at most 18 digits."""
    if not re.fullmatch(r"\d+", text) or len(text) > 18:
        raise TreeError(message, where)
    return int(text)


def dim_message(text: str) -> str:
    return f"a dimension must be an integer or a name, not {text}"


LOOP_COUNT_MESSAGE = "a loop count must be an integer or a symbolic dimension"


def unescape(raw: str) -> str:
    """The value of a string literal's text between its quotes."""
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), raw)


def split_args(args) -> tuple[list, list]:
    """Call arguments as (positional, keywords): keywords last and each named once."""
    pos, kws, seen = [], [], set()
    for a in args:
        if isinstance(a, ast.Keyword):
            if a.name in seen:
                raise TreeError(f"keyword argument '{a.name}' is repeated", a.span)
            seen.add(a.name)
            kws.append(a)
        elif kws:
            raise TreeError("positional argument after keyword arguments", a.span)
        else:
            pos.append(a)
    return pos, kws


class AstBuilder(Transformer):
    # ---- definitions -----------------------------------------------------------------
    def start(self, c):
        return ast.Module([x for x in c if isinstance(x, (ast.FuncDef, ast.RuleDef,
                                                          ast.GroupDef))])

    def funcdef(self, c):
        kw, name = c[0], c[1]
        params = next((x for x in c if isinstance(x, list) and x and
                       isinstance(x[0], ast.Param)), [])
        results = next(x for x in c if isinstance(x, tuple))
        block = c[-1]
        return ast.FuncDef(name.value, params, list(results), block.stmts, span(kw),
                           span(name), block.close)

    def params(self, c):
        return list(c)

    def param(self, c):
        is_param = isinstance(c[0], Token) and c[0].type == "PARAM"
        is_state = isinstance(c[0], Token) and c[0].type == "STATE"
        name = c[1] if is_param or is_state else c[0]
        init = 0.0
        if isinstance(c[-1], Token) and c[-1].type == "NUMBER":   # state v: T = [-]NUMBER
            init = number_value(c[-1].value, span(c[-1]))
            if isinstance(c[-2], Token) and c[-2].type == "MINUS":
                init = -init
            typ = next(x for x in c if isinstance(x, ast.TypeExpr))
            return ast.Param(name.value, typ, is_param, span(c[0]).to(span(c[-1])), is_state,
                             init)
        return ast.Param(name.value, c[-1], is_param, span(c[0]).to(span(c[-1])), is_state)

    def result(self, c):
        return tuple(c)

    def type(self, c):
        name = c[0]
        args = next((x for x in c[1:] if isinstance(x, _TypeArgs)), None)
        dims = next((x for x in c[1:] if isinstance(x, list)), [])
        last = dims[-1] if dims else args.dims[-1] if args else name
        roles = tuple(x for x in c[1:] if isinstance(x, tuple))
        return ast.TypeExpr(name.value, tuple(d.value for d in dims), span(name).to(span(last)),
                            tuple(d.value for d in args.dims) if args else (), roles)

    def role(self, c):
        return (c[1].value, span(c[0]).to(span(c[1])))

    def type_args(self, c):
        return _TypeArgs(c[0])

    def dims(self, c):
        for d in c:
            if d.type == "NUMBER":
                d.value = integer_value(d.value, span(d), dim_message(d.value))
        return list(c)

    def ruledef(self, c):
        kw, name = c[0], c[1]
        params = c[2] if len(c) == 4 else []
        block = c[-1]
        return ast.RuleDef(kw.value, name.value, params, block.stmts, span(kw), span(name),
                           block.close)

    def groupdef(self, c):
        kw, name, close = c[0], c[1], c[-1]
        fields = [x for x in c if isinstance(x, ast.Field)]
        params = next((x for x in c if isinstance(x, list)), [])
        return ast.GroupDef(name.value, fields, span(kw), span(name), span(close), params)

    def field(self, c):
        is_state = isinstance(c[0], Token) and c[0].type == "STATE"
        name = c[1] if is_state else c[0]
        typ = next(x for x in c if isinstance(x, ast.TypeExpr))
        init = 0.0
        if isinstance(c[-1], Token) and c[-1].type == "NUMBER":   # state v: T = [-]NUMBER
            init = number_value(c[-1].value, span(c[-1]))
            if isinstance(c[-2], Token) and c[-2].type == "MINUS":
                init = -init
        return ast.Field(name.value, typ, span(c[0]).to(span(c[-1])), is_state, init)

    def names(self, c):
        return [ast.Target(t.value, span(t)) for t in c]

    def block(self, c):
        return _Block(_nodes(c), span(c[-1]))

    # ---- statements ------------------------------------------------------------------
    def assign(self, c):
        targets = c[:-1]
        return ast.Assign(targets, c[-1], targets[0].span.to(span(c[-1])))

    def lhs(self, c):
        names = [t for t in c if t.type == "NAME"]
        return ast.Target(".".join(t.value for t in names), span(names[0]).to(span(names[-1])))

    def for_stmt(self, c):
        kw, var, count, block = c
        if count.type == "NUMBER":
            n = integer_value(count.value, span(count), LOOP_COUNT_MESSAGE)
        else:
            n = count.value
        return ast.For(ast.Target(var.value, span(var)), n, span(count), block.stmts,
                       span(kw), block.close)

    def return_stmt(self, c):
        return ast.Return(c[1:], span(c[0]))

    # ---- expressions -----------------------------------------------------------------
    def binop(self, c):
        left, op, right = c
        return ast.Binary(op.value, left, right, span(left).to(span(right)), span(op))

    compare = binop

    def neg(self, c):
        return ast.Neg(c[1], span(c[0]).to(span(c[1])))

    def call(self, c):
        name, rpar = c[0], c[-1]
        args = c[2] if len(c) == 4 else _Args([], [])
        return ast.Call(name.value, args.args, args.kwargs, span(name).to(span(rpar)),
                        span(name))

    def args(self, c):
        return _Args(*split_args(c))

    def kwarg(self, c):
        return ast.Keyword(c[0].value, c[1], span(c[0]))

    def index(self, c):
        value, lsqb, subs, rsqb = c
        return ast.Index(value, subs, span(value).to(span(rsqb)), span(lsqb))

    def field_of(self, c):
        value, _, name = c
        return ast.FieldOf(value, name.value, span(value).to(span(name)), span(name))

    def subscripts(self, c):
        return list(c)

    def slice(self, c):
        parts: list = [None]
        for x in c:
            if isinstance(x, Token) and x.type == "COLON":
                parts.append(None)
            else:
                parts[-1] = x
        parts += [None] * (3 - len(parts))
        return ast.Slice(parts[0], parts[1], parts[2], span(c[0]).to(span(c[-1])))

    def number(self, c):
        return ast.Number(number_value(c[0].value, span(c[0])), span(c[0]))

    def name(self, c):
        return ast.Name(c[0].value, span(c[0]))

    def string(self, c):
        return ast.String(unescape(c[0].value[1:-1]), span(c[0]))

    def true(self, c):
        return ast.Bool(True, span(c[0]))

    def false(self, c):
        return ast.Bool(False, span(c[0]))

    def paren(self, c):
        return c[1]

    def list(self, c):
        items = c[1] if len(c) == 3 else []
        return ast.ListExpr(items, span(c[0]).to(span(c[-1])))

    def items(self, c):
        return list(c)
