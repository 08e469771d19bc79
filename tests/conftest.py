"""Fixtures shared by the test files."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cupy():
    """The `cupy` module with a usable CUDA GPU; the test is skipped without one."""
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA GPU")
    except Exception as e:  # no driver
        pytest.skip(f"no usable CUDA GPU ({e})")
    return cp
