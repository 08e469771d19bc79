"""`adc train`: data and batches, options, files (log, plot, params, checkpoints), resume
bit-identical after a SIGKILL, the stop at a non-finite loss, --detect-anomaly, mixed
precision, and bad input that leaves earlier files alone."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from adcompiler import cli

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
MLP = str(SAMPLES / "mlp.tdsl")
DIGITS = str(SAMPLES / "digits_mlp.tdsl")
F16 = str(SAMPLES / "f16_underflow.tdsl")


def adc(capsys, *args):
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def mlp_data(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 4)).astype(np.float32)
    labels = ((x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)).astype(np.int64)
    path = tmp_path / "train.npz"
    np.savez(path, x=x, labels=labels)
    return str(path)


def log_lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_trains_and_writes_its_files(tmp_path, capsys, mlp_data):
    log, save = tmp_path / "m.jsonl", tmp_path / "p.npz"
    code, out, err = adc(capsys, "train", MLP, "--data", mlp_data, "--val", mlp_data,
                         "--batch", 16, "--epochs", 4, "--optimizer", "adam:lr=0.05",
                         "--log", log, "--save", save)
    assert code == 0, err
    assert out.startswith("trained 24 steps (to step 24)")
    recs = log_lines(log)
    steps = [r for r in recs if "loss" in r]
    vals = [r for r in recs if "val_loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 25))
    assert [r["step"] for r in vals] == [6, 12, 18, 24]
    for key in ("grad_norm", "grad_norm_W1", "lr", "samples_per_s"):
        assert key in steps[0]
    assert steps[-1]["loss"] < steps[0]["loss"]
    with np.load(save) as z:
        assert sorted(z.files) == ["W1", "W2", "b1", "b2"]
        assert z["W1"].dtype == np.float32 and z["W1"].shape == (4, 8)
    assert re.search(r"^epoch 4: loss \S+ \(mean\)  val_loss \S+$", err, re.M), err


def test_plot(tmp_path, capsys, mlp_data):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "loss.png"
    assert adc(capsys, "train", MLP, "--data", mlp_data, "--val", mlp_data, "--batch", 16,
               "--epochs", 2, "--plot", plot)[0] == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_saved_params_are_what_init_and_adc_run_read(tmp_path, capsys, mlp_data):
    save = tmp_path / "p.npz"
    assert adc(capsys, "train", MLP, "--data", mlp_data, "--steps", 3, "--batch", 8,
               "--optimizer", "sgd:lr=0.1", "--save", save)[0] == 0
    again = tmp_path / "q.npz"
    # --init with the saved values and no step taken: --steps needs >= 1, so compare the
    # first loss of a run from them with adc run on the same rows
    code, _, _ = adc(capsys, "train", MLP, "--data", mlp_data, "--steps", 1, "--batch", 96,
                     "--init", save, "--optimizer", "sgd:lr=0.0", "--save", again,
                     "--log", tmp_path / "l.jsonl")
    assert code == 0
    with np.load(save) as a, np.load(again) as b:
        assert all(np.array_equal(a[k], b[k]) for k in a.files)   # lr 0: unchanged
    with np.load(mlp_data) as d, np.load(save) as p:
        np.savez(tmp_path / "all.npz", **d, **p)
    code, out, _ = adc(capsys, "run", MLP, "--mode", "forward", "--inputs",
                       tmp_path / "all.npz", "--out", tmp_path / "o.npz")
    assert code == 0
    first = log_lines(tmp_path / "l.jsonl")[0]["loss"]
    with np.load(tmp_path / "o.npz") as o:
        assert float(o["out"]) == pytest.approx(first, rel=1e-6)


def test_full_batch_does_not_depend_on_the_seed(tmp_path, capsys, mlp_data):
    outs = []
    for seed in (0, 1):
        save = tmp_path / f"p{seed}.npz"
        assert adc(capsys, "train", MLP, "--data", mlp_data, "--batch", 96, "--steps", 5,
                   "--seed", seed, "--init-scheme", "normal", "--init", _init(tmp_path),
                   "--save", save)[0] == 0
        with np.load(save) as z:
            outs.append({k: z[k] for k in z.files})
    assert all(np.array_equal(outs[0][k], outs[1][k]) for k in outs[0])


def _init(tmp_path):
    rng = np.random.default_rng(5)
    path = tmp_path / "init.npz"
    np.savez(path, W1=rng.standard_normal((4, 8)).astype("f4"), b1=np.zeros(8, "f4"),
             W2=rng.standard_normal((8, 3)).astype("f4"), b2=np.zeros(3, "f4"))
    return path


def test_accumulate_reads_k_batches_per_step(tmp_path, capsys, mlp_data):
    log = tmp_path / "m.jsonl"
    assert adc(capsys, "train", MLP, "--data", mlp_data, "--batch", 8, "--accumulate", 3,
               "--epochs", 2, "--log", log)[0] == 0
    assert [r["step"] for r in log_lines(log)] == list(range(1, 9))   # 96 // 24 per epoch


def test_memory_budget_reports_predicted_and_measured_peak(tmp_path, capsys):
    rng = np.random.default_rng(0)
    data = tmp_path / "rnn.npz"
    np.savez(data, xs=rng.standard_normal((64, 3)).astype("f4"),
             ys=rng.standard_normal(64).astype("f4"))
    code, _, err = adc(capsys, "train", SAMPLES / "rnn.tdsl", "--data", data,
                       "--batch", 16, "--steps", 2, "--memory-budget", "4KiB")
    assert code == 0, err
    line = next(l for l in err.splitlines() if l.startswith("remat budget:4096"))
    predicted, measured = [int(s.replace(",", "")) for s in
                           (line.split("predicted peak ")[1].split(" bytes")[0],
                            line.split("measured peak ")[1].split(" bytes")[0])]
    assert 0 < measured <= predicted <= 4096


def test_memory_budget_fits_the_whole_step(tmp_path, capsys):
    data = tmp_path / "deep.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((64, 8)).astype("f4"))
    opts = ["train", SAMPLES / "deep_mlp.tdsl", "--data", data, "--batch", 32, "--steps", 1,
            "--init-scheme", "normal"]
    code, _, err = adc(capsys, *opts, "--memory-budget", "200KiB")
    assert code == 0, err
    peaks = re.search(r"predicted peak ([\d,]+) bytes .* measured peak ([\d,]+) bytes", err)
    predicted, measured = (int(g.replace(",", "")) for g in peaks.groups())
    assert measured == predicted <= 200 * 1024
    code, _, err = adc(capsys, *opts, "--memory-budget", "50KiB")
    assert code == 1
    assert "memory budget 50.00 KiB (51,200 bytes) cannot be met: the training step's " \
           "smallest predicted peak is" in err


# ---- checkpoints and resume -----------------------------------------------------------

def _digits_like(tmp_path, rows=600):
    rng = np.random.default_rng(3)
    x = rng.random((rows, 64)).astype(np.float32)
    labels = (x[:, :10].argmax(axis=1)).astype(np.int64)
    path = tmp_path / "d.npz"
    np.savez(path, x=x, labels=labels)
    return str(path)


def test_resume_after_sigkill_is_bit_identical(tmp_path, capsys):
    data = _digits_like(tmp_path)
    opts = ["train", DIGITS, "--fn", "digits_mlp", "--data", data, "--batch", 16,
            "--steps", 1500,
            "--optimizer", "adam:lr=3e-3", "--schedule", "cosine:warmup=10", "--clip", "1",
            "--every", 20]
    full, part = tmp_path / "full.npz", tmp_path / "part.npz"
    assert adc(capsys, *opts, "--checkpoint", tmp_path / "a.npz", "--save", full,
               "--log", tmp_path / "a.jsonl")[0] == 0
    ckpt = tmp_path / "b.npz"
    args = [sys.executable, "-m", "adcompiler", *map(str, opts), "--checkpoint", str(ckpt),
            "--save", str(part), "--log", str(tmp_path / "b.jsonl")]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not part.exists()
    with np.load(ckpt) as z:
        stopped = json.loads(str(z["meta"]))["step"]
    assert 0 < stopped < 1500
    code, out, err = adc(capsys, *opts, "--checkpoint", ckpt, "--save", part,
                         "--log", tmp_path / "b.jsonl", "--resume", ckpt)
    assert code == 0, err
    assert f"trained {1500 - stopped} steps (to step 1500)" in out
    with np.load(full) as a, np.load(part) as b:
        for k in a.files:
            assert np.array_equal(a[k], b[k]), k
    la, lb = log_lines(tmp_path / "a.jsonl"), log_lines(tmp_path / "b.jsonl")
    assert [(r["step"], r["loss"]) for r in la] == [(r["step"], r["loss"]) for r in lb]
    with np.load(tmp_path / "a.npz") as a, np.load(ckpt) as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            assert np.array_equal(a[k], b[k]), k


def test_checkpoint_of_another_model_is_refused(tmp_path, capsys, mlp_data):
    ckpt = tmp_path / "c.npz"
    assert adc(capsys, "train", MLP, "--data", mlp_data, "--steps", 2, "--batch", 8,
               "--checkpoint", ckpt)[0] == 0
    before = ckpt.read_bytes()
    code, _, err = adc(capsys, "train", DIGITS, "--fn", "digits_mlp", "--data",
                       _digits_like(tmp_path),
                       "--steps", 2, "--resume", ckpt, "--checkpoint", ckpt)
    assert code == 1
    assert f"error: checkpoint '{ckpt}' is from another model: it trains function 'mlp', " \
           "this run 'digits_mlp'" in err
    assert ckpt.read_bytes() == before and "Traceback" not in err


def test_pickled_checkpoint_is_refused(tmp_path, capsys, mlp_data):
    evil = tmp_path / "evil.npz"
    np.savez(evil, meta=np.array([{"x": 1}], dtype=object))
    code, _, err = adc(capsys, "train", MLP, "--data", mlp_data, "--resume", evil)
    assert code == 1 and "holds pickled objects; refusing to load it" in err


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(tmp_path, capsys, mlp_data):
    ckpt, log, save = tmp_path / "c.npz", tmp_path / "m.jsonl", tmp_path / "p.npz"
    code, _, err = adc(capsys, "train", MLP, "--data", mlp_data, "--batch", 8,
                       "--steps", 50, "--optimizer", "sgd:lr=1e30", "--checkpoint", ckpt,
                       "--every", 1, "--log", log, "--save", save)
    assert code == 1
    assert re.search(r"error: the (loss|gradient norm) is (nan|inf)", err), err
    assert f"the last checkpoint '{ckpt}' is kept" in err and "--detect-anomaly" in err
    bad = int(err.split(" at step ")[1].split(" ")[0])
    with np.load(ckpt) as z:
        assert json.loads(str(z["meta"]))["step"] == bad - 1
        assert all(np.isfinite(z[k]).all() for k in z.files if k.startswith("param/"))
    assert not save.exists()
    assert [r["step"] for r in log_lines(log)] == list(range(1, bad))


def test_detect_anomaly_names_the_op(tmp_path, capsys):
    prog = tmp_path / "p.tdsl"
    prog.write_text("def f(x: f32[B, 2], param w: f32[2]) -> f32 {\n"
                    "    return mean(sqrt(x @ w))\n}\n")
    data = tmp_path / "d.npz"
    np.savez(data, x=np.float32([[1, 1], [1, 1], [-5, -5], [1, 1]]))
    init = tmp_path / "i.npz"
    np.savez(init, w=np.float32([1, 1]))
    code, _, err = adc(capsys, "train", prog, "--data", data, "--init", init, "--steps", 1,
                       "--detect-anomaly")
    assert code == 1
    assert err.splitlines()[:3] == [
        f"{prog}:2:17: error: anomaly: 'sqrt' in the forward sweep produced NaN (first at "
        "index (2,)), from finite operands (operands there: -10)",
        "    return mean(sqrt(x @ w))", "                ^"]


def test_detect_anomaly_in_the_adjoint(tmp_path, capsys):
    prog = tmp_path / "p.tdsl"
    prog.write_text("def f(x: f32[B, 2], param w: f32[2]) -> f32 {\n"
                    "    return mean(sqrt(x @ w))\n}\n")
    np.savez(tmp_path / "d.npz", x=np.float32([[1, 1], [0, 0]]))
    np.savez(tmp_path / "i.npz", w=np.float32([1, 1]))
    base = ["train", prog, "--data", tmp_path / "d.npz", "--init", tmp_path / "i.npz",
            "--steps", 1]
    code, _, err = adc(capsys, *base)                    # sqrt'(0): the loss is finite
    assert code == 1
    assert "error: the gradient norm is nan (the loss 0.707107) at step 1 (epoch 1); " \
           "training stopped before keeping that step." in err
    code, _, err = adc(capsys, *base, "--detect-anomaly")
    assert code == 1
    first = err.splitlines()[0]
    assert first.startswith(f"{prog}:2:17: error: anomaly: ")
    assert "in the adjoint sweep produced +Inf (first at index (1,))" in first


# ---- mixed precision ------------------------------------------------------------------

def _regression(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1024, 8)).astype("f4")
    path = tmp_path / "r.npz"
    np.savez(path, x=x, y=(x @ rng.standard_normal(8) + 0.5).astype("f4"))
    return path


def test_plain_f16_underflows_and_loss_scaling_trains(tmp_path, capsys):
    data = _regression(tmp_path)
    plain, mixed, ref = tmp_path / "plain.jsonl", tmp_path / "mixed.jsonl", tmp_path / "r.jsonl"
    opts = ["train", F16, "--data", data, "--batch", 256, "--steps", 200,
            "--optimizer", "adam:lr=1e-2"]
    code, _, err = adc(capsys, *opts, "--dtype", "f16", "--log", plain)
    first = log_lines(plain)[0]
    assert first["grad_norm"] == 0.0 and first["loss"] > 1e-6   # every gradient flushed
    assert code == 1 and "the loss is nan at step 2" in err      # Adam's 0/0 (eps is 0 in f16)
    assert adc(capsys, *opts, "--log", ref)[0] == 0
    code, out, err = adc(capsys, *opts, "--precision", "f16", "--log", mixed)
    assert code == 0, err
    m, r = log_lines(mixed), log_lines(ref)
    assert m[0]["skipped"] == 1.0 and m[0]["loss_scale"] == 2.0 ** 16   # 2^16 overflows f16
    assert all(x["skipped"] == 0.0 and x["loss_scale"] == 2.0 ** 15 for x in m[1:])
    assert m[-1]["loss"] < m[0]["loss"] / 20
    assert m[-1]["loss"] < 2 * r[-1]["loss"]                    # as good as f32, nearly


def test_bf16_rounds_every_op_and_trains(tmp_path, capsys):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    data = _regression(tmp_path)
    opts = ["train", F16, "--data", data, "--batch", 256, "--steps", 100,
            "--optimizer", "adam:lr=1e-2"]
    bf16, f32 = tmp_path / "bf16.jsonl", tmp_path / "f32.jsonl"
    assert adc(capsys, *opts, "--precision", "bf16", "--log", bf16)[0] == 0
    assert adc(capsys, *opts, "--log", f32)[0] == 0

    def representable(v):
        return float(np.float32(v).astype(ml_dtypes.bfloat16)) == v
    low, ref = log_lines(bf16), log_lines(f32)
    assert all(representable(r["loss"]) for r in low)      # the loss op's result, rounded
    assert not all(representable(r["loss"]) for r in ref)
    assert not any(r["skipped"] for r in low)              # bf16 has f32's range
    assert low[-1]["loss"] < low[0]["loss"] / 5


def test_rounding_executor_rounds_each_result():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from adc_runtime.executor import run_function
    from adc_runtime.rounding import RoundingExecutor
    import adcompiler as adc
    m = adc.load("def f(x: f32[3], y: f32[3]) -> f32[3] {\n    return x * y + 1\n}\n")
    x, y = np.float32([1.001, 3.14159, -2.7183]), np.float32([1.3, 0.7, 2.9])
    (got,), _ = run_function(m, "f", {"x": x, "y": y}, executor=RoundingExecutor)
    bf = ml_dtypes.bfloat16
    r = lambda a: a.astype(bf).astype(np.float32)  # noqa: E731
    assert np.array_equal(got, r(r(r(x) * r(y)) + np.float32(1)))
    assert not np.array_equal(got, x * y + 1)


# ---- bad input ------------------------------------------------------------------------

@pytest.mark.parametrize("arrays, message", [
    (lambda d: {"x": d["x"]}, "missing array 'labels' (data input i64[B])"),
    (lambda d: {**d, "labels": d["labels"].astype("f4")},
     "input 'labels' is declared i64[B] but the data is float32"),
    (lambda d: {**d, "x": d["x"][:, :3]},
     "input 'x' is declared f32[B, 4] but has shape (96, 3)"),
    (lambda d: {**d, "labels": d["labels"][:50]}, "array 'labels' has 50 rows but 'x' has 96"),
    (lambda d: {**d, "W1": np.zeros((4, 8), "f4")}, "unknown array 'W1' (a param"),
    (lambda d: {k: v[:10] for k, v in d.items()}, "has 10 rows, fewer than one step's batch "
                                                  "of 16"),
])
def test_bad_data_is_a_named_error_and_files_stay(tmp_path, capsys, mlp_data, arrays,
                                                  message):
    with np.load(mlp_data) as z:
        good = {k: z[k] for k in z.files}
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays(good))
    ckpt, log = tmp_path / "c.npz", tmp_path / "m.jsonl"
    assert adc(capsys, "train", MLP, "--data", mlp_data, "--steps", 2, "--batch", 16,
               "--checkpoint", ckpt, "--log", log)[0] == 0
    before = ckpt.read_bytes(), log.read_bytes()
    code, _, err = adc(capsys, "train", MLP, "--data", bad, "--steps", 2, "--batch", 16,
                       "--checkpoint", ckpt, "--log", log, "--resume", ckpt)
    assert code == 1, err
    assert message in err and "Traceback" not in err
    assert (ckpt.read_bytes(), log.read_bytes()) == before


@pytest.mark.parametrize("option, message", [
    (["--optimizer", "rmsprop"], "unknown optimizer 'rmsprop'"),
    (["--optimizer", "adam:lr=fast"], "lr must be a number, got 'fast'"),
    (["--optimizer", "adam:momentum=0.9"], "optimizer 'adam' has no option 'momentum=0.9'"),
    (["--optimizer", "sgd:lr=0.1,nesterov=maybe"], "nesterov must be true or false"),
    (["--batch", "0"], "expected at least 1, got 0"),
    (["--clip", "-1"], "expected a positive number"),
    (["--schedule", "cosine:warm=3"], "schedule 'cosine' has no option 'warm=3'"),
    (["--steps", "3", "--epochs", "2"], "not allowed with argument"),
    (["--learning-rate", "3"], "unrecognized arguments: --learning-rate"),
    (["--memory-budget", "lots"], "bad memory size 'lots'"),
    (["--every", "5"], "--every needs --checkpoint FILE"),
    (["--remat", "sqrt", "--memory-budget", "1MiB"], "give --remat or --memory-budget"),
    (["--precision", "f16", "--dtype", "f64"], "does not combine with --dtype"),
    (["--metric", "acc-uracy"], "expected names separated by commas"),
])
def test_bad_options_exit_2(capsys, mlp_data, option, message):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", MLP, "--data", mlp_data, *option])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_data_file_and_folder(tmp_path, capsys, mlp_data):
    code, _, err = adc(capsys, "train", MLP, "--data", tmp_path / "nope.npz")
    assert code == 1 and "does not exist" in err
    code, _, err = adc(capsys, "train", MLP, "--data", mlp_data, "--save",
                       tmp_path / "no" / "p.npz")
    assert code == 1 and "--save" in err and "does not exist" in err


def test_init_of_the_wrong_shape(tmp_path, capsys, mlp_data):
    init = tmp_path / "i.npz"
    np.savez(init, W1=np.zeros((4, 9), "f4"), b1=np.zeros(8, "f4"), W2=np.zeros((8, 3), "f4"),
             b2=np.zeros(3, "f4"))
    code, _, err = adc(capsys, "train", MLP, "--data", mlp_data, "--init", init)
    assert code == 1 and "input 'W1' is declared f32[4, 8] but has shape (4, 9)" in err


def test_a_param_dimension_nothing_binds_is_named_once(tmp_path, capsys):
    """The message names the dimension, not a whole other message where its name belongs."""
    prog = tmp_path / "emb.tdsl"
    prog.write_text("def f(x: i64[B], y: f32[B], param E: f32[V, 16]) -> f32 {\n"
                    "    return mean(sum(take(E, x, axis=0), axis=1) - y)\n}\n")
    data = tmp_path / "d.npz"
    np.savez(data, x=np.arange(4), y=np.ones(4, np.float32))
    code, _, err = adc(capsys, "train", prog, "--data", data, "--epochs", 1)
    assert code == 1, err
    assert err.strip().splitlines()[-1] == (
        "error: the shape of param 'E' (f32[V, 16]) needs dimension 'V', which no data array "
        "sets: bind it (--bind V=SIZE, or dims={'V': SIZE}) or give the param's value "
        "(--init, or params=)")
    assert adc(capsys, "train", prog, "--data", data, "--epochs", 1, "--bind", "V=5")[0] == 0
