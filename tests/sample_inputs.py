"""The inputs of a sample's main function, for the tests that run every sample: its `.json`
file where it has one, else the seeded random inputs `adc run` draws without --inputs (each
unbound dim at its default size), so that a sample sized for training needs no file."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from adcompiler.files.inputs import DimBinder, random_inputs
from adcompiler.ir.core import Function


def sample_inputs(path: Path, fn: Function) -> dict:
    """{input name: array} for `fn`, the main function of the sample at `path`."""
    data = path.with_suffix(".json")
    if data.exists():
        values = json.loads(data.read_text())
        return {a.name: np.asarray(values[a.name]) for a in fn.args if a.name in values}
    return random_inputs(fn, DimBinder(), seed=0)[0]
