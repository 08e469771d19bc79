"""``--inputs`` given more than once: the files merge by name, and a name in two files is an
error naming both (trained parameters beside a data file, as repeated options go)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "samples" / "backprop_tiny.tdsl")
PARAMS = ("W1", "b1", "v", "b3")


@pytest.fixture
def split(tmp_path):
    """backprop_tiny's inputs in a params file, a data file and one file of them all."""
    d = json.loads((ROOT / "samples" / "backprop_tiny.json").read_text())
    d = {k: np.array(v, np.float32) for k, v in d.items()}
    params, data, whole = tmp_path / "params.npz", tmp_path / "data.npz", tmp_path / "all.npz"
    np.savez(params, **{k: d[k] for k in PARAMS})
    np.savez(data, **{k: d[k] for k in d if k not in PARAMS})
    np.savez(whole, **d)
    return str(params), str(data), str(whole)


def adc(capsys, *args):
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", [
    ["run", TINY, "--mode", "reverse"], ["run", TINY, "--mode", "forward"],
    ["run", TINY, "--mode", "hvp"], ["check", TINY], ["jacobian", TINY],
    ["remat-curve", TINY, "--points", "2"],
])
def test_several_files_merge_as_one(capsys, split, command):
    params, data, whole = split
    code, merged, err = adc(capsys, *command, "--inputs", params, "--inputs", data)
    assert code == 0, err
    assert "random inputs" not in err
    code, one, err = adc(capsys, *command, "--inputs", whole)
    assert code == 0, err
    if command[0] != "remat-curve":   # its measured times differ between runs
        assert merged == one


def test_an_input_in_two_files_names_both(capsys, split, tmp_path):
    params, _, _ = split
    whole = str(ROOT / "samples" / "backprop_tiny.json")
    code, _, err = adc(capsys, "run", TINY, "--inputs", params, "--inputs", whole)
    assert code == 1
    assert err.strip() == (f"error: input 'W1' is in two inputs files, '{params}' and "
                           f"'{whole}': give each input once")


def test_messages_name_the_file_an_input_came_from(capsys, split, tmp_path):
    params, data, _ = split
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(3, np.float32), y=np.float32(1))
    code, _, err = adc(capsys, "run", TINY, "--inputs", params, "--inputs", bad)
    assert code == 1 and f"error: {bad}: input 'x' is declared f32[2] but has shape (3,)" in err
    code, _, err = adc(capsys, "run", TINY, "--inputs", params)
    assert code == 1 and f"error: {params}: missing input 'x' (f32[2])" in err
    code, _, err = adc(capsys, "run", TINY, "--inputs", data, "--inputs", params,
                       "--inputs", bad)
    assert code == 1 and "input 'x' is in two inputs files" in err
