"""A fused CUDA kernel that fails to compile or to launch is reported at the fused group's
first op, as ``FILE:LINE:COL: error:`` with the source line and a caret: exit status 3 when
the generated kernel is at fault (adc's bug), 1 when the user's part is (a plugin op's
formula in the group, device memory exhausted). Checked on the CuPy stand-in, whose kernels
raise what CuPy raises (its CompileException at the first launch, its argument checks)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import adcompiler as adc
from adcompiler import cli
from adcompiler.cli import commands
from adcompiler.diagnostics import InternalError, RunError
from adcompiler.emit.c import expr, math_fn
from adcompiler.emit.cuda import ensure_fused, kernel_specs
from adcompiler.frontend import compile_source
from adc_runtime import cuda as backend
from cupy_standin import CompileException, OutOfMemoryError, fake_cupy, numpy_compute

SRC = """\
def f(x: f32[3, 4], b: f32[4]) -> (f32[3, 4], f32) {
    y = x * 2.0
    return tanh(y + b), sum(exp(x) * b)
}
"""
DATA = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
        "b": np.arange(4, dtype=np.float32)}
NVRTC = 'adc_f_0.cu(12): error: identifier "tanhh" is undefined\n\n1 error detected'


def failing_cupy(module, elementwise=None, reduction=None):
    """The stand-in, with `elementwise`/`reduction` raising in place of computing."""
    specs = kernel_specs(module)
    by_name = {s.name: op for op, s in specs.items()}
    ew, red = numpy_compute(by_name, [])
    backend._KERNELS.clear()
    return fake_cupy(by_name, [], (elementwise or ew, reduction or red)), specs


def _raise(e):
    def compute(*args):
        raise e
    return compute


def _compile_error(kern, *args):
    raise CompileException(NVRTC, "/* source */", kern.name + ".cu", ("-arch=compute_90",))


def run_cli(tmp_path, monkeypatch, capsys, cp, src=SRC):
    prog = tmp_path / "t.tdsl"
    prog.write_text(src)
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({k: v.tolist() for k, v in DATA.items()}))
    monkeypatch.setattr(commands, "select_device", lambda name: cp)
    code = cli.main(["run", str(prog), "--inputs", str(inputs), "--device", "cuda",
                     "--mode", "forward"])
    return code, capsys.readouterr().err, prog


def test_kernel_that_does_not_compile_is_located_exit_3(tmp_path, monkeypatch, capsys):
    module = ensure_fused(compile_source(SRC, "t.tdsl"))
    cp, _ = failing_cupy(module, elementwise=_compile_error)
    code, err, prog = run_cli(tmp_path, monkeypatch, capsys, cp)
    lines = err.splitlines()
    assert code == 3, err
    assert lines[0] == (f"{prog}:2:11: error: the CUDA kernel adc_f_0 (mul, add, tanh) does "
                        'not compile: adc_f_0.cu(12): error: identifier "tanhh" is undefined; '
                        "this is a bug in adc")
    assert lines[1] == "    y = x * 2.0"
    assert lines[2] == " " * 10 + "^"
    assert "internal error" in lines[3] and "Traceback" not in err


def test_reduction_kernel_failing_at_launch_is_located(tmp_path, monkeypatch, capsys):
    module = ensure_fused(compile_source(SRC, "t.tdsl"))
    cp, _ = failing_cupy(module, reduction=_raise(RuntimeError("cudaErrorLaunchOutOfResources")))
    code, err, prog = run_cli(tmp_path, monkeypatch, capsys, cp)
    assert code == 3
    assert err.startswith(f"{prog}:3:29: error: the CUDA kernel adc_f_1 (exp, mul, sum) failed "
                          "to launch (RuntimeError: cudaErrorLaunchOutOfResources)")
    assert err.splitlines()[2] == " " * 28 + "^"


def test_out_of_device_memory_at_launch_is_a_user_error(tmp_path, monkeypatch, capsys):
    module = ensure_fused(compile_source(SRC, "t.tdsl"))
    cp, _ = failing_cupy(module, elementwise=_raise(OutOfMemoryError(1 << 34, 1 << 33)))
    code, err, prog = run_cli(tmp_path, monkeypatch, capsys, cp)
    assert code == 1
    assert err.startswith(f"{prog}:2:11: error: the CUDA kernel adc_f_0 (mul, add, tanh) ran "
                          "out of device memory: Out of memory allocating 17,179,869,184 bytes")


def test_cupy_argument_check_failing_is_our_bug():
    """A kernel whose declared parameter dtype differs from the array the executor passes:
    CuPy's own check (TypeError) before any launch."""
    module = ensure_fused(compile_source(SRC, "t.tdsl"))
    cp, specs = failing_cupy(module)
    specs = {op: dataclasses.replace(s, in_params=s.in_params.replace("float32 x1",
                                                                      "float64 x1"))
             for op, s in specs.items()}
    with pytest.raises(InternalError) as info:
        backend.run_function(module, "f", DATA, specs, cupy=cp)
    assert (info.value.loc.line, info.value.loc.col) == (2, 11)
    assert "failed to launch (TypeError: Type is mismatched. x1 float32 float64)" in \
        info.value.message


def test_plugin_formula_that_does_not_compile_is_the_users_error(tmp_path, monkeypatch, capsys):
    adc.register_op("soft_abs", lambda types, attrs: types[0],
                    kernel=lambda xp, x: xp.sqrt(x * x + 1), traits=["elementwise"],
                    cuda=expr(lambda w, ct, dt, op, a: f"{math_fn('sqrt', ct)}({a} * {a} + 1"))
    try:
        src = SRC.replace("tanh(y + b)", "soft_abs(y + b)")
        module = ensure_fused(compile_source(src, "t.tdsl"))
        cp, _ = failing_cupy(module, elementwise=_compile_error)
        code, err, prog = run_cli(tmp_path, monkeypatch, capsys, cp, src)
        with pytest.raises(RunError, match="the group contains the plugin op 'soft_abs'"):
            backend.run_function(module, "f", DATA, kernel_specs(module), cupy=cp)
    finally:
        adc.plugins.unregister_op("soft_abs")
    assert code == 1
    assert err.startswith(f"{prog}:2:11: error: the CUDA kernel adc_f_0 (mul, add, soft_abs) "
                          "does not compile")


def test_kernels_that_work_still_run(tmp_path, monkeypatch, capsys):
    module = ensure_fused(compile_source(SRC, "t.tdsl"))
    cp, specs = failing_cupy(module)
    got, _ = backend.run_function(module, "f", DATA, specs, cupy=cp)
    want = np.tanh(DATA["x"] * 2 + DATA["b"]), np.sum(np.exp(DATA["x"]) * DATA["b"])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
