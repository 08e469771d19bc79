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


# ---- 2. --max-memory covers the params and the training step -------------------------

BIG = """def f(x: f32[B, {n}], param W: f32[{n}, {n}]) -> f32 {{
    return mean((x @ W) ** 2)
}}
"""


def _big(tmp_path, n: int) -> tuple[Path, Path]:
    prog = tmp_path / "big.tdsl"
    prog.write_text(BIG.format(n=n))
    data = tmp_path / "big.npz"
    np.savez(data, x=np.ones((2, n), np.float32))
    return prog, data


def test_a_param_beyond_the_limit_is_refused_before_it_is_drawn(tmp_path, capsys):
    prog, data = _big(tmp_path, 20000)   # W alone: 1.49 GiB
    rc, out, err = adc(capsys, "train", prog, "--data", data, "--max-memory", "1GiB",
                       "--steps", 1)
    assert rc == 1 and "the params of 'f' (W) would need 1.49 GiB (1,600,000,000 bytes)" in err
    assert "more than the memory limit of 1.00 GiB (--max-memory)" in err and not out


def test_a_step_beyond_the_limit_is_refused_before_it_runs(tmp_path, capsys):
    prog, data = _big(tmp_path, 1000)   # W: 4 MB; with its gradient and Adam's state: more
    rc, out, err = adc(capsys, "train", prog, "--data", data, "--max-memory", "10MiB",
                       "--steps", 1)
    assert rc == 1 and "a training step (the params, the optimizer state" in err
    assert "would need" in err and "--max-memory" in err and not out
    rc, out, _ = adc(capsys, "train", prog, "--data", data, "--max-memory", "100MiB",
                     "--steps", 1)
    assert rc == 0 and "trained 1 steps" in out


# ---- 3. mixed precision that never trains --------------------------------------------

NAN_GRAD = """def f(x: f32[B, 2], param w: f32[2]) -> f32 {
    return mean(x @ sqrt(w * w))
}
"""


def test_steps_all_skipped_by_loss_scaling_are_an_error(tmp_path, capsys):
    prog = tmp_path / "p.tdsl"
    prog.write_text(NAN_GRAD)    # d sqrt(w*w) / dw at w = 0 is NaN at every scale
    np.savez(tmp_path / "d.npz", x=np.ones((4, 2), np.float32))
    np.savez(tmp_path / "i.npz", w=np.zeros(2, np.float32))
    base = ["train", prog, "--data", tmp_path / "d.npz", "--init", tmp_path / "i.npz",
            "--precision", "f16", "--save", tmp_path / "out.npz"]
    rc, out, err = adc(capsys, *base, "--steps", 40)
    assert rc == 1 and "loss scaling skipped 30 steps in a row, up to step 30" in err
    assert not (tmp_path / "out.npz").exists()
    rc, out, err = adc(capsys, *base, "--steps", 3)
    assert rc == 1 and "loss scaling skipped every step of this run (3)" in err


def test_f16_detect_anomaly_does_not_see_the_loss_scale(capsys, data):
    rc, out, err = train(capsys, data, "--precision", "f16", "--detect-anomaly", "--steps", 3)
    assert rc == 0 and "anomaly" not in err
    assert "1 of them skipped by loss scaling" in out   # 2^16 overflows f16 at step 1


def test_f16_detect_anomaly_still_finds_a_nan(tmp_path, capsys):
    prog = tmp_path / "p.tdsl"
    prog.write_text("def f(x: f32[B, 2], param w: f32[2]) -> f32 {\n"
                    "    return mean(log(x @ w))\n}\n")
    np.savez(tmp_path / "d.npz", x=np.float32([[1, 1], [-5, -5]]))
    np.savez(tmp_path / "i.npz", w=np.float32([1, 1]))
    rc, _, err = adc(capsys, "train", prog, "--data", tmp_path / "d.npz", "--init",
                     tmp_path / "i.npz", "--precision", "f16", "--detect-anomaly")
    assert rc == 1 and "anomaly: 'log'" in err


# ---- 5. every output place and data file checked up front ----------------------------

@pytest.mark.parametrize("option", ["--save", "--checkpoint", "--plot", "--log"])
@pytest.mark.parametrize("place", ["folder", "missing"])
def test_an_output_that_cannot_be_written_is_refused_before_training(option, place,
                                                                     tmp_path, capsys, data):
    path = tmp_path if place == "folder" else tmp_path / "none" / "f.npz"
    if option == "--log" and place == "folder":
        pytest.skip("--log DIR writes TensorBoard event files there")
    rc, out, err = train(capsys, data, "--steps", 1, option, path)
    assert rc == 1 and option in err and not out


def test_a_failing_log_or_plot_keeps_the_params(tmp_path, capsys, data):
    for option in ("--log", "--plot"):
        save = tmp_path / f"p{option}.npz"
        rc, out, err = train(capsys, data, "--steps", 2, option, "/dev/full", "--save", save)
        assert rc == 1 and f"cannot write {option} '/dev/full'" in err
        assert f"the trained params were written to '{save}'" in err
        with np.load(save) as z:
            assert sorted(z.files) == ["W1", "W2", "b1", "b2"]


def test_validation_data_without_rows_is_refused_up_front(tmp_path, capsys, data):
    np.savez(tmp_path / "v.npz", x=np.zeros((0, 4), np.float32),
             labels=np.zeros(0, np.int64))
    rc, out, err = train(capsys, data, "--val", tmp_path / "v.npz")
    assert rc == 1 and "has no rows" in err and not out


# ---- 6. an output that is an input ----------------------------------------------------

def test_an_output_over_an_input_is_refused(tmp_path, capsys, data):
    before = Path(data).read_bytes()
    rc, _, err = train(capsys, data, "--save", data)
    assert rc == 1 and "is the --data file" in err and Path(data).read_bytes() == before
    prog = tmp_path / "prog.tdsl"
    prog.write_text(Path(MLP).read_text())
    link = tmp_path / "link.jsonl"
    os.symlink(prog, link)
    rc, _, err = adc(capsys, "train", prog, "--data", data, "--log", link)
    assert rc == 1 and "is the program file" in err
    assert prog.read_text() == Path(MLP).read_text()
    rc, _, err = adc(capsys, "compile", prog, "-o", prog)
    assert rc == 1 and "is the program file" in err
    assert prog.read_text() == Path(MLP).read_text()
    rc, _, err = train(capsys, data, "--save", tmp_path / "a.npz", "--checkpoint",
                       tmp_path / "a.npz")
    assert rc == 1 and "--save and --checkpoint both name" in err


def test_a_resumed_run_may_replace_its_checkpoint(tmp_path, capsys, data):
    ck = tmp_path / "ck.npz"
    assert train(capsys, data, "--steps", 1, "--checkpoint", ck)[0] == 0
    rc, out, _ = train(capsys, data, "--steps", 2, "--checkpoint", ck, "--resume", ck)
    assert rc == 0 and "to step 2" in out


# ---- 7. a stopped run leaves its plot alone ------------------------------------------

def test_sigterm_does_not_redraw_the_plot(tmp_path, data):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "keep.png"
    plot.write_bytes(b"an earlier run's plot")
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "adcompiler", "train", MLP, "--data", data,
                             "--batch", "1", "--steps", "100000", "--plot", str(plot),
                             "--log", str(log)], stderr=subprocess.PIPE, text=True)
    try:
        import time
        deadline = time.time() + 120
        while not (log.exists() and log.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in err
    assert plot.read_bytes() == b"an earlier run's plot"


# ---- 8. user mistakes that were internal errors -----------------------------------------

def test_negative_seed_is_a_bad_command_line(capsys, data):
    rc, _, err = train(capsys, data, "--seed", "-1")
    assert rc == 2 and "--seed: expected a whole number from 0 to 2^64 - 1, got -1" in err
    rc, _, err = train(capsys, data, "--seed", str(2 ** 64))
    assert rc == 2 and "got 18446744073709551616" in err
    import adcompiler as adc_
    with pytest.raises(adc_.AdcError, match="the seed must be a whole number"):
        adc_.train(MLP, {"x": np.zeros((4, 4), np.float32), "labels": np.zeros(4, int)},
                   "adam", seed=-1)


def test_a_0d_array_in_the_data(tmp_path, capsys):
    np.savez(tmp_path / "d.npz", x=np.float32(1.5), labels=np.zeros(4, np.int64))
    rc, _, err = adc(capsys, "train", MLP, "--data", tmp_path / "d.npz")
    assert rc == 1 and "array 'x' has shape ()" in err


def _checkpoint(tmp_path, capsys, data, *extra) -> Path:
    ck = tmp_path / "ck.npz"
    assert train(capsys, data, "--steps", 1, "--checkpoint", ck, *extra)[0] == 0
    return ck


@pytest.mark.parametrize("change, fragment", [
    (["--batch", 8], "batches of 4 x 1, this run has 16 rows in batches of 8 x 1"),
    (["--accumulate", 2], "batches of 4 x 1, this run has 16 rows in batches of 4 x 2"),
    (["rows"], "a run of 16 rows in batches of 4 x 1, this run has 8 rows"),
])
def test_resuming_with_another_batch_or_fewer_rows(change, fragment, tmp_path, capsys, data):
    ck = _checkpoint(tmp_path, capsys, data)
    if change == ["rows"]:
        with np.load(data) as z:
            np.savez(tmp_path / "few.npz", x=z["x"][:8], labels=z["labels"][:8])
        rc, _, err = adc(capsys, "train", MLP, "--data", tmp_path / "few.npz", "--batch", 4,
                         "--resume", ck, "--steps", 2)
    else:
        rc, _, err = adc(capsys, "train", MLP, "--data", data, "--batch", 4, "--resume", ck,
                         "--steps", 2, *change)
    assert rc == 1 and fragment in err


def _edit_meta(ck: Path, edit) -> None:
    with np.load(ck) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    edit(meta)
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(ck, **arrays)


@pytest.mark.parametrize("edit, fragment", [
    (lambda m: m.pop("epoch"), "its metadata has no 'epoch' field"),
    (lambda m: m.update(step="3"), "its metadata field 'step' must be a whole number"),
    (lambda m: m.update(step=-5), "its metadata field 'step' must be a whole number, at "
                                  "least 0, got -5"),
    (lambda m: m.update(rng=[1]), "its metadata field 'rng' must be a random generator's"),
    (lambda m: m.update(rng={"bit_generator": "PCG64"}), "field 'rng' is not a state"),
    (lambda m: m["rng"].update(uinteger=-2 ** 63), "field 'rng' is not a state"),
    (lambda m: m.update(scaler={"scale": "x"}), "field 'scaler' must be none or a loss"),
    (lambda m: m["model"].pop("params"), "field 'model' must be the model's signature"),
    (lambda m: m.update(batch=99), "stopped at batch 100 of its epoch"),
])
def test_checkpoint_metadata_edited_by_hand(edit, fragment, tmp_path, capsys, data):
    ck = _checkpoint(tmp_path, capsys, data)
    _edit_meta(ck, edit)
    rc, _, err = train(capsys, data, "--resume", ck, "--steps", 2)
    assert rc == 1 and fragment in err


# ---- 9. silently ignored --------------------------------------------------------------

def test_an_adam_checkpoint_under_sgd_is_refused(tmp_path, capsys, data):
    ck = _checkpoint(tmp_path, capsys, data)
    rc, _, err = train(capsys, data, "--resume", ck, "--steps", 2, "--optimizer", "sgd:lr=0.1")
    assert rc == 1 and "written by optimizer adam, this run uses sgd" in err
    _edit_meta(ck, lambda m: m.pop("optimizer"))   # a checkpoint of an earlier adc
    rc, _, err = train(capsys, data, "--resume", ck, "--steps", 2, "--optimizer", "sgd:lr=0.1")
    assert rc == 1 and "is not one of this run's (saved with another optimizer?)" in err


def test_resume_with_init_is_refused(tmp_path, capsys, data):
    ck = _checkpoint(tmp_path, capsys, data, "--save", tmp_path / "p.npz")
    rc, _, err = train(capsys, data, "--resume", ck, "--init", tmp_path / "p.npz")
    assert rc == 1 and "not both" in err


@pytest.mark.parametrize("text, fragment", [
    ("adam:lr=1,lr=2", "option 'lr' is given twice"),
    ("adamw:wd=0.1,weight_decay=0.2", "'wd' and 'weight_decay' are the same option"),
])
def test_a_repeated_optimizer_option_is_refused(text, fragment, capsys, data):
    rc, _, err = train(capsys, data, "--optimizer", text)
    assert rc == 2 and fragment in err


def test_a_repeated_schedule_option_is_refused(capsys, data):
    rc, _, err = train(capsys, data, "--schedule", "warmup:steps=1,steps=2")
    assert rc == 2 and "option 'steps' is given twice" in err


# ---- 10. refused from the headers, before decompressing -------------------------------

def _bomb(path: Path, rows: int, labels: int) -> None:
    """An .npz whose 'x' inflates to `rows` x 4 floats of zeros from a few kB."""
    def header(shape, descr):
        b = io.BytesIO()
        np.lib.format.write_array_header_1_0(b, {"descr": descr, "fortran_order": False,
                                                 "shape": shape})
        return b.getvalue()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            f.write(header((rows, 4), "<f4"))
            zeros = bytes(1 << 20)
            for start in range(0, rows * 16, len(zeros)):
                f.write(zeros[:min(len(zeros), rows * 16 - start)])
        z.writestr("labels.npy", header((labels,), "<i8") + bytes(8 * labels))


def test_rows_that_disagree_are_refused_from_the_headers(tmp_path, capsys, monkeypatch):
    _bomb(tmp_path / "bomb.npz", 2_000_000, 16)
    import adc_runtime.datafiles as datafiles
    read = []
    real = datafiles.read_npy
    monkeypatch.setattr(datafiles, "read_npy", lambda *a, **k: read.append(1) or real(*a, **k))
    rc, _, err = adc(capsys, "train", MLP, "--data", tmp_path / "bomb.npz")
    assert rc == 1 and "array 'labels' has 16 rows but 'x' has 2,000,000 (read from the " \
                       "file's headers)" in err
    assert not read   # no array's data was decompressed


def test_arrays_past_the_limit_together_are_refused_from_the_headers(tmp_path, capsys):
    np.savez_compressed(tmp_path / "in.npz", x=np.zeros((300_000, 4), np.float32),
                        W1=np.zeros((300_000, 4), np.float32))
    rc, _, err = adc(capsys, "run", MLP, "--inputs", tmp_path / "in.npz", "--max-memory",
                     "8MiB")
    assert rc == 1 and "(its 2 arrays together) would need 9.16 MiB" in err


# ---- 11. messages -------------------------------------------------------------------------

def test_a_data_array_of_the_wrong_width_is_named_by_its_whole_type(tmp_path, capsys):
    np.savez(tmp_path / "d.npz", x=np.zeros((16, 5), np.float32),
             labels=np.zeros(16, np.int64))
    rc, _, err = adc(capsys, "train", MLP, "--data", tmp_path / "d.npz")
    assert rc == 1 and "input 'x' is declared f32[B, 4] but has shape (16, 5)" in err


def test_a_resumed_log_is_read_back_only_from_a_regular_file(tmp_path, capsys, data):
    ck = _checkpoint(tmp_path, capsys, data)
    link = tmp_path / "log.jsonl"
    os.symlink("/dev/zero", link)   # read back to append after the resumed step: forever
    rc, _, err = train(capsys, data, "--resume", ck, "--steps", 2, "--log", link)
    assert rc == 0, err   # written to (the device takes writes), never read
    os.unlink(link)
    link.write_text('{"step": 1}\n1\n')
    rc, _, err = train(capsys, data, "--resume", ck, "--steps", 2, "--log", link)
    assert rc == 1 and f"{link}:2: not a JSON object; will not append to it" in err


# ---- found by the fuzzer ---------------------------------------------------------------

def test_a_data_folder_with_a_device_or_a_damaged_shard(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    x = np.zeros((8, 4), np.float32)
    np.savez_compressed(folder / "a.npz", x=x, labels=np.zeros(8, np.int64))
    raw = bytearray((folder / "a.npz").read_bytes())
    start = raw.index(b"x.npy") + 5 + 16   # into the deflated data of 'x'
    raw[start:start + 8] = b"\xff" * 8
    (folder / "a.npz").write_bytes(bytes(raw))
    rc, _, err = adc(capsys, "train", MLP, "--data", folder)
    assert rc == 1 and "is damaged" in err
    (folder / "a.npz").unlink()
    os.symlink("/dev/zero", folder / "x.npy")
    rc, _, err = adc(capsys, "train", MLP, "--data", folder)
    assert rc == 1 and "'x.npy' is not a regular file" in err


def test_an_npy_header_that_does_not_tokenize(tmp_path, capsys):
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (3,\n"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    member = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
    with zipfile.ZipFile(tmp_path / "in.npz", "w") as z:
        z.writestr("x.npy", member + bytes(12))
    rc, _, err = adc(capsys, "run", MLP, "--inputs", tmp_path / "in.npz")
    assert rc == 1 and "is damaged or truncated" in err
