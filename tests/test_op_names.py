"""One op, one place: the generic passes, the memory model and the CUDA emitter spell no op
name; they ask the registry for traits and rule slots (`adcompiler.ops.registry`). An op
name may appear only in its own definition (and in tests and docs)."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from adcompiler.ops import registry

PKG = Path(__file__).resolve().parent.parent / "adcompiler"
TRAIT_DRIVEN = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if p.parent.name != "ops")


COMPARES_NAME = re.compile(r"\bname\b\s*(==|!=|\bin\b|\bnot in\b)|(==|!=)\s*[\w.]*\bname\b")


def op_name_literals(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every op name that `path` compares an op's name with (a string
    literal on a line such as ``if op.name == "for"`` or ``op.name in ("yield", ...)``)."""
    names = set(registry.REGISTRY) | set(registry.STRUCTURAL)
    lines = path.read_text().splitlines()
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type != tokenize.STRING:
            continue
        text = tok.string.lstrip("rbfuRBFU").strip("'\"")
        if text in names and COMPARES_NAME.search(lines[tok.start[0] - 1]):
            found.append((tok.start[0], text))
    return found


def op_name_tables(path: Path) -> list[int]:
    """Lines of every set, tuple or list literal of two or more op names in `path`: a
    table of ops kept apart from their definitions (``CHEAP = {"index", "reshape"}``),
    whatever line later compares a name with it."""
    names = set(registry.REGISTRY) | set(registry.STRUCTURAL)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)) and len(node.elts) >= 2 and all(
                isinstance(e, ast.Constant) and e.value in names for e in node.elts):
            found.append(node.lineno)
    return found


@pytest.mark.parametrize("module", TRAIT_DRIVEN)
def test_module_names_no_op(module):
    assert op_name_literals(PKG / module) == []
    assert op_name_tables(PKG / module) == []


def test_the_check_finds_a_table_of_names(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('CHEAP = {"index", "reshape"}\nx = ("index", "not an op")\n'
                 'if d.name in CHEAP:\n    b.emit("add", x, y)\n')
    assert op_name_tables(p) == [1]


def test_the_check_finds_a_name(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""doc: op.name == "for"."""\nif op.name == "for" or "call" != op.name:\n'
                 '    b.emit("add", x, y)\nif op.name in ("yield", "return"):\n    pass\n')
    assert op_name_literals(p) == [(2, "for"), (2, "call"), (4, "yield"), (4, "return")]


def test_structural_ops_are_registered_with_traits():
    for name, trait in (("for", "loop"), ("call", "calls"), ("yield", "terminator"),
                        ("return", "terminator"), ("fused", "group"), ("repeat", "counted")):
        assert registry.lookup(name).has(trait)
        assert name not in registry.REGISTRY  # not callable from TDSL, no kernel


def test_structural_op_names_are_spelled_only_in_their_definitions():
    """``for``, ``call``, ``yield``, ``return`` and ``fused`` are written as strings only in
    `adcompiler.ops.control` (the constants there); the frontend's keyword list is the
    language's, not the ops'."""
    names = set(registry.STRUCTURAL)
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(PKG))
        if rel == "ops/control.py" or rel.startswith("frontend/"):
            continue
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.STRING and tok.string.strip("'\"") in names:
                found.append((rel, tok.start[0], tok.string))
    assert found == []


CONTROL_CONSTANTS = {"FOR", "CALL", "YIELD", "RETURN", "FUSED", "REPEAT"}


def compares_control_constant(source: str) -> list[int]:
    """Lines where `source` compares something with a structural op's name constant
    (``op.name == YIELD``, ``term.name != control.RETURN``, ``x in (FOR, CALL)``)."""
    def is_constant(node) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(is_constant(e) for e in node.elts)
        return (isinstance(node, ast.Name) and node.id in CONTROL_CONSTANTS) or \
            (isinstance(node, ast.Attribute) and node.attr in CONTROL_CONSTANTS)
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Compare)
            and any(is_constant(x) for x in [node.left] + node.comparators)]


@pytest.mark.parametrize("module", sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                                          if str(p.relative_to(PKG)) != "ops/control.py"))
def test_no_module_compares_a_structural_name_constant(module):
    """Generic code asks a structural op's traits and rule slots (`registry.ends`,
    `OpDef.verify`, ...), never compares with its name: the constants only build ops."""
    assert compares_control_constant((PKG / module).read_text()) == []


def test_the_constant_check_finds_a_comparison():
    src = ("from adcompiler.ops import control\nfrom adcompiler.ops.control import YIELD\n"
           "b.insert(Op(YIELD, [], []))\nif op.name == YIELD:\n    pass\n"
           "ok = term.name != control.RETURN\nif op.name in (FOR, CALL):\n    pass\n")
    assert compares_control_constant(src) == [4, 6, 7]


def test_structural_ops_have_their_rule_slots():
    """Each structural op carries its verifier rule; terminators say which block they end,
    and exactly one op ends each kind of block."""
    for name, d in registry.STRUCTURAL.items():
        assert callable(d.verify), name
        assert (d.ends is not None) == d.has("terminator"), name
    assert registry.terminator("function") == "return"
    assert registry.terminator("region") == "yield"
    for name in ("for", "repeat", "call"):  # they count and hold values through a rule
        d = registry.lookup(name)
        assert callable(d.flops) and callable(d.memory), name
    assert callable(registry.lookup("for").dce)
    for name in ("for", "call"):  # differentiated by a rule of their own, not by the registry's VJP
        d = registry.lookup(name)
        assert callable(d.reverse) and callable(d.forward), name
    assert callable(registry.lookup("for").batch)
