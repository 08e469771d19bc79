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


def pytest_collection_modifyitems(config, items):
    """``slow`` tests (long sweeps) run only when ``-m`` names them (``-m slow``)."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
