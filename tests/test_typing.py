"""Type checkers follow an installed adcompiler: both packages carry the PEP 561 marker, and
an editable install made with ``--config-settings editable_mode=strict`` (the README's
advice; the default editable install is an import hook they cannot see) resolves
``adcompiler`` and ``adc_runtime`` (the ``runtime/`` folder) for mypy."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COPY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "build", "dist", "*.egg-info",
                                     ".hypothesis", ".pytest_cache", ".venv", "*.pyc", "tests")


def test_both_packages_carry_the_typing_marker():
    assert (ROOT / "adcompiler" / "py.typed").exists() and (ROOT / "runtime" / "py.typed").exists()
    assert "strict" in (ROOT / "README.md").read_text(encoding="utf-8").split("## The language")[0]


@pytest.mark.slow
def test_a_strict_editable_install_resolves_for_mypy(tmp_path):
    pytest.importorskip("mypy")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=COPY_IGNORE, symlinks=True)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True,
                   timeout=300)
    python = tmp_path / "venv" / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(src),
                           "--config-settings", "editable_mode=strict"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = [sys.executable, "-m", "mypy", "--python-executable", str(python),
             "--no-incremental", "--follow-imports=silent", "-c",
             "import adc_runtime\nimport adc_runtime.datafiles\nimport adcompiler\n"]
    proc = subprocess.run(check, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0 and "import-not-found" not in proc.stdout, proc.stdout
    # what the default editable install gives a type checker: nothing it can follow
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(src)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = subprocess.run(check, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert "import-not-found" in proc.stdout, proc.stdout


USER_CODE = '''\
import numpy as np
import adcompiler as adc

g = adc.grad("model.tdsl", wrt=("W",))
module = adc.compile_source("def f(x: f32) -> f32 { return x * x }")
text: str = adc.print_module(adc.run_pipeline(module, "inline,cse"))
step = adc.train_step("model.tdsl", adc.optim.adam(1e-3))
op = adc.get_op("matmul")
error: type[Exception] = adc.AdcError
x: np.ndarray = np.zeros(3)
'''


def test_the_public_names_type_check_strictly(tmp_path):
    """User code that calls the public API passes ``mypy --strict``: every public name is
    explicitly exported (the package's own modules are analysed, their errors not shown,
    as for an installed package)."""
    pytest.importorskip("mypy")
    stubs = tmp_path / "path"
    stubs.mkdir()
    (stubs / "adcompiler").symlink_to(ROOT / "adcompiler")
    (stubs / "adc_runtime").symlink_to(ROOT / "runtime")
    user = tmp_path / "user.py"
    user.write_text(USER_CODE)
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                          "--cache-dir", str(tmp_path / "cache"), str(user)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={"MYPYPATH": str(stubs), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr
