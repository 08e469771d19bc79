"""The source of a Python function: its syntax tree, with positions in the user's own file.

`function_source(f)` parses the text `inspect.getsource` finds (dedented, so that a method or
a nested function parses on its own) and remembers the file, the first line and the
indentation, so that every position it reports is the line and column in that file. A
lambda is found in the parsed file at the line its code object starts on.

Errors about the function are `PythonError`s: an `AdcError` whose text is the located
``FILE:LINE:COL: error: MESSAGE``, the source line and a caret.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass

from ...diagnostics import AdcError, Loc, render
from ..tdsl.ast import Span


class PythonError(AdcError):
    """An error in a Python function given to adc, located in the function's file."""

    def __str__(self) -> str:
        if self.loc is None:
            return self.message
        return render(self, "".join(linecache.getlines(self.loc.file)) or None)


@dataclass
class FunctionSource:
    """A function's syntax tree (`node`: ``ast.FunctionDef`` or ``ast.Lambda``) and where
    its text lies: `file`, and the offsets that turn the tree's positions into the file's."""

    node: ast.AST
    file: str
    lines: list[str]        # the file's lines (as the tree's positions count them)
    line0: int              # add to a tree line to get the file line
    indent: int             # add to a tree column (the dedented text's) to get the file's

    def span(self, node: ast.AST) -> Span:
        """The file span of `node` (lines and columns from 1, end exclusive)."""
        line = node.lineno + self.line0
        end = (node.end_lineno or node.lineno) + self.line0
        return Span(line, self.col(line, node.col_offset),
                    end, self.col(end, node.end_col_offset or node.col_offset))

    def col(self, file_line: int, byte_offset: int) -> int:
        """The 1-based character column of a tree column (a UTF-8 byte offset into the
        dedented line) on `file_line`."""
        text = self.lines[file_line - 1] if 0 < file_line <= len(self.lines) else ""
        body = text[self.indent:]
        if body.isascii():
            return byte_offset + self.indent + 1
        return len(body.encode("utf-8")[:byte_offset].decode("utf-8", "replace")) \
            + self.indent + 1

    def loc(self, node_or_span) -> Loc:
        s = node_or_span if isinstance(node_or_span, Span) else self.span(node_or_span)
        return Loc(self.file, s.line, s.col)

    def error(self, message: str, where) -> PythonError:
        return PythonError(message, self.loc(where))

    def after(self, span: Span, token: str) -> Span:
        """The span of the first `token` at or after the end of `span`, skipping blanks,
        closing parentheses, line continuations and comments (where an operator sits
        between its operands, which the tree does not record)."""
        line, col = span.end_line, span.end_col
        while 0 < line <= len(self.lines):
            text = self.lines[line - 1]
            i = col - 1
            while i < len(text):
                if text.startswith(token, i):
                    return Span(line, i + 1, line, i + 1 + len(token))
                if text[i] == "#":
                    break
                if text[i] not in " \t)\\\f":
                    return span
                i += 1
            line, col = line + 1, 1
        return span


_FILES: dict[tuple, ast.Module] = {}


def function_source(f) -> FunctionSource:
    """The parsed source of Python function `f`; a function without source text (typed at
    an interactive prompt, made by ``exec``, a builtin) is an `AdcError` that says so."""
    code = getattr(f, "__code__", None)
    name = getattr(f, "__qualname__", None) or repr(f)
    if code is None:
        raise AdcError(f"{name} is not a Python function written in a file (adc compiles "
                       "a function from its source text)")
    file = code.co_filename
    lines = [ln.rstrip("\r\n") for ln in linecache.getlines(file, getattr(f, "__globals__", None))]
    if not lines or code.co_firstlineno > len(lines):
        raise AdcError(f"the source of '{name}' is not available (defined at {file}, e.g. "
                       "at an interactive prompt or through exec): adc compiles a function "
                       "from its source text, so define it in a .py file")
    if f.__name__ == "<lambda>":
        return _lambda_source(f, code, file, lines)
    try:
        text, first = inspect.getsourcelines(f)
    except (OSError, TypeError) as e:
        raise AdcError(f"the source of '{name}' is not available ({e}): adc compiles a "
                       "function from its source text, so define it in a .py file") from None
    block = "".join(text)
    dedented = textwrap.dedent(block)
    indent = len(text[0]) - len(text[0].lstrip()) if dedented != block else 0
    try:
        tree = ast.parse(dedented, file)
    except SyntaxError as e:
        raise AdcError(f"the source of '{name}' does not parse on its own ({e.msg})",
                       Loc(file, first, 1)) from None
    node = tree.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise AdcError(f"the source of '{name}' is not a 'def'", Loc(file, first, 1))
    if isinstance(node, ast.AsyncFunctionDef):
        raise PythonError(f"'{name}' is an async function; adc compiles plain functions",
                          Loc(file, first + node.lineno - 1, 1))
    return FunctionSource(node, file, lines, first - 1, indent)


def _lambda_source(f, code, file: str, lines: list[str]) -> FunctionSource:
    key = (file, len(lines), hash(tuple(lines)))
    tree = _FILES.get(key)
    if tree is None:
        try:
            tree = _FILES[key] = ast.parse("\n".join(lines), file)
        except SyntaxError as e:
            raise AdcError(f"{file} does not parse ({e.msg})") from None
    names = [a for a in code.co_varnames[:code.co_argcount]]
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)
             and n.lineno == code.co_firstlineno and [a.arg for a in n.args.args] == names]
    if len(found) != 1:
        raise AdcError(f"cannot tell which lambda of {file}:{code.co_firstlineno} this is "
                       f"({len(found)} match); define it with 'def'")
    return FunctionSource(found[0], file, lines, 0, 0)
