"""``adc train --data DIR``: data bigger than memory, as a folder of ``NAME.npy`` files or of
``.npz`` shards, memory-mapped and read a batch at a time; the same run, bit for bit, as on
one ``.npz`` of the same rows; every way such a folder can be wrong a named error."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli
from adcompiler.diagnostics import AdcError
from adcompiler.files.folders import is_mapped, open_folder

ROOT = Path(__file__).resolve().parent.parent
MLP = str(ROOT / "samples" / "mlp.tdsl")


def adc(capsys, *args):
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 4)).astype(np.float32)
    return {"x": x, "labels": ((x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0))}


def trained(capsys, tmp_path, data_path, name, *extra):
    out = tmp_path / f"{name}.npz"
    code, _, err = adc(capsys, "train", MLP, "--data", data_path, "--steps", 7, "--batch", 16,
                       "--seed", 3, "--save", out, *extra)
    assert code == 0, err
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def test_folders_train_as_one_npz_bit_for_bit(capsys, tmp_path, data):
    np.savez(tmp_path / "whole.npz", **data)
    (tmp_path / "npy").mkdir()
    for k, v in data.items():
        np.save(tmp_path / "npy" / f"{k}.npy", v)
    (tmp_path / "shards").mkdir()
    np.savez(tmp_path / "shards" / "part-0.npz", **{k: v[:40] for k, v in data.items()})
    np.savez_compressed(tmp_path / "shards" / "part-1.npz", **{k: v[40:90] for k, v in data.items()})
    np.savez(tmp_path / "shards" / "part-2.npz", **{k: v[90:] for k, v in data.items()})
    want = trained(capsys, tmp_path, tmp_path / "whole.npz", "w", "--val", tmp_path / "whole.npz")
    for folder in ("npy", "shards"):
        got = trained(capsys, tmp_path, tmp_path / folder, folder, "--val", tmp_path / folder)
        assert got.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_stored_members_are_memory_mapped(tmp_path, data):
    (tmp_path / "npy").mkdir()
    np.save(tmp_path / "npy" / "x.npy", np.asfortranarray(data["x"]))
    np.savez(tmp_path / "a.npz", **data)
    np.savez_compressed(tmp_path / "b.npz", **data)
    rows = open_folder(str(tmp_path / "npy"), "data")["x"]
    assert is_mapped(rows.parts[0]) and rows.shape == (96, 4)
    np.testing.assert_array_equal(rows[np.array([5, 0, 95])], data["x"][[5, 0, 95]])
    (tmp_path / "sh").mkdir()
    (tmp_path / "a.npz").rename(tmp_path / "sh" / "a.npz")
    (tmp_path / "b.npz").rename(tmp_path / "sh" / "b.npz")
    both = open_folder(str(tmp_path / "sh"), "data")
    assert is_mapped(both["x"].parts[0])           # stored: mapped
    assert not is_mapped(both["x"].parts[1])       # compressed: read
    x = both["x"]
    assert x.shape == (192, 4) and len(x) == 192 and x.ndim == 2
    np.testing.assert_array_equal(x[90:100], np.concatenate([data["x"][90:], data["x"][:4]]))
    np.testing.assert_array_equal(x[np.array([-1, 100])], data["x"][[95, 4]])
    assert x[np.zeros(0, np.int64)].shape == (0, 4)
    with pytest.raises(IndexError):
        x[np.array([192])]
    as64 = x.converted(lambda b: b.astype(np.float64))
    assert as64.dtype == np.float64 and as64[0:2].dtype == np.float64


def _npz_member(path, name, payload):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(name, payload)


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "holds no .npy or .npz files"),
    (lambda d: (np.save(d / "x.npy", np.zeros((3, 4), "f4")),
                np.savez(d / "p.npz", x=np.zeros((3, 4), "f4"))), "both .npy files and .npz"),
    (lambda d: (np.savez(d / "a.npz", x=np.zeros((3, 4), "f4"), labels=np.zeros(3, "i8")),
                np.savez(d / "b.npz", x=np.zeros((3, 4), "f4"))), "b.npz' has no array 'labels'"),
    (lambda d: (np.savez(d / "a.npz", x=np.zeros((3, 4), "f4")),
                np.savez(d / "b.npz", x=np.zeros((3, 5), "f4"))), "shards differ only in their rows"),
    (lambda d: (np.savez(d / "a.npz", x=np.zeros((3, 4), "f4")),
                np.savez(d / "b.npz", x=np.zeros((3, 4), "f4"), y=np.zeros(3))), "has array 'y'"),
    (lambda d: np.save(d / "x.npy", np.array([{}], dtype=object), allow_pickle=True),
     "holds Python objects"),
    (lambda d: (np.save(d / "x.npy", np.zeros((300, 4), "f4")),
                (d / "x.npy").write_bytes((d / "x.npy").read_bytes()[:500])), "is truncated"),
    (lambda d: np.save(d / "x.npy", np.float32(1)), "is a scalar, not rows"),
    (lambda d: (d / "a.npz").write_bytes(b"PK\x03\x04 not a zip"), "is damaged"),
])
def test_bad_folders_are_named_errors(tmp_path, make, message):
    folder = tmp_path / "data"
    folder.mkdir()
    make(folder)
    with pytest.raises(AdcError) as e:
        open_folder(str(folder), "training data")
    assert message in str(e.value)


def test_bad_folder_through_the_command_line(capsys, tmp_path):
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "x.npy", np.zeros((32, 4), "f4"))
    np.save(tmp_path / "d" / "labels.npy", np.zeros(32, "f4"))
    code, _, err = adc(capsys, "train", MLP, "--data", tmp_path / "d", "--steps", 1)
    assert code == 1 and "input 'labels' is declared i64[B] but the data is float32" in err
    code, _, err = adc(capsys, "train", MLP, "--data", tmp_path / "d.tar", "--steps", 1)
    assert code == 1 and "or a folder of .npy files or .npz shards" in err


PEAK = """
import sys, tracemalloc
from adcompiler import cli
tracemalloc.start()
code = cli.main(sys.argv[1:])
print(tracemalloc.get_traced_memory()[1] // 2**20)
sys.exit(code)
"""


@pytest.mark.slow
def test_a_folder_is_not_read_into_memory(tmp_path):
    """64 MiB of rows: from a folder, training maps the file and reads its batches (the peak
    of what Python and NumPy allocate stays far below the data); from one .npz, it reads the
    whole file."""
    prog = tmp_path / "lin.tdsl"
    prog.write_text("def f(x: f32[B, 1024], y: f32[B], param w: f32[1024]) -> f32 {\n"
                    "    return mean((x @ w - y) ** 2)\n}\n")
    rows = 16384
    (tmp_path / "big").mkdir()
    x = np.lib.format.open_memmap(tmp_path / "big" / "x.npy", "w+", np.float32, (rows, 1024))
    x[:] = 1.0
    x.flush()
    del x
    np.save(tmp_path / "big" / "y.npy", np.ones(rows, np.float32))
    with zipfile.ZipFile(tmp_path / "big.npz", "w") as z:
        z.write(tmp_path / "big" / "x.npy", "x.npy")
        z.write(tmp_path / "big" / "y.npy", "y.npy")

    def peak_mib(data):
        proc = subprocess.run([sys.executable, "-c", PEAK, "train", str(prog), "--data",
                               str(data), "--steps", "3", "--batch", "16"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.split()[-1])
    folder, whole = peak_mib(tmp_path / "big"), peak_mib(tmp_path / "big.npz")
    assert folder < 16 and whole >= 64, (folder, whole)
