"""Fusion on random programs (`test_property_programs`): the fused forward and adjoint
programs verify, round-trip through text and give bit-identical results on NumPy, groups
closed by reductions included (the test checks that some formed)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_property_programs import programs
from adcompiler.cli.compile import build_pipeline
from adcompiler.emit.cuda import reduction_of
from adcompiler.frontend import compile_source
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import verify
from adcompiler.passes.fuse import Fuse
from adcompiler.passes.pipeline import run_pipeline
from adc_runtime.executor import run_function


def _same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def test_fused_random_programs_equal_unfused():
    closers: list[str] = []
    check = settings(max_examples=40, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow])(
        given(programs(), st.integers(0, 2**31 - 1))(_check))
    check(closers)
    assert {"sum", "mean"} <= set(closers), closers


def _check(closers, program, data_seed):
    text, shapes = program
    m = compile_source(text, "<random>")
    wrt = list(shapes)
    m = run_pipeline(m, build_pipeline("reverse", "f", wrt, None))
    fused = Fuse()(m)
    verify(fused)
    closers += [reduction_of(op).name for fn in fused.functions.values() for op in fn.walk()
                if op.name == "fused" and reduction_of(op) is not None]
    printed = print_module(fused)
    assert print_module(parse_module(printed)) == printed
    rng = np.random.default_rng(data_seed)
    inputs = {name: 0.5 * rng.standard_normal(shape) for name, shape in shapes.items()}
    inputs["ids"] = np.array([0, -1, 0])
    for name in ("f", "f_grad"):
        with np.errstate(all="ignore"):
            want, _ = run_function(m, name, inputs)
            got, _ = run_function(fused, name, inputs)
        assert all(_same(a, b) for a, b in zip(got, want)), (name, text)
