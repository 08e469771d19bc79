"""Every sample's fused kernels, forward and adjoint, compiled by CuPy's own pipeline: the
kernel objects CuPy builds from our `KernelSpec`s, the CUDA source CuPy generates for them,
compiled by NVRTC for compute 9.0 (H100) and 7.5. The launch variants are those CuPy
generates at run time: elementwise kernels on contiguous operands (reduced to one dimension),
on strided or broadcast operands (three dimensions, non-contiguous, a bias broadcast with
stride 0) and with 64-bit indices; reductions on the plain path (contiguous and strided,
32- and 64-bit indices) and, for one input, on the CUB block-reduction path CuPy takes for
trailing contiguous axes, one pass and two. No GPU is needed: the architecture is supplied in
place of CuPy's per-device lookup (the only patch), and the compiled module's load, which
needs a driver, is the only step that does not run. CI compiles every sample's kernels in
every variant for compute 9.0 and two samples for 7.5; ``-m slow`` compiles all of them for
both. Skipped where CuPy or NVRTC is not installed."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
try:
    from cupy.cuda import compiler, nvrtc
    nvrtc.getVersion()
    from cupy._core import _cub_reduction, _kernel, _reduction
    from cupy._core._carray import Indexer
    from cupy._core._scalar import CScalar
except Exception as e:  # NVRTC library missing, or a CuPy without these internals
    pytest.skip(f"CuPy's NVRTC pipeline is not usable here ({type(e).__name__}: {e})",
                allow_module_level=True)

from adcompiler.cli.compile import compile_program  # noqa: E402
from adcompiler.emit.cuda import REDUCTION, ensure_fused, kernel_specs  # noqa: E402

pytestmark = pytest.mark.nvrtc

SAMPLES = sorted((Path(__file__).parent.parent / "samples").glob("*.tdsl"))
NDARRAY, INDEXER, SCALAR, POINTER = 1, 2, 3, 4  # CuPy's _ArgKind
ARCHS = ("90", "75")
BLOCK = 512  # CuPy's default reduction block size; CUB's for segments over 2048


@pytest.fixture
def nvrtc_arch(monkeypatch):
    """Supply the architecture to CuPy's compiler (its lookups ask the device) and compile in
    memory; yields a setter."""
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")
    wrapped = compiler._get_arch_for_options_for_nvrtc.__wrapped__
    arch = {"value": ARCHS[0]}
    monkeypatch.setattr(compiler, "_get_arch", lambda: arch["value"])
    monkeypatch.setattr(compiler, "_get_arch_for_options_for_nvrtc",
                        lambda a=None: wrapped(a or arch["value"]))
    return lambda value: arch.__setitem__("value", value)


def _array(dtype, ndim: int = 1, contiguous: bool = True, index32: bool = True):
    return _kernel._ArgInfo(NDARRAY, cupy.ndarray, np.dtype(dtype), ndim, contiguous, index32)


def _scalar(dtype="int32"):
    return _kernel._ArgInfo(SCALAR, CScalar, np.dtype(dtype), 0, True, True)


def _indexer(ndim: int, index32: bool = True):
    return _kernel._ArgInfo(INDEXER, Indexer, None, ndim, True, index32)


# (name, ndim, contiguous, 32-bit indices) of the launches CuPy compiles separately: all
# operands contiguous (CuPy's reduce_dims makes them one-dimensional), strided or broadcast
# (no axis can be merged), and an array of 2**31 elements or more
ELEMENTWISE_VARIANTS = (("elementwise", 1, True, True), ("elementwise strided", 3, False, True),
                        ("elementwise 64-bit", 1, True, False))


_POINTER = _kernel._ArgInfo(POINTER, cupy.cuda.MemoryPointer, None, 0, True, True)


def _dtypes(params) -> tuple:
    return tuple(np.dtype(p.split()[0]).type for p in params.split(", "))


def _build(fn, *args) -> str | None:
    """None when NVRTC compiled the source (loading the module then fails without a
    driver), else the compiler's error lines."""
    try:
        fn(*args)
    except compiler.CompileException as e:
        return "\n".join(line for line in str(e).splitlines() if "error" in line)[:600]
    except (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError):
        return None  # compiled; no driver or device to load it
    return None


def elementwise_builds(spec):
    """(path, build thunk) for each launch variant of an elementwise kernel."""
    kern = cupy.ElementwiseKernel(spec.in_params, spec.out_params, spec.operation, spec.name,
                                  preamble=spec.preamble)
    ins, outs = _dtypes(spec.in_params), _dtypes(spec.out_params)
    _, _, type_map = kern._decide_params_type(ins, outs)
    for path, ndim, contiguous, index32 in ELEMENTWISE_VARIANTS:
        arginfos = tuple(_array(t, ndim, contiguous, index32) for t in ins) \
            + tuple(_array(t, ndim, True, index32) for t in outs) + (_indexer(ndim, index32),)
        yield path, lambda arginfos=arginfos: _kernel._get_elementwise_kernel.__wrapped__(
            arginfos, type_map, kern.params, kern.operation, kern.name, kern.preamble)


def reduction_builds(spec):
    """(path, build thunk) for each path CuPy can take for a reduction kernel."""
    kern = cupy.ReductionKernel(spec.in_params, spec.out_params, spec.operation,
                                spec.reduce_expr, spec.post_map_expr, spec.identity,
                                spec.name, reduce_type=spec.reduce_type,
                                preamble=spec.preamble)
    ins, outs = _dtypes(spec.in_params), _dtypes(spec.out_params)
    _, _, decided = _kernel._decide_params_type(kern.in_params, kern.out_params, ins, outs)
    type_map = _kernel._TypeMap(decided._pairs + (("IndexT", "int32"),))
    params = kern._params
    # CuPy's plain path: reduced axes first (permuted; merged where contiguous), IndexT int64
    # where one output element reduces more than 2**31 - 1 inputs
    for path, ndim, contiguous, index in (("reduction", 2, True, "int32"),
                                          ("reduction strided", 3, False, "int32"),
                                          ("reduction 64-bit", 2, True, "int64")):
        plain = tuple(_array(t, ndim, contiguous, index == "int32") for t in ins) \
            + (_array(outs[0], ndim - 1, True, index == "int32"),
               _indexer(ndim, index == "int32"), _indexer(ndim - 1, index == "int32"),
               _scalar())
        types = _kernel._TypeMap(decided._pairs + (("IndexT", index),))
        yield path, lambda plain=plain, types=types: \
            _reduction._ReductionKernel_get_cached_function.__wrapped__(
                kern.nin, kern.nout, params, plain, types, kern.name, BLOCK, kern.reduce_type,
                kern.identity, kern.map_expr, kern.reduce_expr, kern.post_map_expr,
                kern.preamble, kern.options)
    if kern.nin != 1:
        return  # CuPy takes the CUB path only for one input and one output
    # as cupy/_core/_cub_reduction.pyx (_try_to_call_cub_reduction, _launch_cub) prepares it
    map_expr, post_map = kern.map_expr, kern.post_map_expr
    cub_params = params[0:2] + _kernel._get_param_info("int32 _segment_size", True) \
        + _kernel._get_param_info("int32 _array_size", True)
    cub_types = _kernel._TypeMap(type_map._pairs + (("sizeT", "int32"),))
    old_in, old_out = cub_params[0].name, cub_params[1].name
    if old_in != "in0" or old_out != "out0":
        cub_params = (_kernel._get_param_info("T in0", True)
                      + _kernel._get_param_info("T out0", False) + cub_params[2:])
        map_expr = map_expr.replace(old_in, "in0")
        post_map = post_map.replace(old_out, "out0")
        cub_types = _kernel._TypeMap(cub_types._pairs + (("type_in0_raw", ins[0]),
                                                         ("type_out0_raw", outs[0])))
    cached = _cub_reduction._SimpleCubReductionKernel_get_cached_function.__wrapped__
    full = spec.to_shape is not None or len(spec.axis) == len(spec.in_shape)
    partial = spec.to_shape is not None or len(spec.axis) < len(spec.in_shape)
    if partial:
        one = post_map
        if "mean" in kern.name:
            one = one.replace("_in_ind.size()", "_segment_size")
            one = one.replace("_out_ind.size()", "1.0")
        args = (_array(ins[0]), _array(outs[0]), _scalar(), _scalar())
        yield "cub", lambda: cached(map_expr, kern.reduce_expr, one, kern.reduce_type,
                                    cub_params, args, cub_types, kern.name, BLOCK,
                                    kern.identity, kern.preamble, (), 4)
    if full:
        first = second = post_map
        if "mean" in kern.name:
            first = first.replace("_in_ind.size()", "1.0").replace("_out_ind.size()", "1.0")
            second = second.replace("_in_ind.size()", "_array_size")
            second = second.replace("_out_ind.size()", "1.0")
        args1 = (_array(ins[0]), _POINTER, _scalar(), _scalar())
        args2 = (_POINTER, _array(outs[0]), _scalar(), _scalar())
        yield "cub two-pass", lambda: (
            cached(map_expr, kern.reduce_expr, first, kern.reduce_type, cub_params, args1,
                   cub_types, kern.name + "_pass1", BLOCK, kern.identity, kern.preamble,
                   ("-DFIRST_PASS=1",), 4),
            cached("in0", kern.reduce_expr, second, kern.reduce_type, cub_params, args2,
                   cub_types, kern.name + "_pass2", BLOCK, kern.identity, kern.preamble,
                   ("-DSECOND_PASS=1",), 4))


def builds(spec):
    return reduction_builds(spec) if spec.kind == REDUCTION else elementwise_builds(spec)


def sample_specs(path: Path) -> list:
    """The kernels of the sample's forward and reverse (forward and adjoint) programs."""
    out = []
    for mode in ("forward", "reverse"):
        module = compile_program(str(path), mode).module
        out += list(kernel_specs(ensure_fused(module)).values())
    return out


def _failures(specs, paths=None) -> list[str]:
    failed, seen = [], set()
    for spec in specs:
        for path, thunk in builds(spec):
            key = (path, spec)
            if key in seen or (paths is not None and path not in paths):
                continue
            seen.add(key)
            error = _build(thunk)
            if error is not None:
                failed.append(f"{spec.name} ({path}, {spec.where}): {error}")
    return failed


# the two training-sized samples compile the most kernels (about a minute each on a
# busy machine): with ``-m slow``; their kinds of kernel are the other samples' too
SLOW_SAMPLES = ("char_gpt", "digits_cnn")


@pytest.mark.parametrize("sample", [
    pytest.param(s, marks=pytest.mark.slow) if s.stem in SLOW_SAMPLES else s for s in SAMPLES],
    ids=lambda p: p.stem)
def test_sample_kernels_compile_with_nvrtc(sample, nvrtc_arch):
    specs = sample_specs(sample)
    assert specs, "every sample has fused kernels"
    failed = _failures(specs)
    assert not failed, "\n".join(failed)


OLDER_IN_CI = ("deep_mlp", "transformer_stack")


@pytest.mark.parametrize("sample", [
    s if s.stem in OLDER_IN_CI else pytest.param(s, marks=pytest.mark.slow) for s in SAMPLES],
    ids=lambda p: p.stem)
def test_sample_kernels_compile_for_an_older_architecture(sample, nvrtc_arch):
    """Two samples in CI (the largest kernels); every sample with ``-m slow``."""
    nvrtc_arch(ARCHS[1])
    failed = _failures(sample_specs(sample))
    assert not failed, "\n".join(failed)


# one-input reductions of every kind and reduced type: CuPy's CUB path, one pass (trailing
# axes) and two (every axis); means included (their post-map counts differ there)
CUB_REDUCTIONS = """\
def r(x: f32[B, 256], h: f16[B, 256], d: f64[B, 256], k: i32[B, 256], n: i64[B, 256]) -> (f32[B], f64, f16[B, 1], f32, i32[B], i64, i64, f16[B], f32[B]) {
    return mean(square(x), axis=-1), mean(exp(d)), mean(h * h, axis=1, keepdims=true), sum(x * 2.0), min(k * 2, axis=1), max(n + 1), sum(x > 0.0), max(sigmoid(h), axis=1), mean(cast(h, f32) - 1.0, axis=1)
}
"""


def test_one_input_reductions_compile_on_every_path(nvrtc_arch):
    from adcompiler.frontend import compile_source
    from adcompiler.passes.fuse import Fuse
    module = Fuse(min_ops=1)(compile_source(CUB_REDUCTIONS, "r.tdsl"))
    specs = [s for s in kernel_specs(module).values() if s.kind == REDUCTION]
    paths = {p for s in specs for p, _ in builds(s)}
    assert len(specs) == 9 and paths == {"reduction", "reduction strided", "reduction 64-bit",
                                         "cub", "cub two-pass"}
    assert sum(s.name.endswith("_mean") for s in specs) == 4
    failed = _failures(specs)
    assert not failed, "\n".join(failed)


def test_nvrtc_error_becomes_a_located_run_error(nvrtc_arch):
    """NVRTC's own message for a plugin formula that does not compile, as the backend
    reports it: the group's first op, the kernel, NVRTC's first error line, the plugin op."""
    import adcompiler as adc
    from adcompiler.emit.c import expr, math_fn
    from adcompiler.emit.cuda import ensure_fused
    from adcompiler.frontend import compile_source
    from adc_runtime.cuda import kernel_error
    adc.register_op("soft_abs", lambda types, attrs: types[0],
                    kernel=lambda xp, x: xp.sqrt(x * x + 1), traits=["elementwise"],
                    cuda=expr(lambda w, ct, dt, op, a: f"{math_fn('sqrt', ct)}({a} * {a} + 1"))
    try:
        src = ("def f(x: f32[3, 4], b: f32[4]) -> f32[3, 4] {\n    y = x * 2.0\n"
               "    return soft_abs(y + b)\n}\n")
        (op, spec), = kernel_specs(ensure_fused(compile_source(src, "t.tdsl"))).items()
        (_, build), *_ = elementwise_builds(spec)
        with pytest.raises(compiler.CompileException) as info:
            build()
        err = kernel_error(cupy, op, spec, info.value)
    finally:
        adc.plugins.unregister_op("soft_abs")
    assert type(err).__name__ == "RunError" and (err.loc.line, err.loc.col) == (2, 11)
    assert err.message.startswith("the CUDA kernel adc_f_0 (mul, add, soft_abs) does not "
                                  "compile: default_program(")
    assert 'error: expected a ")"' in err.message
    assert err.message.endswith("the group contains the plugin op 'soft_abs'")
