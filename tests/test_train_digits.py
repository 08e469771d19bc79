"""The README's quick-start command trains samples/digits_mlp.tdsl on scikit-learn's bundled
digits past 97% test accuracy (skipped without scikit-learn)."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parent.parent


def quick_start() -> list[str]:
    """The README's first command line, less its ``pip install`` part."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start\n\n```sh\n(.*?)\n```", text, re.S).group(1)
    parts = block.splitlines()[0].split(" && ")
    assert parts[0].startswith("python -m pip install")
    return parts[1:]


def test_readme_command_trains_digits_past_97_percent(tmp_path):
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
