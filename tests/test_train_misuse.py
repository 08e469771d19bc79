"""What a careless user or an attacker tries against ``adc train`` and its files: devices
and links to them as inputs, outputs that cannot be written or that are inputs, a stopped
run, checkpoints edited by hand, options of the wrong kind or given twice. Each is an error
with a message (exit 1, or 2 for a bad command line) before work is lost, never an internal
error (exit 3), never silently ignored."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from adcompiler.cli import main

SAMPLES = Path(__file__).parent.parent / "samples"
MLP = str(SAMPLES / "mlp.tdsl")


def adc(capsys, *args) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "internal error" not in out.err, out.err
    return rc, out.out, out.err


@pytest.fixture
def data(tmp_path) -> str:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    path = tmp_path / "train.npz"
    np.savez(path, x=x, labels=(x[:, 0] > 0).astype(np.int64))
    return str(path)


def train(capsys, data, *extra):
    return adc(capsys, "train", MLP, "--data", data, "--batch", 4, *extra)


# ---- 1. unbounded reads --------------------------------------------------------------

@pytest.mark.parametrize("option", ["--resume", "--init", "--val", "--data"])
@pytest.mark.parametrize("how", ["device", "link"])
def test_a_device_as_an_input_is_refused_before_reading(option, how, tmp_path, capsys,
                                                        data):
    path = "/dev/zero"
    if how == "link":   # named like a checkpoint
        path = str(tmp_path / "ck.npz")
        os.symlink("/dev/zero", path)
    argv = ["train", MLP, "--data", data, "--steps", 1]
    argv[argv.index(data) if option == "--data" else len(argv):] = \
        [path, "--steps", 1] if option == "--data" else [option, path]
    rc, _, err = adc(capsys, *argv)
    assert rc == 1 and path in err
    assert "is a device, not a file" in err or "must be a .npz file" in err


def test_a_device_as_the_program_is_refused(tmp_path, capsys):
    link = tmp_path / "prog.tdsl"
    os.symlink("/dev/zero", link)
    for cmd in (["run", link], ["compile", link], ["run", "/dev/zero"]):
        rc, _, err = adc(capsys, *cmd)
        assert rc == 1 and "is a device, not a file" in err


def test_a_device_as_run_inputs_is_refused(tmp_path, capsys):
    link = tmp_path / "in.npz"
    os.symlink("/dev/zero", link)
    rc, _, err = adc(capsys, "run", MLP, "--inputs", link)
    assert rc == 1 and "is a device, not a file" in err
