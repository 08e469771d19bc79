"""The generated CUDA kernels' exact source, compiled for the CPU by g++ with CuPy's parameter
binding and reduction order (tests/cuda_host.py), run under ``adc_runtime.cuda`` against the
NumPy executor: every sample's forward and adjoint programs, every registry op's program,
every elementwise op in every dtype combination its type rule accepts, every cast, and the
reductions in every axis form, dtype and memory layout. Arithmetic, comparisons, casts, max
and min must match NumPy bit for bit; sums and math functions within a few ulps (the host's
libm is not NumPy's). Skipped where g++ is not installed. The sweep over every operand
dtype combination with more values is marked ``slow``."""
from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from adcompiler.cli.compile import compile_program
from adcompiler.emit.cuda import REDUCTION, ensure_fused, kernel_specs
from adcompiler.frontend import compile_source
from adcompiler.ir.types import TensorType
from adcompiler.ops import registry
from adcompiler.passes.fuse import Fuse
from adc_runtime import cuda as backend
from adc_runtime.executor import run_function
from cuda_host import GXX, HostKernels, host_cupy
import test_ops_shape

if GXX is None:
    pytest.skip("g++ is not installed: the generated CUDA kernels cannot be built for the "
                "host", allow_module_level=True)

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
NAMES = sorted(p.stem for p in SAMPLES.glob("*.tdsl"))
NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32,
      "i64": np.int64, "bool": np.bool_}
DTYPES = list(NP)
FLOATS = ("f16", "f32", "f64")
EPS = {"f16": 2.0 ** -10, "f32": 2.0 ** -23, "f64": 2.0 ** -52}


@pytest.fixture(scope="session")
def host(request):
    """The host kernels of this session, their libraries cached across sessions."""
    return HostKernels(request.config.cache.mkdir("cuda-host"))


def fused_specs(module):
    fused = ensure_fused(module)
    return fused, kernel_specs(fused)


def prebuild(host, specs) -> None:
    """Compile every kernel of `specs` in one g++ run (the launches then find them built)."""
    cp = host_cupy(host)
    for spec in specs:
        backend.build_kernel(cp, spec)
    host.build()


def on_host(host, fused, specs, name, inputs, launches=None):
    backend._KERNELS.clear()  # kernels of another host build may be cached by source
    cp = host_cupy(host, launches)
    with np.errstate(all="ignore"):
        got, _ = backend.run_function(fused, name, inputs, specs, cupy=cp)
    return got


def numpy_run(module, name, inputs):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_function(module, name, inputs)[0]


def assert_close(got, want, ulps: float | None, label=""):
    """Bitwise (``ulps=None``) or within `ulps` units of the dtype's precision; NaNs and
    infinities in the same places either way."""
    assert got.dtype == want.dtype and got.shape == want.shape, label
    if ulps is None or want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=label)
        return
    eps = EPS[{2: "f16", 4: "f32", 8: "f64"}[want.dtype.itemsize]]
    g, w = got.astype(np.float64), want.astype(np.float64)
    tiny = {2: 6e-8, 4: 1.2e-38, 8: 2.3e-308}[want.dtype.itemsize] * ulps
    np.testing.assert_allclose(g, w, rtol=ulps * eps, atol=tiny, equal_nan=True,
                               err_msg=label)


# ---- samples ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def sample_programs(host):
    """(name, mode) -> (module, fused, specs, run name, inputs); every kernel built at once."""
    out = {}
    for name in NAMES:
        data = json.loads((SAMPLES / f"{name}.json").read_text())
        for mode in ("forward", "reverse"):
            comp = compile_program(str(SAMPLES / f"{name}.tdsl"), mode)
            fused, specs = fused_specs(comp.module)
            out[name, mode] = (comp.module, fused, specs, comp.run_name, data)
    prebuild(host, [s for v in out.values() for s in v[2].values()])
    return out


@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("name", NAMES)
def test_sample_kernels_on_host_match_numpy(host, sample_programs, name, mode):
    module, fused, specs, run_name, data = sample_programs[name, mode]
    launches: list = []
    got = on_host(host, fused, specs, run_name, data, launches)
    want = numpy_run(module, run_name, data)
    ran = {n for n, _ in launches}
    assert ran <= {s.name for s in specs.values()} and (ran or mode == "forward")
    for k, (g, w) in enumerate(zip(got, want)):
        # 64 tanh layers (deep_mlp) amplify one ulp of libm's tanhf into ~1e-4
        np.testing.assert_allclose(g, w, rtol=2e-3 if name == "deep_mlp" else 2e-4,
                                   atol=1e-5, err_msg=f"{name} {mode} output {k}")


# ---- every elementwise op in every dtype combination -----------------------------------

VALUES = {
    "f": [-2049.0, -7.25, -2.5, -1.0, -0.5, -0.0, 0.0, 0.3, 0.5, 1.0, 1.5, 2.5, 3.0, 100.0,
          65504.0, 1e-6, np.nan, np.inf, -np.inf],
    "i32": [-2147483648, -16777217, -2049, -3, -1, 0, 1, 2, 3, 2049, 4097, 16777217,
            2147483647],
    "i64": [-(2 ** 62), -(2 ** 53) - 1, -2049, -3, -1, 0, 1, 2, 3, 2049, 16777217,
            2 ** 53 + 1, 2 ** 62],
    "bool": [False, True],
}
SMALL = {"f": [-2.5, -1.0, -0.0, 0.5, 1.5, np.nan, np.inf], "i32": [-3, 0, 2, 2049],
         "i64": [-3, 0, 2, 2049], "bool": [False, True]}
# ops whose CUDA formula is NumPy's exact operation (IEEE arithmetic, comparisons, selects)
EXACT = {"neg", "abs", "sign", "relu", "square", "reciprocal", "round", "floor", "ceil",
         "add", "sub", "mul", "div", "maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne",
         "where", "clip", "cast", "stop_gradient", "leaky_relu"}
# more than one NumPy operation: float16 computes the whole formula in float and rounds
# once (see adcompiler.emit.cuda), NumPy rounds every step to float16
COMPOSITE = {"sigmoid", "softplus", "gelu", "rsqrt", "bce", "bce_with_logits", "leaky_relu"}


def _values(dtype: str, table) -> np.ndarray:
    key = "f" if dtype in FLOATS else dtype
    with np.errstate(over="ignore"):
        return np.array(table[key]).astype(NP[dtype])


def elementwise_ops() -> list[tuple[str, dict]]:
    """(op, attrs) of every elementwise registry op with a CUDA formula."""
    out = []
    for name, opdef in sorted(registry.REGISTRY.items()):
        if opdef.cuda is None or "elementwise" not in opdef.traits or not opdef.operands:
            continue
        if name == "cast":
            out += [(name, {"dtype": d}) for d in DTYPES]
        elif name == "gelu":
            out += [(name, {"approximate": a}) for a in ("none", "tanh")]
        elif name == "leaky_relu":
            out.append((name, {"slope": 0.2}))
        else:
            out.append((name, {}))
    return out


def dtype_cases(table, combos=None):
    """(label, op, attrs, args) for every op and every operand dtype combination its type
    rule accepts (or those of `combos`: op -> list of dtype tuples); operands broadcast
    against each other so every pair of values meets."""
    cases = []
    for op, attrs in elementwise_ops():
        n = len(registry.REGISTRY[op].operands)
        for dts in (combos or {}).get(op, itertools.product(DTYPES, repeat=n)):
            vals = [_values(d, table) for d in dts]
            args = [v.reshape([-1] + [1] * (n - 1 - k)) for k, v in enumerate(vals)]
            if op == "where":
                args[0] = np.array([True, False, True]).reshape(-1, 1, 1)
            try:
                TensorType  # the type rule decides: refused combinations are not cases
                test_ops_shape.build(op, args, attrs)
            except Exception:
                continue
            cases.append((f"{op}{attrs or ''}({', '.join(dts)})", op, attrs, args))
    return cases


def check_case(host, label, op, attrs, args, module, specs) -> None:
    """The host kernel of ``op(*args)`` against NumPy: bitwise for `EXACT` ops; within one
    ulp of the result (and 8 ulps of the compute type times the operands' magnitude, for
    cancellation) for math functions. A float16 `COMPOSITE` op is held to its convention:
    the float computation (NumPy in float32 on the operands rounded to float16) rounded
    once."""
    inputs = {f"a{k}": a for k, a in enumerate(args)}
    (got,) = on_host(host, module, specs, "f", inputs)
    (want,) = numpy_run(module, "f", inputs)
    if op in EXACT and not (want.dtype == np.float16 and op in COMPOSITE):
        assert_close(got, want, None, label)
        return
    if want.dtype == np.float16 and op in COMPOSITE:
        wide = [a if a.dtype == bool and op == "where" else
                a.astype(np.float16).astype(np.float32) for a in args]
        f32 = test_ops_shape.build(op, wide, attrs)
        (want,) = numpy_run(f32, "f", {f"a{k}": a for k, a in enumerate(wide)})
        with np.errstate(over="ignore"):
            want = want.astype(np.float16)
    compute = "f32" if want.dtype == np.float16 else \
        {4: "f32", 8: "f64"}[want.dtype.itemsize]
    with np.errstate(all="ignore"):
        scale = np.maximum(1.0, np.max(np.abs(np.broadcast_arrays(
            *[np.nan_to_num(a.astype(np.float64), posinf=0, neginf=0) for a in args])),
            axis=0))
    out = {2: "f16", 4: "f32", 8: "f64"}[want.dtype.itemsize]
    ulps = 1.0 if out == "f16" else 4.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{label}: NaNs differ"
    assert np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]), \
        f"{label}: infinities differ"
    err = np.abs(g[finite] - w[finite])
    bound = (ulps * EPS[out] * np.abs(w) + 8 * EPS[compute] * scale)[finite]
    bad = err > bound
    assert not bad.any(), (f"{label}: {int(bad.sum())} values off, e.g. got "
                           f"{g[finite][bad][:3]}, want {w[finite][bad][:3]}")


def run_cases(host, cases):
    programs = []
    for label, op, attrs, args in cases:
        module = Fuse(min_ops=1)(test_ops_shape.build(op, args, attrs))
        programs.append((label, op, attrs, args, module, kernel_specs(module)))
    prebuild(host, [s for *_, specs in programs for s in specs.values()])
    failures = []
    for label, op, attrs, args, module, specs in programs:
        assert len(specs) == 1, label
        try:
            check_case(host, label, op, attrs, args, module, specs)
        except AssertionError as e:
            failures.append(f"{label}: {str(e).strip().splitlines()[-3:]}")
    return failures


def test_float16_arithmetic_rounds_integer_operands_to_float16_first(host):
    """NumPy converts an i32 operand of float16 arithmetic to float16 before adding:
    0.5 + 2049 is 0.5 + 2048 = 2048.5, which rounds to 2048 (2049.5 would give 2050)."""
    cases = [("add", [np.float16(0.5), np.int32(2049)], 2048.0),
             ("sub", [np.int64(2049), np.float16(-0.5)], 2048.0),
             ("maximum", [np.float16(-1.0), np.int32(2051)], 2052.0),
             ("where", [np.bool_(False), np.float16(1.0), np.int32(4097)], 4096.0),
             ("pow", [np.float16(-1.0), np.int32(2049)], 1.0)]  # (-1)**2048
    for op, args, value in cases:
        args = [np.asarray(a).reshape(1) for a in args]
        module = Fuse(min_ops=1)(test_ops_shape.build(op, args))
        (got,) = on_host(host, module, kernel_specs(module), "f",
                         {f"a{k}": a for k, a in enumerate(args)})
        assert got.dtype == np.float16 and got[0] == value, (op, got)
        check_case(host, op, op, {}, args, module, kernel_specs(module))


def test_every_elementwise_op_in_every_dtype_combination(host):
    cases = dtype_cases(SMALL)
    assert len(cases) > 700  # every op, every accepted combination
    failures = run_cases(host, cases)
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_every_elementwise_op_in_every_dtype_combination_on_more_values(host):
    """Integer extremes, float16's largest finite value, tiny values, every pair of them."""
    failures = run_cases(host, dtype_cases(VALUES))
    assert not failures, "\n".join(failures)
