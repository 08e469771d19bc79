"""``adc train --log``: JSON lines, a CSV table (``.csv``) or TensorBoard event files in a
folder (``DIR/``, with tensorboardX or PyTorch's writer), the same figures in each; a resumed
run keeps the records before its first step."""
from __future__ import annotations

import csv
import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli

ROOT = Path(__file__).resolve().parent.parent
MLP = str(ROOT / "samples" / "mlp.tdsl")


def adc(capsys, *args):
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 4)).astype(np.float32)
    path = tmp_path / "d.npz"
    np.savez(path, x=x, labels=((x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)))
    return path


def train(capsys, data, log, *extra):
    code, _, err = adc(capsys, "train", MLP, "--data", data, "--val", data, "--batch", 32,
                       "--log", log, *extra)
    assert code == 0, err


def json_records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def csv_records(path):
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


def test_csv_holds_what_the_json_lines_hold(capsys, tmp_path, data):
    train(capsys, data, tmp_path / "m.jsonl", "--epochs", 2)
    train(capsys, data, tmp_path / "m.csv", "--epochs", 2)
    want, got = json_records(tmp_path / "m.jsonl"), csv_records(tmp_path / "m.csv")
    assert len(got) == len(want) == 8       # 3 steps and a validation per epoch
    for w, g in zip(want, got):
        w = {k: v for k, v in w.items() if k != "samples_per_s"}
        g = {k: v for k, v in g.items() if k != "samples_per_s"}
        assert g == pytest.approx(w, rel=1e-15)
    header = (tmp_path / "m.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["step", "epoch", "loss"] and header[-1] == "val_loss"


def test_a_resumed_csv_keeps_the_rows_before_its_first_step(capsys, tmp_path, data):
    train(capsys, data, tmp_path / "whole.csv", "--epochs", 2)
    ck = tmp_path / "ck.npz"
    train(capsys, data, tmp_path / "part.csv", "--epochs", 1, "--checkpoint", ck)
    at3 = tmp_path / "at3.npz"
    at3.write_bytes(ck.read_bytes())
    with open(tmp_path / "part.csv", "a") as f:
        f.write("5,1,9,9,9,9,9,9,0.001,1,\n")          # a step the resumed run redoes
    train(capsys, data, tmp_path / "part.csv", "--epochs", 2, "--checkpoint", ck, "--resume", ck)

    def steady(rows):
        return [{k: v for k, v in r.items() if k != "samples_per_s"} for r in rows]
    assert steady(csv_records(tmp_path / "part.csv")) == steady(
        csv_records(tmp_path / "whole.csv"))
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    code, _, err = adc(capsys, "train", MLP, "--data", data, "--batch", 32, "--epochs", 2,
                       "--log", tmp_path / "other.csv", "--resume", at3)
    assert code == 1 and "not a log of adc train" in err


def events(folder):
    """(tag, step, value) of every scalar in the TensorBoard event files of `folder`."""
    from tensorboardX.proto import event_pb2
    out = []
    for path in sorted(Path(folder).glob("events.out.tfevents.*")):
        raw = path.read_bytes()
        pos = 0
        while pos < len(raw):
            (n,) = struct.unpack("<Q", raw[pos:pos + 8])
            ev = event_pb2.Event.FromString(raw[pos + 12:pos + 12 + n])
            pos += 12 + n + 4
            out += [(v.tag, ev.step, v.simple_value) for v in ev.summary.value]
    return out


def test_tensorboard_event_files(capsys, tmp_path, data):
    pytest.importorskip("tensorboardX")
    train(capsys, data, tmp_path / "m.jsonl", "--epochs", 2)
    train(capsys, data, f"{tmp_path / 'tb'}/", "--epochs", 2)
    got = {(tag, step): v for tag, step, v in events(tmp_path / "tb")}
    for rec in json_records(tmp_path / "m.jsonl"):
        if "val_loss" in rec:
            assert got[("val/loss", rec["step"])] == pytest.approx(rec["val_loss"], rel=1e-6)
        else:
            assert got[("train/loss", rec["step"])] == pytest.approx(rec["loss"], rel=1e-6)
            assert got[("train/lr", rec["step"])] == pytest.approx(rec["lr"], rel=1e-6)
    assert {t for t, _ in got} >= {"train/loss", "train/grad_norm", "train/grad_norm_W1",
                                   "train/samples_per_s", "val/loss"}


def test_tensorboard_without_a_writer_is_refused_before_the_run(capsys, tmp_path, data,
                                                                 monkeypatch):
    for name in ("tensorboardX", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)
    code, _, err = adc(capsys, "train", MLP, "--data", data, "--batch", 32,
                       "--log", f"{tmp_path / 'tb'}/", "--save", tmp_path / "p.npz")
    assert code == 1 and "needs tensorboardX (pip install -e '.[tensorboard]')" in err
    assert not (tmp_path / "tb").exists() and not (tmp_path / "p.npz").exists()
