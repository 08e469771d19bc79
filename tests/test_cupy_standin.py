"""The CuPy stand-in (cupy_standin.py) against the installed `cupy` module, so that the
stand-in cannot drift from CuPy unnoticed: constructor signatures and defaults, the
keywords a kernel call takes, the attributes a kernel object exposes, the errors CuPy
raises before it needs a device (argument count, unknown keywords, kernel and parameter
names, a dtype that differs from a fixed parameter's, axis normalisation), the memory-hook
API and registry, and the exception classes the backend catches. Skipped without CuPy (it
imports without a GPU; CI installs it with the ``nvrtc`` extra)."""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import cupy_standin as standin

cupy = pytest.importorskip("cupy")

IN, OUT = "float32 x0, float16 x1, int64 x2", "float32 y0, bool y1"
REDUCE_ARGS = ("float32 x0, float64 x1", "float64 y0", "adc_map(x0, x1)", "a + b",
               "y0 = a", "0", "adc_r_0")


def documented_signature(cls) -> inspect.Signature:
    """The constructor signature a Cython class documents on its docstring's first line
    (Cython types such as ``str in_params`` dropped)."""
    head = cls.__doc__.strip().splitlines()[0]
    params = re.sub(r"\b(str|int|bint|object|tuple) (?=\w)", "", head[head.index("(") + 1:-1])
    ns: dict = {}
    exec(f"def f({params}): pass", ns)  # the text is CuPy's docstring, not user input
    return inspect.signature(ns["f"])


def documented_keywords(method) -> list[str]:
    """The names listed under ``Args:`` (or ``Keyword Args:``) in a CuPy docstring."""
    doc = method.__doc__
    block = re.split(r"\n\s*(?:Keyword )?Args:\n", doc, maxsplit=1)[1]
    block = re.split(r"\n\s*\n", block, maxsplit=1)[0]
    return re.findall(r"^\s{4,8}(\w+)\s*(?:\(|:)", block, flags=re.M)


@pytest.mark.parametrize("name", ["ElementwiseKernel", "ReductionKernel"])
def test_constructor_signatures_match(name):
    got = inspect.signature(getattr(standin, name))
    want = documented_signature(getattr(cupy, name))
    assert [(p.name, p.default, p.kind) for p in got.parameters.values()] == \
        [(p.name, p.default, p.kind) for p in want.parameters.values()]


# a value each keyword of a kernel call may take without changing anything
NEUTRAL = {"size": -1, "block_size": 128, "stream": None, "out": None, "axis": None,
           "keepdims": False}


def _arrays(params):
    return [np.zeros((2, 3), p.split()[0]) for p in params.split(", ")]


def test_call_keywords_match():
    ew = standin.ElementwiseKernel(IN, OUT, "y0 = x0; y1 = x2 > 0", "adc_f_0")
    ew.compute = lambda ins, outs: None
    for kw in documented_keywords(cupy.ElementwiseKernel.__call__)[1:]:  # after `args`
        ew(*_arrays(IN), **{kw: NEUTRAL[kw]})
    red = standin.ReductionKernel(*REDUCE_ARGS)
    red.compute = lambda *args: None
    for kw in documented_keywords(cupy.ReductionKernel.__call__)[1:]:
        red(*_arrays(REDUCE_ARGS[0]), **{kw: NEUTRAL[kw]})


def _params(ps) -> list:
    return [(p.name, p.dtype, p.ctype, p.raw, p.is_const) for p in ps]


# CuPy's debugging properties (source of compiled kernels), which the stand-in has not
DEBUG_ONLY = {"cached_code", "cached_codes"}


@pytest.mark.parametrize("name, args", [
    ("ElementwiseKernel", (IN, OUT, "y0 = x0; y1 = x2 > 0", "adc_f_0")),
    ("ElementwiseKernel", (IN, OUT, "y0 = x0; y1 = x2 > 0", "adc_f_0", False, "// p", True,
                           True)),
    ("ReductionKernel", REDUCE_ARGS),
    ("ReductionKernel", REDUCE_ARGS + ("double", False, "// p", ("-O3",))),
    ("ReductionKernel", ("T x0", "T y0", "x0", "max(a, b)", "y0 = a", None, "adc_t"))])
def test_kernel_attributes_match(name, args):
    real, ours = getattr(cupy, name)(*args), getattr(standin, name)(*args)
    public = {a for a in dir(real) if not a.startswith("_")} - DEBUG_ONLY
    assert public <= set(dir(ours)), public - set(dir(ours))
    for attr in sorted(public | {"_params"} & set(dir(real))):
        got, want = getattr(ours, attr), getattr(real, attr)
        if attr in ("in_params", "out_params", "params", "_params") and want is not None:
            got, want = _params(got), _params(want)
        assert got == want, attr


def _error(fn):
    try:
        fn()
    except Exception as e:
        return type(e).__name__, str(e)
    return None


MISUSES = {
    "elementwise argument count": lambda m: m.ElementwiseKernel(IN, OUT, "", "k")(1),
    "elementwise keyword": lambda m: m.ElementwiseKernel(IN, OUT, "", "k")(1, 2, 3, foo=1),
    "elementwise block size": lambda m: m.ElementwiseKernel(IN, OUT, "", "k")(
        1, 2, 3, block_size=0),
    "kernel name": lambda m: m.ElementwiseKernel(IN, OUT, "", "adc f"),
    "parameter named i": lambda m: m.ElementwiseKernel("float32 i", OUT, "", "k"),
    "parameter syntax": lambda m: m.ElementwiseKernel("float32", OUT, "", "k"),
    "parameter keyword": lambda m: m.ElementwiseKernel("const float32 x", OUT, "", "k"),
    "reduction argument count": lambda m: m.ReductionKernel(*REDUCE_ARGS)(1, 2, 3, 4),
    "reduction keyword": lambda m: m.ReductionKernel(*REDUCE_ARGS)(1, 2, bar=2),
}


@pytest.mark.parametrize("misuse", sorted(MISUSES))
def test_errors_before_the_device_match(misuse):
    want = _error(lambda: MISUSES[misuse](cupy))
    assert want is not None
    assert _error(lambda: MISUSES[misuse](standin)) == want


def test_type_and_axis_rules_match():
    from cupy._core import _kernel, _reduction
    real = cupy.ElementwiseKernel(IN, OUT, "", "k")
    ours = standin.ElementwiseKernel(IN, OUT, "", "k")
    for dtypes in [(np.float32, np.float16, np.int64), (np.float64, np.float16, np.int64),
                   (np.float32, np.float16, np.int32)]:
        want = _error(lambda: real._decide_params_type(tuple(np.dtype(t) for t in dtypes),
                                                       ()))
        got = _error(lambda: standin._decide_types(
            ours.in_params, ours.out_params, [np.zeros(2, t) for t in dtypes], []))
        assert got == want, dtypes
    assert _kernel._get_param_info("float16 x", True)[0].ctype == \
        standin.ParameterInfo("float16 x", True).ctype
    for axis, ndim in [(None, 3), (1, 2), (-1, 3), ((-1, 0), 3), ([2, 0], 3), ((0, -2), 2),
                       (3, 2), ((), 2)]:
        want = _error(lambda: _reduction._get_axis(axis, ndim))
        got = _error(lambda: standin._get_axis(axis, ndim))
        assert got == want, (axis, ndim)
        if want is None:
            assert standin._get_axis(axis, ndim) == _reduction._get_axis(axis, ndim)[0]


def test_ctype_names_match():
    from cupy._core._scalar import get_typename
    for name, ctype in standin.CTYPE.items():
        assert get_typename(np.dtype(name)) == ctype


def test_memory_hook_api_matches():
    real = cupy.cuda.MemoryHook
    callbacks = {n for n in dir(real) if n.endswith("process")}
    assert callbacks == {n for n in dir(standin.MemoryHook) if n.endswith("process")}
    assert standin.MemoryHook.name == real.name == "MemoryHook"
    # the keywords the backend's hook reads are the ones CuPy passes
    assert {"mem_ptr", "mem_size"} <= set(documented_keywords(real.malloc_postprocess))
    assert {"mem_ptr", "mem_size"} <= set(documented_keywords(real.free_postprocess))
    for module in (cupy, standin.fake_cupy({}, [])):
        hooks = module.cuda.memory_hook.get_memory_hooks
        with module.cuda.MemoryHook() as hook:
            assert hooks()["MemoryHook"] is hook
            second = _error(lambda: module.cuda.MemoryHook().__enter__())
        assert not hooks()
        assert second == ("KeyError", "'memory hook MemoryHook already exists'")


def test_exception_classes_match():
    real = cupy.cuda.compiler.CompileException
    assert inspect.signature(standin.CompileException.__init__) == \
        inspect.signature(real.__init__)
    e, f = real("msg", "src", "k", ()), standin.CompileException("msg", "src", "k", ())
    assert str(e) == str(f) and (e.source, e.name) == (f.source, f.name)
    oom = cupy.cuda.memory.OutOfMemoryError
    assert issubclass(oom, MemoryError) and issubclass(standin.OutOfMemoryError, MemoryError)
    for args in [(1 << 34, 1 << 33), (10_000_000, 2_000_000, 5_000_000)]:
        assert str(standin.OutOfMemoryError(*args)) == str(oom(*args))


def test_standin_namespace_exists_in_cupy():
    """Every CuPy-only name the stand-in module provides is a name of CuPy too."""
    cp = standin.fake_cupy({}, [])
    assert callable(cupy.asnumpy) and callable(cupy.ElementwiseKernel)
    for path in ["cuda.MemoryHook", "cuda.get_current_stream",
                 "cuda.memory_hook.get_memory_hooks", "cuda.memory_hook.MemoryHook",
                 "cuda.compiler.CompileException", "cuda.memory.OutOfMemoryError"]:
        real, ours = cupy, cp
        for part in path.split("."):
            real, ours = getattr(real, part), getattr(ours, part)
    assert set(vars(cp.cuda)) == {p.split(".")[0] for p in [
        "MemoryHook", "get_current_stream", "memory_hook", "compiler", "memory"]}
