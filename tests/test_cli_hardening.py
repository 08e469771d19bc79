"""User mistakes are errors with a message (exit 1, or 2 for a bad command line), never an
internal error: damaged data files, hostile JSON, unwritable outputs, option values out of
range, failing plugins, hostile IR text, sizes beyond the machine's memory, line breaks
that are not newlines, NaN in a run."""
from __future__ import annotations

import errno
import io
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from adcompiler.cli import main

SAMPLES = Path(__file__).parent.parent / "samples"
TINY = str(SAMPLES / "backprop_tiny.tdsl")   # x: f32[2], y: f32, W1, b1, v, b3


def adc(argv, capsys) -> tuple[int, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    return rc, err


def write(path: Path, data) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _npz_bytes(**arrays) -> bytes:
    b = io.BytesIO()
    np.savez(b, **arrays)
    return b.getvalue()


# ---- data files ------------------------------------------------------------------------

def _bad_npz(tmp: Path) -> dict[str, tuple[bytes, str]]:
    good = _npz_bytes(x=np.zeros(2, np.float32))
    obj = io.BytesIO()
    np.save(obj, np.array([1, None], dtype=object), allow_pickle=True)
    pickled = io.BytesIO()
    with zipfile.ZipFile(pickled, "w") as z:
        z.writestr("x.npy", obj.getvalue())
    head = np.lib.format.header_data_from_array_1_0(np.zeros(1))
    head["shape"] = (100000, 100000)
    h = io.BytesIO()
    np.lib.format.write_array_header_1_0(h, head)
    huge = io.BytesIO()
    with zipfile.ZipFile(huge, "w") as z:
        z.writestr("x.npy", h.getvalue())
    short = io.BytesIO()
    with zipfile.ZipFile(short, "w") as z:
        z.writestr("x.npy", _npy(np.zeros(100))[:-8])
    return {"empty": (b"", "is empty"),
            "junk": (b"not a zip file at all", "not an .npz file (not a zip archive"),
            "truncated": (good[:len(good) // 2], "damaged or truncated"),
            "pickled": (pickled.getvalue(), "holds Python objects"),
            "huge": (huge.getvalue(), "would need 74.51 GiB"),
            "short": (short.getvalue(), "truncated")}


def _npy(a) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


@pytest.mark.parametrize("case", ["empty", "junk", "truncated", "pickled", "huge", "short"])
def test_bad_npz_is_a_named_error(case, tmp_path, capsys):
    data, fragment = _bad_npz(tmp_path)[case]
    path = write(tmp_path / "in.npz", data)
    rc, err = adc(["run", TINY, "--inputs", path, "--max-memory", "1GiB"], capsys)
    assert rc == 1 and fragment in err and "in.npz" in err, err
    assert "pickled" not in err or case == "pickled"


def test_inputs_directory_and_unreadable(tmp_path, capsys, monkeypatch):
    (tmp_path / "d.npz").mkdir()
    rc, err = adc(["run", TINY, "--inputs", tmp_path / "d.npz"], capsys)
    assert rc == 1 and "is a directory" in err
    path = write(tmp_path / "in.npz", _npz_bytes(x=np.zeros(2)))
    real_open = open

    def deny(p, *a, **k):  # root reads a 0o000 file anyway: refuse the read itself
        if str(p) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return real_open(p, *a, **k)
    monkeypatch.setattr("builtins.open", deny)
    rc, err = adc(["run", TINY, "--inputs", path], capsys)
    assert rc == 1 and "cannot read inputs file" in err and "Permission denied" in err


@pytest.mark.parametrize("text,fragment", [
    ('{"x": ' + "9" * 5000 + "}", "5000 digits) does not fit"),
    ('{"x": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
    ('{"x": ' + "[" * 65 + "1" + "]" * 65 + "}", "nested deeper than 64"),
    ('{"x": [1, 2], "x": [3, 4]}', "duplicate key 'x'"),
    ('{"x": [NaN, 1]}', "NaN is not a JSON number"),
    ('{"x": [Infinity, 1]}', "Infinity is not a JSON number"),
    ('{"x": [-Infinity, 1]}', "-Infinity is not a JSON number"),
    ('{"x": [1e999, 1]}', "overflows every float dtype"),
    ('{"x": [[1, 2], [3]]}', "not a rectangular array"),
])
def test_hostile_json_is_a_named_error(text, fragment, tmp_path, capsys):
    path = write(tmp_path / "in.json", text)
    rc, err = adc(["run", TINY, "--inputs", path], capsys)
    assert rc == 1 and fragment in err, err


def test_json_syntax_error_located_with_carriage_returns(tmp_path, capsys):
    path = write(tmp_path / "in.json", '{"x":\r [1, 2,]}')
    rc, err = adc(["run", TINY, "--inputs", path], capsys)
    assert rc == 1
    assert f"{path}:2:8: error: invalid JSON" in err
    assert err.splitlines()[1:3] == [" [1, 2,]}", "       ^"], err


# ---- output files ----------------------------------------------------------------------

def test_out_onto_a_directory_or_a_missing_folder_fails_before_the_run(tmp_path, capsys):
    rc, err = adc(["run", TINY, "--out", tmp_path], capsys)
    assert rc == 1 and "--out" in err and "is a directory" in err
    rc, err = adc(["compile", TINY, "-o", tmp_path / "no" / "x.ir"], capsys)
    assert rc == 1 and "does not exist" in err
    rc, err = adc(["run", TINY, "--stats-json", tmp_path, "--remat", "sqrt"], capsys)
    assert rc == 1 and "--stats-json" in err


@pytest.mark.parametrize("code,fragment", [(errno.ENOSPC, "no space left on the device"),
                                           (errno.EACCES, "Permission denied")])
def test_out_write_failures_are_named(code, fragment, tmp_path, capsys, monkeypatch):
    import os

    def fail(f, **arrays):  # what writing to a full device or a read-only folder raises
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(np, "savez", fail)
    rc, err = adc(["run", TINY, "--out", tmp_path / "o.npz"], capsys)
    assert rc == 1 and f"cannot write '{tmp_path / 'o.npz'}': {fragment}" in err, err


# ---- options ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv,fragment", [
    (["run", TINY, "--seed", "-1"], "--seed: expected an integer >= 0"),
    (["check", TINY, "--eps", "0"], "--eps: expected a finite number > 0"),
    (["check", TINY, "--eps=-1e-6"], "--eps: expected a finite number > 0"),
    (["check", TINY, "--eps", "nan"], "--eps: expected a finite number > 0"),
    (["check", TINY, "--rtol", "-1"], "--rtol: expected a finite number >= 0"),
    (["check", TINY, "--rtol", "inf"], "--rtol: expected a finite number >= 0"),
    (["check", TINY, "--max-points", "-1"], "--max-points: expected an integer >= 0"),
    (["remat-curve", TINY, "--points", "0"], "--points: expected an integer >= 1"),
    (["run", TINY, "--plugin", ""], "--plugin: expected a module name"),
    (["run", TINY, "--plugin", "a,,b"], "--plugin: expected a module name"),
    (["run", TINY, "--max-memory", "lots"], "--max-memory: bad memory size"),
    (["run", TINY, "--max-memory", "9" * 400 + "TiB"], "is too large"),
    (["run", TINY, "--remat", "budget:0"], "the budget must be at least 1 byte"),
])
def test_option_out_of_range_is_a_bad_command_line(argv, fragment, capsys):
    rc, err = adc(argv, capsys)
    assert rc == 2 and fragment in err, err


def test_bind_of_a_dimension_the_program_lacks(capsys):
    rc, err = adc(["run", SAMPLES / "mlp.tdsl", "--bind", "Q=3"], capsys)
    assert rc == 1 and "no symbolic dimension 'Q'" in err and "dimensions: B" in err
    rc, _ = adc(["run", SAMPLES / "mlp.tdsl", "--bind", "B=3"], capsys)
    assert rc == 0


# ---- plugins ---------------------------------------------------------------------------

PLUGIN = '''
from adcompiler import register_op
register_op("bad_kernel", lambda t, a: t[0], kernel=lambda xp, x: 1 / 0,
            vjp=lambda b, op, cts: [cts[0]], jvp=lambda b, op, ts: [ts[0]])
register_op("bad_infer", lambda t, a: t[0] + 1, kernel=lambda xp, x: x)
register_op("bad_rules", lambda t, a: t[0], kernel=lambda xp, x: x,
            vjp=lambda b, op, cts: {}["k"], jvp=lambda b, op, ts: __import__("sys").exit(4))
'''


@pytest.mark.parametrize("op,mode,fragment", [
    ("bad_kernel", "reverse", "its kernel failed (ZeroDivisionError"),
    ("bad_infer", "forward", "its type rule failed (TypeError"),
    ("bad_rules", "reverse", "its VJP rule failed (KeyError"),
    ("bad_rules", "jvp", "its JVP rule failed (sys.exit(4))"),
])
def test_failing_plugin_op_is_located(op, mode, fragment, tmp_path, capsys):
    from adcompiler.plugins import unregister_op
    plugin = write(tmp_path / f"plug_{op}_{mode}.py", PLUGIN)
    prog = write(tmp_path / "p.tdsl", f"def f(param x: f32[3]) -> f32 {{\n"
                                      f"    y = {op}(x)\n    return sum(y)\n}}\n")
    try:
        rc, err = adc(["run", prog, "--mode", mode, "--plugin", plugin], capsys)
    finally:
        for name in ("bad_kernel", "bad_infer", "bad_rules"):
            unregister_op(name)
    assert rc == 1 and f"{prog}:2:9: error:" in err and f"plugin op '{op}'" in err, err
    assert fragment in err, err


RAISING_PLUGIN = '''
from adcompiler import register_op


class PluginFault(Exception):
    pass


def raising(exc):
    def fail(*args, **kwargs):
        raise exc
    return fail


for name, exc in [("raise_type", TypeError("bad operand")),
                  ("raise_zero", ZeroDivisionError("division by zero")),
                  ("raise_runtime", RuntimeError("stuck")),
                  ("raise_custom", PluginFault("its own error")),
                  ("raise_exit", SystemExit(7)),
                  ("raise_interrupt", KeyboardInterrupt())]:
    register_op(name, lambda t, a: t[0], kernel=raising(exc),
                vjp=lambda b, op, cts: [cts[0]], jvp=lambda b, op, ts: [ts[0]])
    # the same failures in its type rule, VJP rule and JVP rule
    register_op(name + "_infer", raising(exc), kernel=lambda xp, x: x)
    register_op(name + "_rules", lambda t, a: t[0], kernel=lambda xp, x: x,
                vjp=raising(exc), jvp=raising(exc))
'''
RAISING_OPS = ("raise_type", "raise_zero", "raise_runtime", "raise_custom", "raise_exit",
               "raise_interrupt")


@pytest.fixture
def raising_plugin(tmp_path):
    """A plugin whose kernels raise; unregistered afterwards."""
    from adcompiler.plugins import unregister_op
    plugin = write(tmp_path / "raising_kernels.py", RAISING_PLUGIN)
    yield plugin
    for name in RAISING_OPS:
        for suffix in ("", "_infer", "_rules"):
            unregister_op(name + suffix)
    __import__("sys").modules.pop("raising_kernels", None)


@pytest.mark.parametrize("op,detail", [
    ("raise_type", "TypeError: bad operand"), ("raise_zero", "ZeroDivisionError: division"),
    ("raise_runtime", "RuntimeError: stuck"), ("raise_custom", "PluginFault: its own error"),
    ("raise_exit", "sys.exit(7)")])
@pytest.mark.parametrize("mode", ["forward", "reverse", "jvp", "hvp"])
def test_raising_plugin_kernel_is_located(op, detail, mode, raising_plugin, tmp_path, capsys):
    """Whatever a plugin's kernel raises (but an interrupt) is the user's error at the op's
    line, in a loop too, on every path: exit 1, the op named, the caret under the call."""
    prog = write(tmp_path / "p.tdsl", "def f(param x: f32[3]) -> f32 {\n    h = x\n"
                                      "    for i in range(2) {\n"
                                      f"        h = {op}(h) * x\n    }}\n"
                                      "    return sum(h)\n}\n")
    rc, err = adc(["run", prog, "--mode", mode, "--plugin", raising_plugin], capsys)
    assert rc == 1 and f"{prog}:4:13: error:" in err, err
    assert f"plugin op '{op}': its kernel failed ({detail}" in err, err
    assert f"        h = {op}(h) * x\n            ^\n" in err and "Traceback" not in err, err


@pytest.mark.parametrize("op,detail", [
    ("raise_type", "TypeError: bad operand"), ("raise_zero", "ZeroDivisionError: division"),
    ("raise_runtime", "RuntimeError: stuck"), ("raise_custom", "PluginFault: its own error"),
    ("raise_exit", "sys.exit(7)")])
@pytest.mark.parametrize("suffix,mode,what", [("_infer", "forward", "type rule"),
                                              ("_rules", "reverse", "VJP rule"),
                                              ("_rules", "jvp", "JVP rule")])
def test_raising_plugin_rule_is_located(op, detail, suffix, mode, what, raising_plugin,
                                        tmp_path, capsys):
    prog = write(tmp_path / "p.tdsl", "def f(param x: f32[3]) -> f32 {\n"
                                      f"    y = {op}{suffix}(x)\n    return sum(y)\n}}\n")
    rc, err = adc(["run", prog, "--mode", mode, "--plugin", raising_plugin], capsys)
    assert rc == 1 and f"{prog}:2:9: error:" in err and "Traceback" not in err, err
    assert f"plugin op '{op}{suffix}': its {what} failed ({detail}" in err, err
    assert f"    y = {op}{suffix}(x)\n        ^\n" in err, err


def test_raising_plugin_kernel_through_the_library(raising_plugin, capsys):
    """Through adcompiler.api.program the same failures are `AdcError`s located at the op; an
    interrupt still interrupts (the CLI says so and exits 130)."""
    import adcompiler as adc_lib
    from adcompiler.diagnostics import AdcError
    adc_lib.load_plugins([str(raising_plugin)])
    x = np.ones(3, np.float32)
    for op in RAISING_OPS[:-1]:
        m = adc_lib.compile_source(f"def f(param x: f32[3]) -> f32 {{\n    return sum({op}(x))\n"
                                   "}\n", "lib.tdsl")
        with pytest.raises(AdcError, match=f"plugin op '{op}': its kernel failed") as e:
            adc_lib.function(m)(x)
        assert e.value.loc is not None and (e.value.loc.line, e.value.loc.col) == (2, 16)
    m = adc_lib.compile_source("def f(param x: f32[3]) -> f32 {\n    return sum("
                               "raise_interrupt(x))\n}\n", "lib.tdsl")
    with pytest.raises(KeyboardInterrupt):
        adc_lib.function(m)(x)
    prog = write(raising_plugin.parent / "i.tdsl", "def f(param x: f32[3]) -> f32 {\n"
                                                   "    return sum(raise_interrupt(x))\n}\n")
    rc, err = adc(["run", "--plugin", raising_plugin, "--mode", "forward", prog], capsys)
    assert rc == 130 and "adc: interrupted" in err and "plugin op" not in err, err


def test_plugin_calling_sys_exit(tmp_path, capsys):
    plugin = write(tmp_path / "exits_at_import.py", "import sys\nsys.exit(3)\n")
    rc, err = adc(["run", TINY, "--plugin", plugin], capsys)
    assert rc == 1 and "called sys.exit(3) while being imported" in err


# ---- IR text ---------------------------------------------------------------------------

def _ir(capsys) -> str:
    assert main(["compile", TINY, "--mode", "forward"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("edit,fragment", [
    (lambda s: s.replace(":10:17)", ":" + "9" * 5000 + ":17)"), "5000 digits is too large"),
    (lambda s: s.replace("relu(%1) :", "relu(%1) {a = " + "9" * 5000 + "} :"),
     "5000 digits is too large"),
    (lambda s: s.replace("relu(%1) :", "relu(%1) {a = " + "[" * 100000 + "]" * 100000 + "} :"),
     "nested more than 64 levels"),
])
def test_hostile_ir_text(edit, fragment, tmp_path, capsys):
    path = write(tmp_path / "m.ir", edit(_ir(capsys)))
    rc, err = adc(["run", path], capsys)
    assert rc == 1 and fragment in err and re.match(re.escape(str(path)) + r":\d+:\d+: error", err)


# ---- sizes -----------------------------------------------------------------------------

def _prog(tmp: Path, text: str) -> Path:
    return write(tmp / "p.tdsl", text)


def test_input_beyond_memory_refused_before_drawing(tmp_path, capsys):
    prog = _prog(tmp_path, "def f(param x: f64[100000, 100000]) -> f64 {\n"
                           "    return sum(x)\n}\n")
    rc, err = adc(["run", prog, "--max-memory", "8GiB"], capsys)
    assert rc == 1 and "the random inputs would need 74.51 GiB (80,000,000,000 bytes)" in err
    assert "memory limit of 8.00 GiB (--max-memory)" in err
    rc, err = adc(["run", prog], capsys)  # the default limit: a fraction of this machine
    assert rc == 1 and "74.51 GiB" in err or "memory limit" not in err


def test_rank_64_and_bind_to_2_32(tmp_path, capsys):
    prog = _prog(tmp_path, "def f(param x: f64[" + ", ".join(["2"] * 64) + "]) -> f64 {\n"
                           "    return sum(x)\n}\n")
    rc, err = adc(["run", prog, "--max-memory", "1GiB"], capsys)
    assert rc == 1 and "128.00 EiB" in err
    rc, err = adc(["run", SAMPLES / "mlp.tdsl", "--bind", f"B={2**32}",
                   "--max-memory", "1GiB"], capsys)
    assert rc == 1 and "would need 96.00 GiB" in err


def test_loop_tape_beyond_memory_refused_before_running(tmp_path, capsys):
    prog = _prog(tmp_path, "def f(param x: f64[4]) -> f64 {\n    h = x\n"
                           "    for i in range(1000000000000) {\n        h = sin(h)\n    }\n"
                           "    return sum(h)\n}\n")
    rc, err = adc(["run", prog, "--max-memory", "1GiB"], capsys)
    assert rc == 1 and f"{prog}:4:" in err and "predicted peak live memory" in err
    assert "29.10 TiB" in err, err


@pytest.mark.parametrize("mode", ["forward", "jvp"])
def test_intermediate_beyond_memory_refused_before_running(mode, tmp_path, capsys):
    """An array the program makes (not an input, not a loop's tape) that needs TiB: the
    run's predicted peak is refused, at the op where it is reached, before any allocation."""
    prog = _prog(tmp_path, "def f(param x: f32[2]) -> f32 {\n"
                           "    y = zeros([1000000, 1000000])\n"
                           "    return sum(y) + sum(x)\n}\n")
    rc, err = adc(["run", prog, "--mode", mode, "--max-memory", "1GiB"], capsys)
    assert rc == 1 and f"{prog}:3:" in err and "predicted peak live memory" in err, err
    assert "3.64 TiB (4,000,000,000," in err and "memory limit of 1.00 GiB" in err, err


def test_max_memory_refuses_inputs_then_the_run_then_allows_it(tmp_path, capsys):
    prog = _prog(tmp_path, "def f(param x: f64[1000]) -> f64 {\n    return sum(x)\n}\n")
    rc, err = adc(["run", prog, "--max-memory", "4000"], capsys)
    assert rc == 1 and "the random inputs would need 7.81 KiB (8,000 bytes)" in err
    rc, err = adc(["run", prog, "--max-memory", "8010"], capsys)
    assert rc == 1 and "running 'f_grad' (predicted peak live memory" in err
    assert "(8,016 bytes)" in err, err
    assert adc(["run", prog, "--max-memory", "8016"], capsys)[0] == 0  # exactly enough


# ---- diagnostics -----------------------------------------------------------------------

@pytest.mark.parametrize("sep", ["\f", "\u2028", "\u2029", "\x0b", "\x1c", "\x85"])
def test_caret_on_the_reported_line_with_other_line_breaks(sep, tmp_path, capsys):
    prog = tmp_path / "p.tdsl"
    prog.write_text(f"def f(param x: f64[4]) -> f64 {{\n  # a{sep}b\n  y = x + 1\n"
                    f"  return sum(qq)\n}}\n", encoding="utf-8")
    rc, err = adc(["run", prog], capsys)
    lines = err.splitlines()
    assert rc == 1
    m = re.match(re.escape(str(prog)) + r":(\d+):(\d+): error", lines[0])
    if m[1] == "4":
        assert lines[1] == "  return sum(qq)" and lines[2].index("^") == int(m[2]) - 1
    else:  # the character itself is the error
        assert m[1] == "2" and lines[1].startswith("  # a") and lines[2].index("^") == 5


def test_nan_is_a_located_warning_not_a_numpy_warning(tmp_path, capsys):
    prog = _prog(tmp_path, "def f(param x: f32[3]) -> f32 {\n    y = log(x - 10)\n"
                           "    return sum(y * 2)\n}\n")
    rc, err = adc(["run", prog, "--mode", "forward"], capsys)
    assert rc == 0
    assert f"{prog}:2:9: warning: result 'out' is not finite: anomaly: 'log' in the forward " \
           "sweep produced NaN" in err
    assert "RuntimeWarning" not in err and ".py:" not in err
    rc, err = adc(["run", prog, "--mode", "hvp"], capsys)
    assert rc == 0 and "warning" in err and "RuntimeWarning" not in err


def test_nan_in_inputs_is_named(tmp_path, capsys):
    prog = _prog(tmp_path, "def f(param x: f32[3]) -> f32 {\n    return sum(x)\n}\n")
    np.savez(tmp_path / "in.npz", x=np.array([1, np.nan, 2], np.float32))
    rc, err = adc(["run", prog, "--inputs", tmp_path / "in.npz"], capsys)
    assert rc == 0 and "warning: result 'out' is not finite: anomaly: input 'x' of " \
        "'f_grad' holds NaN" in err


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_endless_program_file_refused(tmp_path, capsys):
    rc, err = adc(["run", "/dev/zero", "--max-memory", "4MiB"], capsys)
    assert rc == 1 and "program '/dev/zero' is a device, not a file" in err
    fifo = tmp_path / "prog.tdsl"   # a pipe is read, up to the limit
    os.mkfifo(fifo)
    pid = os.fork()
    if pid == 0:   # the writer: endless
        try:
            with open(fifo, "wb") as f:
                while True:
                    f.write(b"#" * 65536)
        finally:
            os._exit(0)
    try:
        rc, err = adc(["run", fifo, "--max-memory", "4MiB"], capsys)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert rc == 1 and f"reading program '{fifo}' (read so far) would need" in err


def test_inputs_file_larger_than_the_limit(tmp_path, capsys):
    path = tmp_path / "in.json"
    path.write_text('{"x": [' + "0.5, " * 200000 + "1]}")
    rc, err = adc(["run", TINY, "--inputs", path, "--max-memory", "100KiB"], capsys)
    assert rc == 1 and f"reading inputs file '{path}' would need" in err


def test_message_quoting_a_newline_stays_on_one_line(tmp_path, capsys):
    path = write(tmp_path / "in.json", '{"a\\nb": [1], "a\\nb": [2]}')
    rc, err = adc(["run", TINY, "--inputs", path], capsys)
    assert rc == 1 and err == f"error: {path}: duplicate key 'a\\nb'\n"


@pytest.mark.parametrize("policy", ["sqrt", "revolve:2", "budget:4KiB", "min-memory"])
def test_remat_of_a_second_order_program(policy, tmp_path, capsys):
    """`adc run` of an adjoint program's IR differentiates it again: its reverse loops
    read the same forward loop, which remat rewrites once; results as with no remat."""
    ir = tmp_path / "rnn_grad.ir"
    assert main(["compile", str(SAMPLES / "rnn.tdsl"), "--mode", "reverse", "-o", str(ir)]) == 0
    got = {}
    for p in ("none", policy):
        out = tmp_path / f"{p.replace(':', '_')}.npz"
        rc, err = adc(["run", ir, "--inputs", SAMPLES / "rnn.json", "--remat", p,
                       "--out", out], capsys)
        assert rc == 0, err
        with np.load(out) as z:
            got[p] = {k: z[k] for k in z.files}
    assert got["none"].keys() == got[policy].keys() and len(got["none"]) > 2
    for k, v in got["none"].items():
        np.testing.assert_array_equal(got[policy][k], v, err_msg=k)
