"""Parsing IR text (``grammar/ir.lark``) back into a `Module`; the inverse of `printer`.

Ops are built generically from what is written (name, operands, attributes, result types):
type rules are not re-run, so unknown op names and ill-typed ops parse, and the verifier
judges them. Syntax errors, undefined values and redefinitions are `AdcError`s located in
the IR text.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput

from ..diagnostics import AdcError, Loc, normalize_newlines
from .core import Block, Function, Module, Op, Value
from .gcpause import collector_paused
from .types import TensorType, parse_dim

# Friendly names for the grammar's terminals in "expected ..." messages.
_TERMINALS = {
    "VALUE": "a value (%name)", "FUNC_NAME": "a function name (@name)", "DTYPE": "a type",
    "OP_NAME": "an op name", "NAME": "a name", "DIM": "a dimension", "STRING": "a string",
    "INT": "an integer", "FLOAT": "a float", "$END": "end of input",
}


_EOF = "unexpected end of input"


@lru_cache(maxsize=1)
def _lark() -> Lark:
    text = resources.files("adcompiler.grammar").joinpath("ir.lark").read_text()
    return Lark(text, parser="lalr", maybe_placeholders=True)


def parse_module(text: str, filename: str = "<ir>") -> Module:
    """Parse IR text; errors carry a `Loc` into `filename` (the IR file)."""
    with collector_paused():
        return _parse_module(text, filename)


def _parse_module(text: str, filename: str) -> Module:
    text = normalize_newlines(text)  # lines as the error renderer counts them
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as e:
        message = _syntax_message(e, text)
        if message == _EOF:  # lark points at the last token; the end of the text is clearer
            lines = text.split("\n")
            raise AdcError(message, Loc(filename, len(lines), len(lines[-1]) + 1)) from None
        raise AdcError(message, Loc(filename, e.line, e.column)) from None
    return _Reader(filename).module(tree)


def parse_function(text: str, filename: str = "<ir>") -> Function:
    """Parse text holding exactly one function."""
    m = parse_module(text, filename)
    if len(m.functions) != 1:
        raise AdcError(f"expected one function, found {len(m.functions)}", Loc(filename, 1, 1))
    return next(iter(m.functions.values()))


def _syntax_message(e: UnexpectedInput, text: str) -> str:
    if isinstance(e, UnexpectedCharacters):
        return f"unexpected character {text[e.pos_in_stream]!r}"
    if isinstance(e, UnexpectedEOF) or e.token.type == "$END":
        return _EOF
    msg = f"unexpected {e.token.value!r}"
    expected = sorted({_describe(t) for t in e.expected})
    if expected and len(expected) <= 6:
        msg += "; expected " + " or ".join(expected)
    return msg


def _describe(terminal: str) -> str:
    """A terminal as a user reads it: its literal text, or what it stands for."""
    if terminal in _TERMINALS:
        return _TERMINALS[terminal]
    pattern = _lark().get_terminal(terminal).pattern
    return repr(pattern.value) if pattern.type == "str" else terminal.lower()


def _type(tree: Tree, filename: str) -> TensorType:
    dtype, *dims = tree.children
    shape = []
    for d in dims:
        if d is None:
            continue
        try:
            shape.append(parse_dim(d.value))
        except ValueError:
            raise AdcError(f"malformed dimension {d.value!r}",
                           Loc(filename, d.line, d.column)) from None
    return TensorType(dtype.value, tuple(shape))


class _Reader:
    """Builds the module from the parse tree, resolving value names through nested scopes."""

    def __init__(self, filename: str):
        self.filename = filename
        self.scopes: list[dict[str, Value]] = []

    def hint(self, token: Token) -> str | None:
        """The name hint of a value token: ``%x.2`` -> "x", ``%"a b"`` -> "a b", ``%3`` -> None."""
        body = token.value[1:]
        if body.isdigit():
            return None
        if body.startswith('"'):
            return self.string(token, body[:body.rindex('"') + 1])
        return body.split(".", 1)[0]

    def loc_of(self, token: Token) -> Loc:
        return Loc(self.filename, token.line, token.column)

    def error(self, message: str, token: Token) -> AdcError:
        return AdcError(message, self.loc_of(token))

    # -- scopes ------------------------------------------------------------------------
    def define(self, token: Token, type: TensorType, make) -> Value:
        for scope in self.scopes:
            if token.value in scope:
                raise self.error(f"value {token.value} is already defined", token)
        v = make(type, self.hint(token))
        self.scopes[-1][token.value] = v
        return v

    def lookup(self, token: Token) -> Value:
        for scope in reversed(self.scopes):
            if token.value in scope:
                return scope[token.value]
        raise self.error(f"use of undefined value {token.value}", token)

    # -- structure ---------------------------------------------------------------------
    def module(self, tree: Tree) -> Module:
        m = Module()
        for ftree in tree.children:
            name_tok = ftree.children[0]
            f = self.function(ftree)
            if f.name in m:
                raise self.error(f"function @{f.name} is already defined", name_tok)
            m.add(f)
        return m

    def function(self, tree: Tree) -> Function:
        name_tok = tree.children[0]
        raw = name_tok.value[1:]
        name = self.string(name_tok, raw) if raw.startswith('"') else raw
        args = [c for c in tree.children if isinstance(c, Tree) and c.data == "func_arg"]
        types = [_type(c, self.filename) for c in tree.children
                 if isinstance(c, Tree) and c.data == "type"]
        attrs_tree = _child(tree, "func_attrs")
        loc_tree = _child(tree, "loc")
        body = Block()
        params = set()
        self.scopes = [{}]
        for a in args:
            tok, ty = a.children[:2]
            v = self.define(tok, _type(ty, self.filename), lambda t, h: body.add_arg(t, h))
            if len(a.children) == 3:
                if v.name is None:
                    raise self.error("a {param} input needs a name", tok)
                params.add(v.name)
        self.ops(body, [c for c in tree.children if isinstance(c, Tree) and c.data == "op"])
        attrs = self.attr_dict(attrs_tree.children[0]) if attrs_tree is not None else {}
        self.scopes = []
        return Function(name, body, types, params, attrs, self.loc(loc_tree))

    def ops(self, block: Block, trees: list[Tree]) -> None:
        for t in trees:
            block.append(self.op(t))

    def op(self, tree: Tree) -> Op:
        results_tree, name_tok, *rest = tree.children
        operands = [self.lookup(c) for c in rest if isinstance(c, Token) and c.type == "VALUE"]
        attrs_tree = _child(tree, "attr_dict")
        attrs = self.attr_dict(attrs_tree) if attrs_tree is not None else {}
        types = [_type(c, self.filename) for c in rest if isinstance(c, Tree) and c.data == "type"]
        result_toks = results_tree.children if results_tree is not None else []
        if len(result_toks) != len(types):
            raise self.error(f"'{name_tok.value}' defines {len(result_toks)} values but lists "
                             f"{len(types)} result types", name_tok)
        regions = [self.region(c) for c in rest if isinstance(c, Tree) and c.data == "region"]
        op = Op(name_tok.value, operands, types, attrs, regions,
                self.loc(_child(tree, "loc")), [self.hint(t) for t in result_toks])
        for tok, v in zip(result_toks, op.results):
            self.define(tok, v.type, lambda t, h, v=v: v)
        return op

    def region(self, tree: Tree) -> Block:
        block = Block()
        self.scopes.append({})
        for c in tree.children:
            if isinstance(c, Tree) and c.data == "block_arg":
                tok, ty = c.children
                self.define(tok, _type(ty, self.filename), lambda t, h: block.add_arg(t, h))
        self.ops(block, [c for c in tree.children if isinstance(c, Tree) and c.data == "op"])
        self.scopes.pop()
        return block

    def loc(self, tree: Tree | None) -> Loc | None:
        if tree is None:
            return None
        file, line, col = tree.children
        return Loc(self.string(file), self.integer(line), self.integer(col))

    def integer(self, token: Token) -> int:
        if len(token.value.lstrip("-")) > MAX_INT_DIGITS:
            raise self.error(f"integer with {len(token.value)} digits is too large", token)
        return int(token.value)

    # -- attributes --------------------------------------------------------------------
    def attr_dict(self, tree: Tree) -> dict:
        out = {}
        for a in tree.children:
            if a is None:
                continue
            key_tok, value = a.children
            key = self.string(key_tok) if key_tok.type == "STRING" else key_tok.value
            if key in out:
                raise self.error(f"attribute '{key}' is given twice", key_tok)
            out[key] = self.value(value, key_tok)
        return out

    def value(self, v: Tree, key: Token, depth: int = 0):
        if depth > MAX_ATTR_DEPTH:
            raise self.error(f"attribute '{key.value}' is nested more than {MAX_ATTR_DEPTH} "
                             "levels deep", key)
        items = [c for c in v.children if c is not None]
        kind = v.data
        if kind in _SCALARS:
            return _SCALARS[kind]
        if kind == "int":
            return self.integer(items[0])
        if kind == "float":
            return float(items[0])
        if kind == "string":
            return self.string(items[0])
        if kind == "list":
            return [self.value(c, key, depth + 1) for c in items]
        if kind == "tuple":
            return tuple(self.value(c, key, depth + 1) for c in items)
        assert kind == "dict", kind
        return {self.string(e.children[0]): self.value(e.children[1], key, depth + 1)
                for e in items}

    def string(self, token: Token, text: str | None = None) -> str:
        """The value of a quoted string (JSON escapes); `text` if only part of `token`."""
        try:
            return json.loads(token.value if text is None else text)
        except ValueError:
            raise self.error(f"bad string {token.value}", token) from None


_SCALARS = {"true": True, "false": False, "none": None}
MAX_INT_DIGITS = 400   # as the TDSL frontend: more is a typo or an attack, not a size
MAX_ATTR_DEPTH = 64    # attribute values are shapes and index lists, a few levels deep


def _child(tree: Tree, data: str) -> Tree | None:
    return next((c for c in tree.children if isinstance(c, Tree) and c.data == data), None)


def module_from_text(text: str) -> Module:
    """A pickled module back from its IR text (see `adcompiler.ir`'s pickle registration)."""
    return parse_module(text, "<pickle>")
