"""Run `adc` on the conformance programs, in process or as a subprocess (no PyTorch here:
the error tests use this module where PyTorch is not installed)."""
from __future__ import annotations

import contextlib
import io
import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from adcompiler.cli import main as adc_main

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
_count = itertools.count()


def run_adc(argv: list[str], *, subprocess_: bool = False) -> tuple[int, str, str]:
    """`adc ARGV` -> (exit status, stdout, stderr)."""
    if subprocess_:
        p = subprocess.run([sys.executable, "-m", "adcompiler", *argv], capture_output=True,
                           text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        return p.returncode, p.stdout, p.stderr
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = adc_main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def adc_out(tmp: Path, prog: Path, mode: str, inputs: dict | Path, *, extra=(),
            tangents: dict | None = None, subprocess_: bool = False) -> dict:
    """`adc run PROG --mode MODE --inputs IN --out OUT [extra]`, returning OUT.npz."""
    k = next(_count)
    if isinstance(inputs, dict):
        path = tmp / f"in{k}.npz"
        np.savez(path, **inputs)
        inputs = path
    out = tmp / f"out{k}.npz"
    argv = ["run", str(prog), "--mode", mode, "--inputs", str(inputs), "--out", str(out),
            *extra]
    if tangents is not None:
        tp = tmp / f"t{k}.npz"
        np.savez(tp, **tangents)
        argv += ["--tangents", str(tp)]
    rc, _, err = run_adc(argv, subprocess_=subprocess_)
    assert rc == 0, f"adc {' '.join(argv)} -> {rc}\n{err}"
    assert "Traceback" not in err
    with np.load(out) as z:
        return {key: z[key] for key in z.files}
