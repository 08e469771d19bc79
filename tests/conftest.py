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


@pytest.fixture(autouse=True)
def op_tables_left_as_found():
    """Each test leaves the op registry and the runtime's kernel tables as it found them (an
    op a test registers, it unregisters): a leak fails the test that leaks, not a later one
    that happens to run after it."""
    from adc_runtime.kernels import KERNELS, OUT_KERNELS, PLUGIN_OPS
    from adcompiler.ops import registry
    tables = {"op registry": registry.REGISTRY, "KERNELS": KERNELS,
              "OUT_KERNELS": OUT_KERNELS, "PLUGIN_OPS": PLUGIN_OPS}
    before = {name: set(t) for name, t in tables.items()}
    yield
    for name, table in tables.items():
        added = sorted(set(table) - set(before[name]))
        removed = sorted(set(before[name]) - set(table))
        assert not added and not removed, f"{name}: the test left {added} registered " \
                                          f"and {removed} unregistered"
