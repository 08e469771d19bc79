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
