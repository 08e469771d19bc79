"""Imported parameters grouped by module path (`importer.groups`): the paths kept, parts
made identifiers, and names that cannot be leaves of the tree left as plain inputs."""
from __future__ import annotations

import numpy as np

from adcompiler.frontend.importer.writer import ProgramWriter
from adcompiler.frontend.tdsl import compile_source


def _writer(names):
    w = ProgramWriter("m.onnx")
    x = w.add_input("x", "f32", (3,))
    vals = [w.add_param(n, np.full(3, k, np.float32)) for k, n in enumerate(names)]
    out = w.assign(["y"], " + ".join([x.name] + [v.name for v in vals]), "sum")[0]
    w.set_results([(out, "y")])
    return w, vals


def test_paths_become_groups_with_identifier_parts():
    names = ["seq.0.w", "seq.10.w", "blk.in.w", "blk.a-b.w", "blk.a_b.w", "top.w"]
    w, vals = _writer(names)
    assert [v.name for v in vals] == ["seq._0.w", "seq._10.w", "blk.in_.w", "blk.a_b.w",
                                      "blk.a_b_2.w", "top.w"]
    src = w.source()
    assert "group Seq {\n    _0: Seq_0\n    _10: Seq_10\n}" in src
    assert "group Blk {\n    in_: Blk_In\n    a_b: Blk_A_b\n    a_b_2: Blk_A_b_2\n}" in src
    module = compile_source(src, "m.tdsl")
    assert module["model"].arg_names == ["x"] + [v.name for v in vals]


def test_names_that_cannot_be_leaves_stay_plain_inputs():
    # a leaf and a module at one path, an empty part, no dot, a repeated name
    w, vals = _writer(["a.b", "a.b.c", "x..y", "plain", "a.b"])
    assert [v.name for v in vals] == ["a.b", "a_b_c", "x_y", "plain", "a_b"]
    assert {p.name: p.source for p in w.params}["a_b_c"] == "a.b.c"
    compile_source(w.source(), "m.tdsl")


def test_constants_are_never_grouped():
    w = ProgramWriter("m.onnx")
    v = w.add_param("bn.running_mean", np.zeros(3, np.float32), trainable=False)
    assert v.name == "bn_running_mean" and w.tree.tops == {}


def test_a_name_with_a_newline_stays_in_its_comment():
    w, vals = _writer(["m.x\ndef evil() -> f32 { return 1.0 }\n.w"])
    src = w.source()
    assert "\ndef evil" not in src and "# m.x\\ndef evil" in src
    module = compile_source(src, "m.tdsl")
    assert list(module.functions) == ["model"]
