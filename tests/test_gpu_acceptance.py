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
    py, stem = f"{venv}/bin/python", tmp_path / "gpu"
    bench = f"{py} benchmarks/bench_gpu.py"
    assert steps == [
        "nvidia-smi -L",
        f"python3.11 -m venv {venv}",
        f"{py} -m pip install -q --upgrade pip",
        f"{py} -m pip install -q -e .[test,cuda]",
        steps[4],
        f"timeout 90 {py} -m pytest -m cuda -q -rs | tee {stem}-pytest.log",
        f"timeout 125 {bench} --out {out} --steps 5 --repeats 3",
        f"timeout 35 {bench} --graphs --runners adc --out {stem}-graphs.md --steps 5 --repeats 3",
        f"timeout 95 {bench} --models gpt,cnn --out {stem}-models.md --steps 5 --repeats 3",
        f"timeout 30 {bench} --models gpt --runners adc --attention library --out "
        f"{stem}-attention.md --steps 5 --repeats 3",
        f"timeout 35 {bench} --dtype bf16 --models transformer_block,gpt --out {stem}-bf16.md "
        "--steps 5 --repeats 3",
        f"timeout 65 {py} benchmarks/memory_budget_sweep.py --out {stem}-memory-budget.md",
        f"timeout 60 {py} benchmarks/bench_train.py --gpu --size full --models "
        f"mlp,transformer_block,gpt --runners adc,torch,jax --out {stem}-train.md "
        "--steps 5 --repeats 3"]
    assert "getDeviceCount()" in steps[4]
    assert not venv.exists() and not out.exists()
    # the measuring steps' limits add up to under nine minutes
    assert sum(int(s.split()[1]) for s in steps if s.startswith("timeout ")) < 9 * 60


def _fakes(tmp_path, fail_on=""):
    """A bin folder with an nvidia-smi that lists a GPU and a python that logs its
    arguments (and fails when they contain `fail_on`)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: a stand-in (UUID: x)'\n")
    log = tmp_path / "calls.log"
    (fake / "py").write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n"
                             + (f"case \"$*\" in *'{fail_on}'*) exit 3;; esac\n" if fail_on else "")
                             + "exit 0\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    return fake, log


def test_no_install_runs_every_step_with_the_given_python(tmp_path):
    fake, log = _fakes(tmp_path)
    out = tmp_path / "gpu.md"
    r = run("--no-install", "--python", str(fake / "py"), "--out", str(out), path=fake)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["-c", "-m", *["benchmarks/bench_gpu.py"] * 5,
                                             "benchmarks/memory_budget_sweep.py",
                                             "benchmarks/bench_train.py"]
    assert "status 0" in r.stdout and not (tmp_path / "env").exists()


def test_a_failing_step_is_reported_and_the_others_run(tmp_path):
    fake, log = _fakes(tmp_path, fail_on="--dtype bf16")
    r = run("--no-install", "--python", str(fake / "py"), "--out", str(tmp_path / "g.md"),
            path=fake)
    assert r.returncode == 1
    assert "gpu_acceptance: the bf16 benchmark failed (exit 3)" in r.stderr
    assert log.read_text().splitlines()[-1].startswith("benchmarks/bench_train.py")


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
