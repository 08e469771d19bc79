"""Conformance of `adc run` with the TDSL spec on programs written from the spec alone:
values, gradients (f64 tight, f32 loose), JVPs and HVPs against PyTorch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conformance_cases import CASES  # noqa: E402
from conformance_harness import check_case  # noqa: E402

PARAMS = [pytest.param(c, m, id=f"{c.prog}{'-' + c.extra[1] if c.extra[:1] == ['--fn'] else ''}-{m}")
          for c in CASES for m in c.modes]


@pytest.mark.parametrize("case,mode", PARAMS)
def test_program(case, mode, tmp_path):
    if case.subprocess_ and mode != "reverse":
        case = type(case)(**{**case.__dict__, "subprocess_": False})
    check_case(case, mode, tmp_path)


def test_large_magnitude_stays_finite_in_f32_all_modes(tmp_path):
    """§5: the sensitive ops stay finite at magnitude 1e4 in f32, derivatives included
    (PyTorch's own double backward is not finite here, so hvp is checked for finiteness)."""
    import numpy as np
    from conformance_harness import PROGRAMS, adc_out
    rng = np.random.default_rng(3)
    data = {"z": (rng.standard_normal((2, 3)) * 1e4).astype(np.float32),
            "y": np.array([1, 2]), "t": rng.uniform(0, 1, (2, 3)).astype(np.float32)}
    prog = PROGRAMS / "large_magnitude.tdsl"
    for mode in ("reverse", "jvp", "hvp"):
        got = adc_out(tmp_path, prog, mode, data)
        for k, v in got.items():
            assert v.dtype == np.float32 and np.isfinite(v).all(), (mode, k, v)


def test_param_integer_and_bool_inputs_are_never_differentiated(tmp_path):
    import numpy as np
    from conformance_harness import adc_out
    prog = tmp_path / "p.tdsl"
    prog.write_text("def f(param x: f32[3], param k: i64[3], param m: bool[3]) -> f32 {\n"
                    "    return sum(where(m, x * k, x))\n}\n")
    data = {"x": np.ones(3, np.float32), "k": np.array([1, 2, 3]),
            "m": np.array([True, False, True])}
    got = adc_out(tmp_path, prog, "reverse", data)
    assert sorted(got) == ["grad_x", "out"]
    np.testing.assert_array_equal(got["grad_x"], [1, 1, 3])
    assert got["out"] == 5
