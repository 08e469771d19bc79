"""The training samples: the README's quick-start command trains samples/digits_mlp.tdsl on
scikit-learn's bundled digits past 97% test accuracy (skipped without scikit-learn), and the
character RNN's loss falls on the Zen of Python."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc

ROOT = Path(__file__).resolve().parent.parent


def quick_start() -> list[str]:
    """The README's first command line, less its ``pip install`` part."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start\n\n```sh\n(.*?)\n```", text, re.S).group(1)
    parts = block.splitlines()[0].split(" && ")
    assert parts[0].startswith("python -m pip install")
    return parts[1:]


def test_readme_command_trains_digits_past_97_percent(tmp_path):
    pytest.importorskip("sklearn")
    os.symlink(ROOT / "samples", tmp_path / "samples")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = ""
    for part in quick_start():
        argv = shlex.split(part)
        if argv[0] == "adc":
            argv = [sys.executable, "-m", "adcompiler", *argv[1:]]
        elif argv[0] == "python":
            argv[0] = sys.executable
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
    accuracy = float(re.search(r"val_accuracy (\S+)", out).group(1))
    assert accuracy >= 0.97, out


def test_char_rnn_loss_falls(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "samples" / "zen_data.py"),
                           str(tmp_path / "zen.npz")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "zen.npz") as z:
        data = {k: z[k] for k in z.files}
    assert data["xs"].shape == (206, 32) and np.array_equal(data["xs"][:, 1:],
                                                           data["ys"][:, :-1])
    result = adc.train(str(ROOT / "samples" / "char_rnn.tdsl"), data,
                       adc.optim.adam(1e-2), batch=16, steps=48, clip=1.0)
    losses = [r["loss"] for r in result.history]
    assert abs(losses[0] - np.log(32)) < 0.3          # a uniform guess at the start
    assert np.mean(losses[-8:]) < 0.75 * losses[0]
