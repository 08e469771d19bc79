"""README's test command must pass on a fresh machine with only the ``[test]`` extra: no
test module may import an optional package (PyTorch, JAX, CuPy, mpi4py) at collection
without skipping when it is missing."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = ("torch", "jax", "jaxlib", "optax", "cupy", "cupyx", "mpi4py")
COLLECT = f"""
import sys
for name in {OPTIONAL!r}:
    sys.modules[name] = None  # import fails as if it were not installed
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"]))
"""


def test_the_suite_collects_without_the_optional_packages():
    proc = subprocess.run([sys.executable, "-c", COLLECT], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "error" not in proc.stdout.splitlines()[-1], proc.stdout[-3000:]
