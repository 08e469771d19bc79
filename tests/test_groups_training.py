"""Parameter paths and groups in training: the three findings of a new user (parameters
spelled out everywhere, layernorm gains starting dead, the wrong function trained
silently), initialization by role, partial --init, paths in --save, checkpoints, adc run's
rows and the library's nested dicts, and the errors of files that do not fit."""
from __future__ import annotations

import numpy as np
import pytest

import adcompiler as adc
from adcompiler import cli
from adcompiler.diagnostics import AdcError
from adcompiler.files.paths import flat_paths, join, nest, split
from adcompiler.frontend import compile_source
from adcompiler.training import init

STACK = """
group Layer { W: f32[D, D], c: f32[D], g: f32[D], b: f32[D] }
def loss(x: f32[B, D], y: f32[B, D], param layers: Layer[3]) -> f32 {
    h = x
    for l in range(3) {
        p = layers[l]
        h = layernorm(h + tanh(h @ p.W + p.c), p.g, p.b)
    }
    return mse(h, y)
}
"""

TWO_LOSSES = """
def loss(x: f32[B, 3], y: f32[B], param w: f32[3]) -> f32 { return mean((x @ w - y) ** 2) }
def accuracy(x: f32[B, 3], y: f32[B], param w: f32[3]) -> f32 {
    return mean(where((x @ w) * y > 0, ones_like(y), zeros_like(y)))
}
"""


def adc_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def stack_files(tmp_path):
    prog = tmp_path / "stack.tdsl"
    prog.write_text(STACK)
    rng = np.random.default_rng(0)
    data = tmp_path / "d.npz"
    np.savez(data, x=rng.normal(size=(16, 4)).astype("f4"),
             y=rng.normal(size=(16, 4)).astype("f4"))
    return prog, data


# ---- finding 3: the wrong function trained silently --------------------------------------

def test_several_losses_without_fn_are_refused(tmp_path, capsys):
    prog, data = tmp_path / "two.tdsl", tmp_path / "d.npz"
    prog.write_text(TWO_LOSSES)
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("f4")
    np.savez(data, x=x, y=(x[:, 0] > 0).astype("f4"))
    code, out, err = adc_cli(capsys, "train", prog, "--data", data, "--steps", 1)
    assert code == 1 and out == ""
    assert "2 functions that return a float scalar and take params (loss, accuracy)" in err
    assert "--fn NAME" in err and "Traceback" not in err
    # naming the metric leaves one loss: it is trained
    code, out, err = adc_cli(capsys, "train", prog, "--data", data, "--steps", 2,
                             "--metric", "accuracy", "--val", data)
    assert code == 0 and "val_accuracy" in out


def test_a_gradient_of_exactly_zero_is_a_warning_naming_the_params(tmp_path, capsys):
    prog, data = tmp_path / "two.tdsl", tmp_path / "d.npz"
    prog.write_text(TWO_LOSSES)
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("f4")
    np.savez(data, x=x, y=(x[:, 0] > 0).astype("f4"))
    code, _, err = adc_cli(capsys, "train", prog, "--data", data, "--steps", 1,
                           "--fn", "accuracy")
    assert code == 0
    assert "warning: the gradient norm is exactly 0 at step 1: no parameter of 'accuracy' " \
           "gets a gradient (w)" in err


# ---- finding 2: initialization by role -------------------------------------------------

def test_roles_are_read_from_uses():
    m = compile_source(STACK + """
def emb(ids: i64[B], param E: f32[10, 4], param v: f32[4], param k: f32[2, 4, 3, 3],
        param kb: f32[2, 1, 1], img: f32[B, 4, 5, 5]) -> f32 {
    return sum(take(E, ids) * v) + sum(conv2d(img, k) + kb)
}""")
    r = init.roles(m, m["loss"], ["layers.W", "layers.c", "layers.g", "layers.b"])
    assert r == {"layers.W": ("weight", ("D", "D")), "layers.c": ("bias", None),
                 "layers.g": ("gain", None), "layers.b": ("bias", None)}
    r = init.roles(m, m["emb"], ["E", "v", "k", "kb"])
    assert r["E"] == ("embedding", None) and r["v"] == ("other", None)
    assert r["k"] == ("weight", (36, 18)) and r["kb"] == ("bias", None)


def test_layernorm_gains_start_at_one_and_weights_as_torch(stack_files, tmp_path, capsys):
    prog, data = stack_files
    saved = tmp_path / "p.npz"
    assert adc_cli(capsys, "train", prog, "--data", data, "--steps", 1, "--optimizer",
                   "sgd:lr=0", "--save", saved)[0] == 0
    with np.load(saved) as z:
        assert sorted(z.files) == sorted(f"layers.{l}.{k}" for l in range(3)
                                         for k in "Wcgb")
        for l in range(3):
            assert np.all(z[f"layers.{l}.g"] == 1) and np.all(z[f"layers.{l}.b"] == 0)
            assert np.all(z[f"layers.{l}.c"] == 0)
            w = z[f"layers.{l}.W"]
            assert 0 < np.abs(w).max() <= 0.5 and w.std() > 0.1   # U(-1/sqrt(4), 1/sqrt(4))


def test_a_partial_init_is_filled_by_role_and_says_which(stack_files, tmp_path, capsys):
    prog, data = stack_files
    given = tmp_path / "i.npz"
    np.savez(given, **{f"layers.{l}.W": np.full((4, 4), 0.25, "f4") for l in range(3)})
    saved = tmp_path / "p.npz"
    code, _, err = adc_cli(capsys, "train", prog, "--data", data, "--steps", 1, "--init",
                           given, "--optimizer", "sgd:lr=0", "--save", saved)
    assert code == 0, err
    assert "leaves out layers.<i>.c, layers.<i>.g, layers.<i>.b: drawn by role" in err
    with np.load(saved) as z:
        assert np.all(z["layers.2.W"] == 0.25) and np.all(z["layers.1.g"] == 1)


# ---- paths in files ------------------------------------------------------------------------

@pytest.mark.parametrize("change,message", [
    (lambda d: {**d, "layers.1.Wx": d["layers.1.W"]},
     "'layers.1.Wx' matches no parameter path of 'loss' (paths: layers.<i>.W, layers.<i>.b, "
     "layers.<i>.c, layers.<i>.g)"),
    (lambda d: {**d, "layers.1.W": np.zeros((4, 5), "f4")},
     "the layers of the stacked group must have one shape: 'layers.1.W' is (4, 5), "
     "'layers.0.W' is (4, 4)"),
    (lambda d: {k: v for k, v in d.items() if k != "layers.2.g"},
     "missing 'layers.2.g': stacked group 'layers' has layer 2 in other leaves"),
    (lambda d: {**d, "layers.W": np.zeros((3, 4, 4), "f4")},
     "'layers.W' is given whole and by layer"),
])
def test_an_init_file_that_does_not_fit_is_a_named_error(stack_files, tmp_path, capsys,
                                                          change, message):
    prog, data = stack_files
    full = {f"layers.{l}.{k}": np.ones((4, 4) if k == "W" else (4,), "f4")
            for l in range(3) for k in "Wcgb"}
    bad = tmp_path / "bad.npz"
    np.savez(bad, **change(full))
    code, _, err = adc_cli(capsys, "train", prog, "--data", data, "--steps", 1, "--init", bad)
    assert code == 1 and message in err and "Traceback" not in err


def test_run_rows_and_out_keys_are_leaf_paths(stack_files, tmp_path, capsys):
    prog, _ = stack_files
    out = tmp_path / "o.npz"
    code, text, _ = adc_cli(capsys, "run", prog, "--bind", "B=2", "--bind", "D=4",
                            "--wrt", "layers", "--out", out)
    assert code == 0 and "grad_layers.2.W" in text
    with np.load(out) as z:
        assert "grad_layers.0.g" in z.files and z["grad_layers.0.W"].shape == (4, 4)


def test_checkpoints_hold_params_by_path_and_resume(stack_files, tmp_path, capsys):
    prog, data = stack_files
    ck = tmp_path / "c.npz"
    assert adc_cli(capsys, "train", prog, "--data", data, "--steps", 2, "--checkpoint",
                   ck)[0] == 0
    with np.load(ck) as z:
        assert "param/layers.1.W" in z.files
    code, _, err = adc_cli(capsys, "train", prog, "--data", data, "--steps", 3, "--resume", ck)
    assert code == 0, err


# ---- the library -----------------------------------------------------------------------

def test_nest_split_join_round_trip():
    fn = compile_source(STACK)["loss"]
    stacked = {"layers.W": np.arange(48.).reshape(3, 4, 4), "layers.c": np.zeros((3, 4)),
               "layers.g": np.ones((3, 4)), "layers.b": np.zeros((3, 4))}
    tree = nest(split(fn.attrs["stacked"], stacked))
    assert isinstance(tree["layers"], list) and len(tree["layers"]) == 3
    assert tree["layers"][2]["W"][0, 0] == 32
    back = join(fn, flat_paths(tree), "params")
    assert all(np.array_equal(back[k], v) for k, v in stacked.items())


def test_train_takes_and_returns_nested_params(stack_files):
    prog, data = stack_files
    rng = np.random.default_rng(1)
    params = {"layers": [{"W": rng.normal(size=(4, 4)) / 2, "c": np.zeros(4), "g": np.ones(4),
                          "b": np.zeros(4)} for _ in range(3)]}
    with np.load(data) as z:
        arrays = {k: z[k] for k in z.files}
    result = adc.train(str(prog), arrays, adc.optim.sgd(0.1), params=params, steps=2)
    assert len(result.params["layers"]) == 3
    assert not np.allclose(result.params["layers"][0]["W"], params["layers"][0]["W"])


def test_wrt_a_single_layer_is_refused():
    fn = compile_source(STACK)["loss"]
    from adcompiler.files.paths import expand_wrt
    assert expand_wrt(fn, ["layers"]) == ["layers.W", "layers.c", "layers.g", "layers.b"]
    with pytest.raises(AdcError, match="one layer of a stacked group"):
        expand_wrt(fn, ["layers.1.W"])


def _layers(rng):
    return {"layers": [{"W": (rng.normal(size=(4, 4)) / 2).astype("f4"),
                        "c": np.zeros(4, "f4"), "g": np.ones(4, "f4"),
                        "b": np.zeros(4, "f4")} for _ in range(3)]}


def test_grad_takes_and_returns_nested_params():
    rng = np.random.default_rng(2)
    params = _layers(rng)
    x, y = rng.normal(size=(5, 4)).astype("f4"), rng.normal(size=(5, 4)).astype("f4")
    value, grads = adc.value_and_grad(STACK)(params, x=x, y=y)
    assert len(grads["layers"]) == 3 and grads["layers"][1]["W"].shape == (4, 4)
    # the same gradients as the stacked inputs by name
    flat = {f"layers.{k}": np.stack([p[k] for p in params["layers"]]) for k in "Wcgb"}
    v2, g2 = adc.value_and_grad(STACK, wrt=[f"layers.{k}" for k in "Wcgb"])(x=x, y=y, **flat)
    assert value == v2
    np.testing.assert_array_equal(g2[0][2], grads["layers"][2]["W"])


def test_train_step_takes_and_returns_nested_params():
    rng = np.random.default_rng(3)
    params = _layers(rng)
    step = adc.train_step(STACK, "sgd:lr=0.1")
    state = step.init(params)
    batch = {"x": rng.normal(size=(5, 4)).astype("f4"),
             "y": rng.normal(size=(5, 4)).astype("f4")}
    new, state, metrics = step(params, state, batch)
    assert isinstance(new["layers"], list) and new["layers"][0]["W"].shape == (4, 4)
    assert float(metrics["grad_norm"]) > 0
    assert not np.array_equal(new["layers"][0]["W"], params["layers"][0]["W"])


def test_run_rows_of_a_stack_go_layer_by_layer():
    from adcompiler.files.paths import split_outputs
    fn = compile_source(STACK)["loss"]
    named = [("out", np.zeros(()))] + [
        (f"grad_layers.{k}", np.arange(3 * 16.).reshape(3, 4, 4) if k == "W" else
         np.arange(12.).reshape(3, 4)) for k in "Wcgb"] + [("state_x", np.zeros(2))]
    rows = split_outputs(fn, named)
    assert [k for k, _ in rows] == ["out"] + [f"grad_layers.{i}.{k}" for i in range(3)
                                              for k in "Wcgb"] + ["state_x"]
    assert rows[5][1][0, 0] == 16                   # layer 1 of W
