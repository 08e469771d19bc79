"""A run that would go on for ages (a forward or jvp loop of 10^12 steps allocates nothing,
so no size limit refuses it) stops cleanly on SIGINT, SIGTERM and SIGHUP: a one-line
message, no traceback, exit 128 + the signal's number, and its output file neither written
nor touched."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

ENDLESS = ("def f(param x: f32[3]) -> f32 {\n    h = x\n"
           "    for i in range(1000000000000) {\n        h = tanh(h) * x\n    }\n"
           "    return sum(h)\n}\n")
MESSAGES = {signal.SIGINT: "adc: interrupted", signal.SIGTERM: "adc: stopped by SIGTERM",
            signal.SIGHUP: "adc: stopped by SIGHUP"}


def default_dispositions() -> None:
    """In the child: the signals' default actions, whatever this process inherited (a test
    run started in the background ignores SIGINT, nohup SIGHUP, and an ignored signal
    stays ignored: adc leaves it so)."""
    for sig in MESSAGES:
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("mode,sig,existing", [
    ("forward", signal.SIGINT, False), ("forward", signal.SIGTERM, True),
    ("jvp", signal.SIGTERM, False), ("jvp", signal.SIGHUP, True)])
def test_endless_loop_stops_cleanly(mode, sig, existing, tmp_path):
    prog = tmp_path / "endless.tdsl"
    prog.write_text(ENDLESS)
    out = tmp_path / "out.npz"
    if existing:
        out.write_bytes(b"old")
    proc = subprocess.Popen([sys.executable, "-m", "adcompiler", "run", str(prog), "--mode",
                             mode, "--out", str(out)], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=default_dispositions)
    try:
        # the run announces its random inputs just before it starts the loop
        assert "random inputs" in proc.stderr.readline()
        time.sleep(1.0)
        assert proc.poll() is None, "the loop ended by itself"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig and err.rstrip().endswith(MESSAGES[sig]), err
    assert "Traceback" not in err and "error" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["endless.tdsl"] + (["out.npz"] if existing else [])
    assert not existing or out.read_bytes() == b"old"
