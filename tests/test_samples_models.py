"""samples/digits_cnn.tdsl and samples/char_gpt.tdsl: each trains briefly here (its loss
falls; the GPT's --memory-budget step has predicted peak = measured peak); the README's
digits CNN command reaching 98.5% test accuracy is marked slow."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def _digits(tmp_path):
    pytest.importorskip("sklearn")
    subprocess.run([sys.executable, str(SAMPLES / "digits_data.py"), str(tmp_path)],
                   check=True, capture_output=True)
    return dict(np.load(tmp_path / "digits_train.npz")), dict(np.load(tmp_path /
                                                                      "digits_test.npz"))


def _zen(tmp_path):
    subprocess.run([sys.executable, str(SAMPLES / "zen_data.py"), str(tmp_path / "zen.npz")],
                   check=True, capture_output=True)
    return dict(np.load(tmp_path / "zen.npz"))


def test_digits_cnn_trains_and_evaluates_with_running_statistics(tmp_path):
    train, test = _digits(tmp_path)
    result = adc.train(str(SAMPLES / "digits_cnn.tdsl"), train, "adam:lr=1e-2", batch=64,
                       steps=12, val=test, metrics=("accuracy",))
    losses = [r["loss"] for r in result.history]
    assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3])
    for k in ("m.c1.bn.mean", "m.c1.bn.var", "m.c3.bn.mean", "m.c3.bn.var"):   # the steps
        assert k in result.state and not np.allclose(result.state[k], 1 if "var" in k else 0)
    assert int(result.state["step"]) == 12


def test_char_gpt_loss_falls(tmp_path):
    data = _zen(tmp_path)
    result = adc.train(str(SAMPLES / "char_gpt.tdsl"), data, "adam:lr=3e-3", batch=16,
                       steps=25, seed=1)
    losses = [r["loss"] for r in result.history]
    assert losses[0] > 3.0 and np.mean(losses[-5:]) < losses[0] - 0.5


def test_char_gpt_memory_budget_predicts_the_measured_peak(tmp_path):
    data = _zen(tmp_path)
    peaks = []
    adc.train(str(SAMPLES / "char_gpt.tdsl"), data, "adam:lr=3e-3", batch=16, steps=1,
              memory_budget=4 * 2 ** 20, report=lambda p, m, policy: peaks.append((p, m)))
    (predicted, measured), = peaks
    assert predicted == measured <= 4 * 2 ** 20


def _readme_command(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    line = next(ln for ln in text.splitlines() if f"adc train samples/{name}.tdsl" in ln
                and ln.startswith("python samples/"))
    return line


@pytest.mark.slow
def test_digits_cnn_readme_command_reaches_98_5_percent(tmp_path):
    pytest.importorskip("sklearn")
    cmd = _readme_command("digits_cnn").replace("samples/", f"{ROOT}/samples/")
    start = time.perf_counter()
    r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True)
    took = time.perf_counter() - start
    assert r.returncode == 0, r.stderr
    acc = float(re.findall(r"val_accuracy ([0-9.]+)", r.stdout + r.stderr)[-1])
    print(f"digits_cnn: test accuracy {acc:.4f} in {took:.1f} s")
    assert acc >= 0.985
