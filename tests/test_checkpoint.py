"""Checkpoints: round trip without pickle, refusal of pickled files and of other models, and
a write killed half-way (SIGKILL) leaving the previous checkpoint whole."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from adcompiler.training import checkpoint as ckpt
from adcompiler.diagnostics import AdcError

PARAMS = {"W": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.float32)}
STATE = {"step": np.asarray(4, np.int64),
         "exp_avg": {"W": np.ones((2, 3), np.float32), "b": np.full(3, 2, np.float32)}}


def test_round_trip(tmp_path):
    path = str(tmp_path / "c.npz")
    meta = {"model": ckpt.model_signature("f", PARAMS), "step": 4, "rng": {"s": 2 ** 100}}
    ckpt.save(path, PARAMS, STATE, meta)
    params, flat, got = ckpt.load(path)
    assert set(params) == {"W", "b"} and np.array_equal(params["W"], PARAMS["W"])
    state = ckpt.unflatten(STATE, flat, path)
    assert state["step"] == 4 and np.array_equal(state["exp_avg"]["b"], STATE["exp_avg"]["b"])
    assert got["rng"] == {"s": 2 ** 100} and got["step"] == 4
    with np.load(path, allow_pickle=False) as z:   # plain arrays only
        assert sorted(z.files) == ["meta", "param/W", "param/b", "state/exp_avg/W",
                                   "state/exp_avg/b", "state/step"]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_pickled_file_is_refused(tmp_path):
    path = str(tmp_path / "evil.npz")
    np.savez(path, meta=np.array([{"a": 1}], dtype=object))
    with pytest.raises(AdcError, match="pickled objects; refusing"):
        ckpt.load(path)


def test_not_a_checkpoint(tmp_path):
    path = str(tmp_path / "p.npz")
    np.savez(path, W=PARAMS["W"])
    with pytest.raises(AdcError, match="not an adc training checkpoint"):
        ckpt.load(path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(AdcError, match="cannot read checkpoint"):
        ckpt.load(str(tmp_path / "junk.npz"))


def test_other_model_is_named():
    sig = ckpt.model_signature("f", PARAMS)
    meta = {"model": ckpt.model_signature("f", {**PARAMS, "W": np.zeros((3, 3), "f4")})}
    with pytest.raises(AdcError, match=r"another model: param 'W' is float32\[3, 3\] there"):
        ckpt.check_model("c.npz", meta, sig)
    meta = {"model": ckpt.model_signature("g", PARAMS)}
    with pytest.raises(AdcError, match="trains function 'g'"):
        ckpt.check_model("c.npz", meta, sig)
    ckpt.check_model("c.npz", {"model": sig}, sig)


def test_optimizer_state_mismatch_is_named(tmp_path):
    path = str(tmp_path / "c.npz")
    ckpt.save(path, PARAMS, {"step": np.asarray(1)}, {"model": {}})
    _, flat, _ = ckpt.load(path)
    with pytest.raises(AdcError, match="optimizer state 'exp_avg/W' is missing"):
        ckpt.unflatten(STATE, flat, path)


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from adcompiler.training import checkpoint as ckpt
    path = sys.argv[1]
    big = {"W": np.full((512, 512), 7.0, np.float32)}
    real_savez = np.savez
    def slow_savez(f, **arrays):          # half the archive, then hang until killed
        f.write(b"PK\\x03\\x04" + b"\\x00" * 100000)
        f.flush()
        print("writing", flush=True)
        time.sleep(60)
    np.savez = slow_savez
    ckpt.save(path, big, {}, {"step": 2})
""")


def test_sigkill_during_write_keeps_previous(tmp_path):
    path = str(tmp_path / "c.npz")
    ckpt.save(path, PARAMS, STATE, {"step": 1})
    before = open(path, "rb").read()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, path],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert open(path, "rb").read() == before
    params, _, meta = ckpt.load(path)
    assert meta["step"] == 1 and np.array_equal(params["W"], PARAMS["W"])
    # the next save replaces it as usual, the killed write's temporary file aside
    ckpt.save(path, PARAMS, STATE, {"step": 3})
    assert ckpt.load(path)[2]["step"] == 3
