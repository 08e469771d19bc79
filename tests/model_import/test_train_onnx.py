"""adc train MODEL.onnx --loss NAME: one command imports a model and trains it, the same run
as importing to a file and training that; a model without --loss, or --loss on a TDSL
program, is refused."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import save  # noqa: E402

from adcompiler import cli  # noqa: E402

from test_import_onnx import mlp  # noqa: E402


@pytest.fixture
def model(tmp_path):
    save(mlp(), str(tmp_path / "m.onnx"))
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((64, 4)).astype(np.float32),
             target=rng.standard_normal((64, 3)).astype(np.float32))
    return tmp_path


def train(*args):
    return cli.main(["train", *map(str, args), "--batch", "16", "--steps", "6",
                     "--optimizer", "adam:lr=1e-2"])


def test_one_command_equals_import_then_train(model, capsys):
    assert train(model / "m.onnx", "--loss", "mse", "--data", model / "d.npz",
                 "--save", model / "one.npz") == 0
    assert cli.main(["import", str(model / "m.onnx"), "-o", str(model / "m.tdsl"),
                     "--loss", "mse"]) == 0
    assert train(model / "m.tdsl", "--fn", "loss", "--init", model / "m.params.npz",
                 "--data", model / "d.npz", "--save", model / "two.npz") == 0
    one, two, start = (np.load(model / f) for f in ("one.npz", "two.npz", "m.params.npz"))
    assert sorted(one) == sorted(two) == ["fc.b", "fc_W"]
    for k in one:
        np.testing.assert_array_equal(one[k], two[k])
        assert not np.array_equal(one[k], start[k])   # it trained from the initializers


def test_init_overrides_the_initializers(model, capsys):
    np.savez(model / "w.npz", fc_W=np.zeros((4, 3), np.float32))
    assert train(model / "m.onnx", "--loss", "mse", "--data", model / "d.npz", "--init",
                 model / "w.npz", "--steps", "1", "--optimizer", "sgd:lr=0",
                 "--save", model / "out.npz") == 0
    out = np.load(model / "out.npz")
    assert not out["fc_W"].any()


def test_a_model_needs_a_loss(model, capsys):
    assert train(model / "m.onnx", "--data", model / "d.npz") == 1
    assert "m.onnx: an imported model has no loss to train: give --loss" in \
        capsys.readouterr().err


def test_loss_is_refused_for_a_tdsl_program(model, capsys):
    prog = model / "p.tdsl"
    prog.write_text("def f(x: f32[4], param w: f32[4]) -> f32 {\n    return sum(x * w)\n}\n")
    with pytest.raises(SystemExit) as e:
        train(prog, "--loss", "mse", "--data", model / "d.npz")
    assert e.value.code == 2 and "--loss is for an ONNX model" in capsys.readouterr().err
