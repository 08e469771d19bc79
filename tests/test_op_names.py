"""One op, one place: the generic passes, the memory model and the CUDA emitter spell no op
name; they ask the registry for traits and rule slots (`adcompiler.ops.registry`). An op
name may appear only in its own definition (and in tests and docs)."""
from __future__ import annotations

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


@pytest.mark.parametrize("module", TRAIT_DRIVEN)
def test_module_names_no_op(module):
    assert op_name_literals(PKG / module) == []


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
