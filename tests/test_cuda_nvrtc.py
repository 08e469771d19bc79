"""Every sample's fused kernels, forward and adjoint, compiled by CuPy's own pipeline: the
kernel objects CuPy builds from our `KernelSpec`s, the CUDA source CuPy generates for them
(contiguous elementwise kernels; reductions on the plain path and, for one input, on the CUB
block-reduction path CuPy takes for trailing contiguous axes, one pass and two), compiled by
NVRTC for compute 9.0 and 7.5. No GPU is needed: the architecture is supplied in place of
CuPy's per-device lookup, and the compiled module's load, which needs a driver, is the only
step that does not run. Skipped where CuPy or NVRTC is not installed."""
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


def _array(dtype, ndim: int = 1):
    return _kernel._ArgInfo(NDARRAY, cupy.ndarray, np.dtype(dtype), ndim, True, True)


def _scalar(dtype="int32"):
    return _kernel._ArgInfo(SCALAR, CScalar, np.dtype(dtype), 0, True, True)


def _indexer(ndim: int):
    return _kernel._ArgInfo(INDEXER, Indexer, None, ndim, True, True)


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
    """(path, build thunk) for a contiguous launch of an elementwise kernel (CuPy reduces
    contiguous operands to one dimension)."""
    kern = cupy.ElementwiseKernel(spec.in_params, spec.out_params, spec.operation, spec.name,
                                  preamble=spec.preamble)
    ins, outs = _dtypes(spec.in_params), _dtypes(spec.out_params)
    _, _, type_map = kern._decide_params_type(ins, outs)
    arginfos = tuple(_array(t) for t in ins + outs) + (_indexer(1),)
    yield "elementwise", lambda: _kernel._get_elementwise_kernel.__wrapped__(
        arginfos, type_map, kern.params, kern.operation, kern.name, kern.preamble)


def reduction_builds(spec):
    """(path, build thunk) for each path CuPy can take for a reduction kernel."""
    kern = cupy.ReductionKernel(spec.in_params, spec.out_params, spec.operation,
                                spec.reduce_expr, spec.post_map_expr, spec.identity,
                                spec.name, reduce_type=spec.reduce_type,
                                preamble=spec.preamble)
    ins, outs = _dtypes(spec.in_params), _dtypes(spec.out_params)
    _, _, type_map = _kernel._decide_params_type(kern.in_params, kern.out_params, ins, outs)
    type_map = _kernel._TypeMap(type_map._pairs + (("IndexT", "int32"),))
    params = kern._params
    plain = tuple(_array(t, 2) for t in ins) + (_array(outs[0], 1), _indexer(2),
                                                  _indexer(1), _scalar())
    yield "reduction", lambda: _reduction._ReductionKernel_get_cached_function.__wrapped__(
        kern.nin, kern.nout, params, plain, type_map, kern.name, BLOCK, kern.reduce_type,
        kern.identity, kern.map_expr, kern.reduce_expr, kern.post_map_expr, kern.preamble,
        kern.options)
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


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_sample_kernels_compile_with_nvrtc(sample, nvrtc_arch):
    specs = sample_specs(sample)
    assert specs, "every sample has fused kernels"
    failed = _failures(specs)
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("sample", ["deep_mlp", "transformer_stack"])
def test_sample_kernels_compile_for_an_older_architecture(sample, nvrtc_arch):
    nvrtc_arch(ARCHS[1])
    failed = _failures(sample_specs(Path(__file__).parent.parent / "samples" /
                                    f"{sample}.tdsl"))
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
    assert len(specs) == 9 and paths == {"reduction", "cub", "cub two-pass"}
    assert sum(s.name.endswith("_mean") for s in specs) == 4
    failed = _failures(specs)
    assert not failed, "\n".join(failed)
