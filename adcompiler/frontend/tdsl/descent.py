"""The fast path of TDSL parsing: a regex lexer and a recursive-descent parser over the same
grammar as ``grammar/tdsl.lark``, building the same `ast` nodes.

lark's LALR parser spends about 30 µs per token in Python (its lexer, parser state machine
and tree callbacks); this parser takes a few. It only has to be right for programs that
parse: at the first thing it does not take (a syntax error, a malformed literal, nesting
deeper than the Python stack) it raises `Unsupported`, and `parse.parse` hands the text to
lark, whose result or error message is then the one reported. tests/test_frontend_descent.py
checks both parsers give identical trees, spans included, on the samples, the conformance
programs and fuzz mutations of them.
"""
from __future__ import annotations

import re

from . import ast
from .ast import Span, new_span
from .ast_builder import (LOOP_COUNT_MESSAGE, dim_message, integer_value, number_value,
                          split_args, unescape)


class Unsupported(Exception):
    """Not parsed here: lark decides (and words the error, if there is one)."""


# One token per match, after optional blanks (WS of the grammar; `\r` is gone once newlines
# are normalized). Groups: 1 newline, 2 comment, 3 name, 4 number, 5 string, 6 punctuation
# (longest first, as lark's basic lexer orders string terminals), 7 any other character
# (which lark decides on). So a match starts wherever the last one ended, and after the
# last one only blanks remain.
_TOKEN = re.compile(r'[ \t\f]*(?:(\n)|(#[^\n]*)|([A-Za-z_][A-Za-z0-9_]*)|'
                    r'((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)|("(?:[^"\\\n]|\\[^\n])*")|'
                    r'(\*\*|->|<=|>=|==|!=|[-+*/@<>=(){}\[\]:,;.])|([^ \t\f\n]))')
KEYWORDS = {w: w.upper() for w in ("def", "grad", "tangent", "param", "for", "in", "range",
                                   "return", "true", "false", "group", "state")}
_SEPS = ("NL", ";")
_CMP = frozenset(("<", "<=", ">", ">=", "==", "!="))
_OPERATORS = _CMP | {"+", "-", "*", "/", "@"}  # the binary operators but ``**`` (a factor's)
_POSTFIX = frozenset(("(", "[", "."))  # what may follow a name that is not a bare name
_EXPR_START = frozenset(("NAME", "NUMBER", "STRING", "TRUE", "FALSE", "(", "[", "-"))


def lex(text: str) -> tuple[list[str], list[str], list[int], list[int]]:
    """Token kinds, texts, lines and columns; newlines inside ( ) and [ ] dropped, as the
    grammar's post-lexer does. Kinds: NAME, NUMBER, STRING, NL, a keyword in capitals, or
    the punctuation itself; the list ends with $END."""
    kinds, vals, lines, cols = [], [], [], []
    line, line_start, depth = 1, 0, 0
    m = None
    for m in _TOKEN.finditer(text):
        g = m.lastindex
        if g == 3:
            v = m.group(3)
            kinds.append(KEYWORDS.get(v, "NAME"))
        elif g == 6:
            v = m.group(6)
            kinds.append(v)
            if v == "(" or v == "[":
                depth += 1
            elif (v == ")" or v == "]") and depth:
                depth -= 1
        elif g == 1:
            if depth == 0:
                kinds.append("NL")
                vals.append("\n")
                lines.append(line)
                cols.append(m.start(1) - line_start + 1)
            line += 1
            line_start = m.end()
            continue
        elif g == 4 or g == 5:
            v = m.group(g)
            kinds.append("NUMBER" if g == 4 else "STRING")
        elif g == 2:
            continue
        else:
            raise Unsupported
        vals.append(v)
        lines.append(line)
        cols.append(m.start(g) - line_start + 1)
    pos = m.end() if m else 0  # the end of the last token
    kinds.append("$END")
    vals.append("")
    lines.append(line)
    cols.append(pos - line_start + 1)
    return kinds, vals, lines, cols


def parse(text: str) -> ast.Module:
    """The syntax tree of `text` (newlines normalized), or `Unsupported`."""
    return _Parser(*lex(text)).module()


class _Parser:
    def __init__(self, kinds, vals, lines, cols):
        self.kinds, self.vals, self.lines, self.cols = kinds, vals, lines, cols
        self.i = 0

    # ---- tokens ------------------------------------------------------------------------
    def span(self, i: int) -> Span:
        line, col = self.lines[i], self.cols[i]
        return new_span(Span, (line, col, line, col + len(self.vals[i])))

    def expect(self, kind: str) -> int:
        i = self.i
        if self.kinds[i] != kind:
            raise Unsupported
        self.i = i + 1
        return i

    def skip(self, kinds) -> None:
        while self.kinds[self.i] in kinds:
            self.i += 1

    def comma_list(self, item, close: str, at_least_one: bool = True) -> list:
        """``item ("," item)* ","?`` up to `close` (not consumed)."""
        out = []
        if not at_least_one and self.kinds[self.i] == close:
            return out
        while True:
            out.append(item())
            if self.kinds[self.i] != ",":
                return out
            self.i += 1
            if self.kinds[self.i] == close:
                return out

    # ---- definitions -------------------------------------------------------------------
    def module(self) -> ast.Module:
        defs = []
        while True:
            k = self.kinds[self.i]
            if k in _SEPS:
                self.i += 1
            elif k == "DEF":
                defs.append(self.funcdef())
            elif k == "GRAD" or k == "TANGENT":
                defs.append(self.ruledef())
            elif k == "GROUP":
                defs.append(self.groupdef())
            elif k == "$END":
                return ast.Module(defs)
            else:
                raise Unsupported

    def funcdef(self) -> ast.FuncDef:
        kw = self.expect("DEF")
        name = self.expect("NAME")
        self.expect("(")
        params = self.comma_list(self.param, ")", at_least_one=False)
        self.expect(")")
        self.expect("->")
        if self.kinds[self.i] == "(":
            self.i += 1
            results = self.comma_list(self.type, ")")
            self.expect(")")
        else:
            results = [self.type()]
        self.skip(("NL",))
        body, close = self.block()
        return ast.FuncDef(self.vals[name], params, results, body, self.span(kw),
                           self.span(name), close)

    def param(self) -> ast.Param:
        first = self.i
        is_param = self.kinds[first] == "PARAM"
        is_state = self.kinds[first] == "STATE"
        if is_param or is_state:
            self.i += 1
        name = self.expect("NAME")
        self.expect(":")
        t = self.type()
        init, end = 0.0, t.span
        if is_state and self.kinds[self.i] == "=":   # the state's initial value
            init, end = self.state_init()
        return ast.Param(self.vals[name], t, is_param, self.span(first).to(end), is_state,
                         init)

    def state_init(self) -> tuple:
        """``= [-]NUMBER`` after a state's type: its value and the number's span."""
        self.i += 1
        sign = -1 if self.kinds[self.i] == "-" else 1
        self.i += sign < 0
        tok = self.expect("NUMBER")
        return sign * number_value(self.vals[tok], self.span(tok)), self.span(tok)

    def type(self) -> ast.TypeExpr:
        name = self.expect("NAME")
        end = self.span(name)
        dims: list = []
        args: list = []
        if self.kinds[self.i] == "(":   # a group's dims
            self.i += 1
            idx = self.comma_list(self.dim, ")")
            self.expect(")")
            args = self.dim_values(idx)
            end = self.span(idx[-1])
        if self.kinds[self.i] == "[":
            self.i += 1
            idx = self.comma_list(self.dim, "]", at_least_one=False)
            self.expect("]")
            dims = self.dim_values(idx)
            if idx:
                end = self.span(idx[-1])
        roles = []
        while self.kinds[self.i] == "@":   # a parameter's role: W: f32[I, O] @weight
            at = self.i
            self.i += 1
            role = self.expect("NAME")
            roles.append((self.vals[role], self.span(at).to(self.span(role))))
        return ast.TypeExpr(self.vals[name], tuple(dims), self.span(name).to(end),
                            tuple(args), tuple(roles))

    def dim_values(self, idx: list[int]) -> list:
        out = []
        for d in idx:
            text = self.vals[d]
            if self.kinds[d] == "NUMBER":
                out.append(integer_value(text, self.span(d), dim_message(text)))
            else:
                out.append(text)
        return out

    def dim(self) -> int:
        i = self.i
        if self.kinds[i] not in ("NUMBER", "NAME"):
            raise Unsupported
        self.i = i + 1
        return i

    def ruledef(self) -> ast.RuleDef:
        kw = self.i
        self.i += 1
        name = self.expect("NAME")
        self.expect("(")
        params = self.comma_list(self.target, ")", at_least_one=False)
        self.expect(")")
        self.skip(("NL",))
        body, close = self.block()
        return ast.RuleDef(self.vals[kw], self.vals[name], params, body, self.span(kw),
                           self.span(name), close)

    def groupdef(self) -> ast.GroupDef:
        kw = self.expect("GROUP")
        name = self.expect("NAME")
        params = []
        if self.kinds[self.i] == "(":
            self.i += 1
            params = self.comma_list(self.target, ")")
            self.expect(")")
        self.skip(("NL",))
        self.expect("{")
        fields, seps = [], ("NL", ";", ",")
        while True:
            self.skip(seps)
            if self.kinds[self.i] == "}":
                close = self.span(self.i)
                self.i += 1
                return ast.GroupDef(self.vals[name], fields, self.span(kw), self.span(name),
                                    close, params)
            first = self.i
            is_state = self.kinds[first] == "STATE"
            self.i += is_state
            fname = self.expect("NAME")
            self.expect(":")
            t = self.type()
            init, end = 0.0, t.span
            if is_state and self.kinds[self.i] == "=":   # the state's initial value
                init, end = self.state_init()
            fields.append(ast.Field(self.vals[fname], t, self.span(first).to(end), is_state,
                                    init))
            if self.kinds[self.i] not in seps and self.kinds[self.i] != "}":
                raise Unsupported

    def lhs(self) -> ast.Target:
        """An assigned name, or a group's field (``bn.mean``: its path as the name)."""
        first = self.expect("NAME")
        names, last = [self.vals[first]], first
        while self.kinds[self.i] == ".":
            self.i += 1
            last = self.expect("NAME")
            names.append(self.vals[last])
        return ast.Target(".".join(names), self.span(first).to(self.span(last)))

    def target(self) -> ast.Target:
        i = self.expect("NAME")
        return ast.Target(self.vals[i], self.span(i))

    def block(self) -> tuple[list, Span]:
        self.expect("{")
        stmts = []
        kinds = self.kinds
        while True:
            self.skip(_SEPS)
            if kinds[self.i] == "}":
                close = self.span(self.i)
                self.i += 1
                return stmts, close
            stmts.append(self.stmt())
            if kinds[self.i] not in _SEPS and kinds[self.i] != "}":
                raise Unsupported

    # ---- statements --------------------------------------------------------------------
    def stmt(self):
        k = self.kinds[self.i]
        if k == "NAME":
            targets = [self.lhs()]
            while self.kinds[self.i] == ",":
                self.i += 1
                targets.append(self.lhs())
            self.expect("=")
            value = self.expr()
            return ast.Assign(targets, value, targets[0].span.to(value.span))
        if k == "FOR":
            return self.for_stmt()
        if k == "RETURN":
            kw = self.i
            self.i += 1
            values = [self.expr()]
            while self.kinds[self.i] == ",":
                self.i += 1
                values.append(self.expr())
            return ast.Return(values, self.span(kw))
        raise Unsupported

    def for_stmt(self) -> ast.For:
        kw = self.expect("FOR")
        var = self.target()
        self.expect("IN")
        self.expect("RANGE")
        self.expect("(")
        c = self.dim()
        self.expect(")")
        count_span = self.span(c)
        count = self.vals[c]
        if self.kinds[c] == "NUMBER":
            count = integer_value(count, count_span, LOOP_COUNT_MESSAGE)
        self.skip(("NL",))
        body, close = self.block()
        return ast.For(var, count, count_span, body, self.span(kw), close)

    # ---- expressions, lowest precedence first ------------------------------------------
    def binary(self, left, op: int, right) -> ast.Binary:
        return ast.Binary(self.vals[op], left, right, left.span.to(right.span), self.span(op))

    def expr(self):
        left = self.factor()
        if self.kinds[self.i] in _OPERATORS:  # else a single factor, the commonest case
            left = self.arith(self.term(left))
            if self.kinds[self.i] in _CMP:
                op = self.i
                self.i += 1
                left = self.binary(left, op, self.arith(self.term(self.factor())))
                if self.kinds[self.i] in _CMP:
                    raise Unsupported  # chained comparison
        return left

    def arith(self, left):
        """The term `left`, then ``(("+" | "-") term)*``."""
        kinds = self.kinds
        while kinds[self.i] == "+" or kinds[self.i] == "-":
            op = self.i
            self.i += 1
            left = self.binary(left, op, self.term(self.factor()))
        return left

    def term(self, left):
        """The factor `left`, then ``(("*" | "/" | "@") factor)*``."""
        kinds = self.kinds
        while kinds[self.i] in ("*", "/", "@"):
            op = self.i
            self.i += 1
            left = self.binary(left, op, self.factor())
        return left

    def factor(self):
        i = self.i
        kinds = self.kinds
        if kinds[i] == "-":
            self.i = i + 1
            operand = self.factor()
            return ast.Neg(operand, self.span(i).to(operand.span))
        if kinds[i] == "NAME" and kinds[i + 1] not in _POSTFIX:
            self.i = i + 1  # a bare name, the commonest factor: no postfix or atom call
            left = ast.Name(self.vals[i], self.span(i))
        else:
            left = self.postfix()
        if kinds[self.i] == "**":
            op = self.i
            self.i += 1
            return self.binary(left, op, self.factor())
        return left

    def postfix(self):
        i = self.i
        kinds = self.kinds
        if kinds[i] == "NAME" and kinds[i + 1] == "(":
            self.i = i + 2
            args = self.comma_list(self.arg, ")", at_least_one=False)
            rpar = self.expect(")")
            pos, kws = split_args(args)
            name = self.span(i)
            value = ast.Call(self.vals[i], pos, kws, name.to(self.span(rpar)), name)
        else:
            value = self.atom()
        while kinds[self.i] == "[" or kinds[self.i] == ".":
            if kinds[self.i] == ".":
                self.i += 1
                name = self.expect("NAME")
                where = self.span(name)
                value = ast.FieldOf(value, self.vals[name], value.span.to(where), where)
                continue
            lsqb = self.i
            self.i += 1
            subs = self.comma_list(self.subscript, "]")
            rsqb = self.expect("]")
            value = ast.Index(value, subs, value.span.to(self.span(rsqb)), self.span(lsqb))
        return value

    def arg(self):
        i = self.i
        if self.kinds[i] == "NAME" and self.kinds[i + 1] == "=":
            self.i = i + 2
            return ast.Keyword(self.vals[i], self.expr(), self.span(i))
        return self.expr()

    def subscript(self):
        parts: list = [None]
        first = last = None  # spans of the slice's first and last pieces
        if self.kinds[self.i] != ":":
            parts[0] = self.expr()
            if self.kinds[self.i] != ":":
                return parts[0]
            first = parts[0].span
        for _ in range(2):
            if self.kinds[self.i] != ":":
                break
            colon = self.span(self.i)
            self.i += 1
            first = first or colon
            last = colon
            parts.append(None)
            if self.kinds[self.i] in _EXPR_START:
                parts[-1] = self.expr()
                last = parts[-1].span
        parts += [None] * (3 - len(parts))
        return ast.Slice(parts[0], parts[1], parts[2], first.to(last))

    def atom(self):
        i = self.i
        k = self.kinds[i]
        self.i = i + 1
        if k == "NAME":
            return ast.Name(self.vals[i], self.span(i))
        if k == "NUMBER":
            where = self.span(i)
            return ast.Number(number_value(self.vals[i], where), where)
        if k == "(":
            inner = self.expr()
            self.expect(")")
            return inner
        if k == "[":
            items = self.comma_list(self.expr, "]", at_least_one=False)
            rsqb = self.expect("]")
            return ast.ListExpr(items, self.span(i).to(self.span(rsqb)))
        if k == "STRING":
            return ast.String(unescape(self.vals[i][1:-1]), self.span(i))
        if k == "TRUE" or k == "FALSE":
            return ast.Bool(k == "TRUE", self.span(i))
        raise Unsupported
