"""The same programs written in TDSL and in Python compile to the same IR (printed without
locations, which name different files), and the Python IR is located in the Python file."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.frontend.python import compile_python

sys.path.insert(0, str(Path(__file__).parent))
import pyfront_twins as twins  # noqa: E402

LOC = re.compile(r' loc\("[^"]*":\d+:\d+\)')


def unlocated(module) -> str:
    return LOC.sub("", adc.print_module(module))


@pytest.mark.parametrize("name", sorted(twins.TDSL))
def test_tdsl_and_python_give_the_same_ir(name):
    text, (f, shapes) = twins.TDSL[name]
    tdsl = adc.compile_source(text, f"{name}.tdsl")
    module, spec, _ = compile_python(f, tuple(np.zeros(s) for s in shapes))
    assert unlocated(module) == unlocated(tdsl)
    assert spec.name == name


def test_python_ir_is_located_in_the_python_file():
    module, _, _ = compile_python(twins.mlp, tuple(np.zeros(s) for s in
                                                   [(5, 3), (3, 4), (4,), (4, 2)]))
    text = adc.print_module(module)
    lines = Path(twins.__file__).read_text().splitlines()
    row = next(i for i, ln in enumerate(lines) if "h = np.tanh(x @ W1 + b1)" in ln) + 1
    col = lines[row - 1].index("@") + 1
    assert f'matmul(%x, %W1) : f64[5, 4] loc("{twins.__file__}":{row}:{col})' in text
