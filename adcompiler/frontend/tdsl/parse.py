"""TDSL text -> syntax tree (`ast.Module`).

Programs are parsed by the recursive-descent parser of `descent` (several times faster).
Whatever it does not take, a syntax error above all, goes to the reference parser: the
grammar (``grammar/tdsl.lark``, package data of `adcompiler.grammar`) under lark's LALR
parser with an inline transformer, which builds the tree bottom-up without recursion however
deeply the program nests. Syntax errors become `AdcError`s with the position of the
offending token and a description of what was expected.
"""
from __future__ import annotations

import importlib.resources

import lark
from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from ...diagnostics import AdcError, Loc, normalize_newlines
from . import ast, descent
from .ast_builder import AstBuilder, TreeError

_parser: lark.Lark | None = None


class _BracketNewlines:
    """Post-lexer: drops the newlines inside ( ) and [ ] (they do not end a statement)."""

    always_accept = ()

    def process(self, stream):
        depth = 0
        for tok in stream:
            if tok.type == "_NL":
                if depth == 0:
                    yield tok
                continue
            if tok.type in ("LPAR", "LSQB"):
                depth += 1
            elif tok.type in ("RPAR", "RSQB"):
                depth = max(depth - 1, 0)
            yield tok


def grammar_text() -> str:
    return importlib.resources.files("adcompiler.grammar").joinpath("tdsl.lark").read_text()


def _get_parser() -> lark.Lark:
    global _parser
    if _parser is None:
        _parser = lark.Lark(grammar_text(), parser="lalr", lexer="basic",
                            postlex=_BracketNewlines(), transformer=AstBuilder(),
                            maybe_placeholders=False)
    return _parser


def parse(text: str, filename: str = "<input>") -> ast.Module:
    """Parse TDSL source into a syntax tree; every error is an `AdcError` with a `Loc`."""
    text = normalize_newlines(text)  # lines as the error renderer counts them
    try:
        return descent.parse(text)
    except (descent.Unsupported, TreeError, RecursionError):
        pass  # lark's parser decides, and words the error
    return parse_lark(text, filename)


def parse_lark(text: str, filename: str = "<input>") -> ast.Module:
    """`parse` by lark's parser alone (`text`'s newlines normalized)."""
    parser = _get_parser()
    try:
        return parser.parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, parser, text, filename) from None
    except TreeError as e:
        raise AdcError(e.message, Loc(filename, e.span.line, e.span.col)) from None


# ---- syntax error messages -----------------------------------------------------------

_EXPR_START = {"NAME", "NUMBER", "STRING", "TRUE", "FALSE", "LPAR", "LSQB", "MINUS"}
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "AT", "POW", "LT", "LE", "GT", "GE", "EQ",
              "NE", "LSQB", "DOT"}
_COMPARISONS = {"LT", "LE", "GT", "GE", "EQ", "NE"}
_KEYWORDS = {"def", "grad", "tangent", "param", "for", "in", "range", "return", "true",
             "false", "group"}
_NAMED = {"NAME": "a name", "NUMBER": "a number", "STRING": "a string",
          "_NL": "a newline", "SEMICOLON": "';'", "$END": "the end of the file"}


def _terminal_text(parser: lark.Lark) -> dict[str, str]:
    table = {}
    for t in parser.terminals:
        if isinstance(t.pattern, lark.lexer.PatternStr):
            table[t.name] = t.pattern.value
    return table


def _describe_expected(expected: set[str], texts: dict[str, str]) -> str:
    names = set(expected)
    parts = []
    if {"NAME", "NUMBER", "LPAR"} <= names:
        names -= _EXPR_START
        parts.append("an expression")
    if len(names & _OPERATORS) >= 3:
        names -= _OPERATORS
        parts.append("an operator")
    rest = []
    for n in names:
        if n in _NAMED:
            rest.append(_NAMED[n])
        elif n in texts:
            rest.append(f"'{texts[n]}'")
        else:
            rest.append(n.lower())
    parts += sorted(rest)
    if not parts:
        return ""
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def _describe_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    if tok.type == "_NL":
        return "end of line"
    if tok.type == "NAME":
        return f"name '{tok.value}'"
    if tok.type == "NUMBER":
        return f"number {tok.value}"
    if tok.type == "STRING":
        return f"string {tok.value}"
    if tok.value in _KEYWORDS:
        return f"keyword '{tok.value}'"
    return f"'{tok.value}'"


def _acceptable(e: UnexpectedToken) -> set[str]:
    """The exact set of terminals the parser could take here.

    LALR lookahead sets (`e.expected`) are merged across contexts; trying each terminal on a
    copy of the parser state gives only those that really continue the program.
    """
    try:
        return set(e.interactive_parser.accepts())
    except Exception:
        return set(e.expected or ())


def _end_loc(parser: lark.Lark, text: str, filename: str) -> Loc:
    """Just after the last token: where an unexpected end of file is reported."""
    last = None
    for tok in parser.lex(text):
        if tok.type != "_NL":
            last = tok
    return Loc(filename, last.end_line, last.end_column) if last else Loc(filename, 1, 1)


def _syntax_error(e: UnexpectedInput, parser: lark.Lark, text: str,
                  filename: str) -> AdcError:
    if isinstance(e, UnexpectedCharacters):
        ch = e.char
        if ch == '"':
            msg = "unterminated string (strings end on the same line)"
        elif ch.isprintable() and not ch.isspace():
            msg = f"unexpected character '{ch}'"
        else:
            msg = f"unexpected character {ascii(ch)}"
        return AdcError(msg, Loc(filename, e.line, e.column))
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = _acceptable(e)
        if tok.type == "$END":
            loc = _end_loc(parser, text, filename)
            closers = expected & {"RBRACE", "RPAR", "RSQB"}
            expected = closers or expected  # what is missing, rather than what may follow
        else:
            loc = Loc(filename, tok.line, tok.column)
        if tok.type in _COMPARISONS and "PLUS" in expected:
            return AdcError("comparisons cannot be chained; add parentheses", loc)
        msg = f"unexpected {_describe_token(tok)}"
        want = _describe_expected(expected, _terminal_text(parser))
        if want:
            msg += f"; expected {want}"
        return AdcError(msg, loc)
    return AdcError(f"syntax error: {e}", Loc(filename, getattr(e, "line", 1) or 1,
                                             getattr(e, "column", 1) or 1))

