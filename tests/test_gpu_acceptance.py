"""benchmarks/gpu_acceptance.sh on the CPU: its syntax, its command line, the steps its
--dry-run prints, and its clear failure where no GPU is visible (nothing installed then)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_acceptance.sh"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def run(*args, path=None):
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_syntax():
    assert subprocess.run([BASH, "-n", str(SCRIPT)]).returncode == 0


def test_dry_run_prints_every_step_in_order(tmp_path):
    venv, out = tmp_path / "env", tmp_path / "gpu.md"
    r = run("--dry-run", "--venv", str(venv), "--out", str(out), "--python", "python3.11",
            "--bench-args", "--steps 5 --repeats 3")
    assert r.returncode == 0, r.stderr
    steps = [line[2:] for line in r.stdout.splitlines() if line.startswith("+ ")]
    assert steps == [
        "nvidia-smi -L",
        f"python3.11 -m venv {venv}",
        f"{venv}/bin/python -m pip install -q --upgrade pip",
        f"{venv}/bin/python -m pip install -q -e .[test,cuda]",
        steps[4],
        f"{venv}/bin/python -m pytest -m cuda -q -rs | tee {tmp_path / 'gpu-pytest.log'}",
        f"{venv}/bin/python benchmarks/bench_gpu.py --out {out} --steps 5 --repeats 3",
        f"{venv}/bin/python benchmarks/bench_gpu.py --graphs --runners adc --out "
        f"{tmp_path / 'gpu-graphs.md'} --steps 5 --repeats 3"]
    assert "getDeviceCount()" in steps[4]
    assert not venv.exists() and not out.exists()


def test_command_line_errors_exit_2():
    r = run("--frobnicate")
    assert r.returncode == 2 and "unknown argument: --frobnicate" in r.stderr
    assert "usage:" in r.stderr
    r = run("--out")
    assert r.returncode == 2 and "--out needs a value" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage:")


def test_without_a_gpu_fails_before_installing(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate "
                   "with the NVIDIA driver.' >&2\nexit 9\n")
    smi.chmod(0o755)
    venv = tmp_path / "env"
    r = run("--venv", str(venv), path=fake)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("gpu_acceptance: no CUDA GPU")
    assert not venv.exists()
