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
import warnings
from pathlib import Path

import numpy as np
import pytest

from adcompiler.cli.compile import compile_program
from adcompiler.emit.cuda import REDUCTION, ensure_fused, kernel_specs
from adcompiler.frontend import compile_source
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.verifier import verify
from adcompiler.ops import registry
from adcompiler.passes.fuse import Fuse
from adc_runtime import cuda as backend
from adc_runtime.executor import run_function
from adc_runtime.kernels import PLUGIN_OPS
from cuda_host import GXX, HostKernels, host_cupy, host_kernel
import test_ops_shape
from test_ops_shape import _type
from sample_inputs import sample_inputs

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
def host(request, tmp_path_factory):
    """The host kernels of this session, their libraries cached across sessions in pytest's
    cache (in a temporary directory where the cache is turned off)."""
    cache = getattr(request.config, "cache", None)
    return HostKernels(cache.mkdir("cuda-host") if cache is not None
                       else tmp_path_factory.mktemp("cuda-host"))


def fused_specs(module):
    fused = ensure_fused(module)
    return fused, kernel_specs(fused)


def prebuild(host, specs) -> int:
    """Compile every kernel of `specs` in one g++ run (the launches then find them built);
    returns the number of libraries loaded so far."""
    cp = host_cupy(host)
    backend._KERNELS.clear()  # kernels built on another stand-in may be cached by source
    for spec in specs:
        host_kernel(host, backend.build_kernel(cp, spec), build=False)
    host.build()
    return len(host.libraries)


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
        for mode in ("forward", "reverse"):
            comp = compile_program(str(SAMPLES / f"{name}.tdsl"), mode)
            data = sample_inputs(SAMPLES / f"{name}.tdsl", comp.module[comp.run_name])
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


def _values(dtype: str, table, finite: bool = False) -> np.ndarray:
    """`table`'s values of `dtype`; with `finite`, only floats an i32 holds (a NaN, an
    infinity or an out-of-range float converted to an integer is undefined in C and differs
    between platforms, see the ``cast`` formula)."""
    key = "f" if dtype in FLOATS else dtype
    with np.errstate(over="ignore"):
        v = np.array(table[key]).astype(NP[dtype])
    if finite and dtype in FLOATS:
        v = v[np.isfinite(v) & (np.abs(v.astype(np.float64)) < 2.0 ** 31)]
    return v


def elementwise_ops() -> list[tuple[str, dict]]:
    """(op, attrs) of every elementwise registry op with a CUDA formula (plugins' ops that
    another test registered for a while excepted)."""
    out = []
    for name, opdef in sorted(registry.REGISTRY.items()):
        if opdef.cuda is None or "elementwise" not in opdef.traits or not opdef.operands \
                or name in PLUGIN_OPS:
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
            to_int = op == "cast" and attrs["dtype"] in ("i32", "i64")
            vals = [_values(d, table, finite=to_int) for d in dts]
            args = [v.reshape([-1] + [1] * (n - 1 - k)) for k, v in enumerate(vals)]
            if op == "where":
                args[0] = np.array([True, False, True]).reshape(-1, 1, 1)
            try:  # the type rule decides: refused combinations are not cases
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
    libraries = prebuild(host, [s for *_, specs in programs for s in specs.values()])
    failures = []
    for label, op, attrs, args, module, specs in programs:
        assert len(specs) == 1, label
        try:
            check_case(host, label, op, attrs, args, module, specs)
        except AssertionError as e:
            failures.append(f"{label}: {str(e).strip().splitlines()[-3:]}")
    assert len(host.libraries) == libraries  # every launch found its kernel built
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


# ---- every registry op's forward and adjoint program -----------------------------------

def test_every_registry_op_program_on_host(host):
    """The one-op programs of the GPU tests (test_cuda_gpu.programs: every registry op,
    weighted and differentiated where it has a float result), fused as for the GPU."""
    import test_cuda_gpu
    programs = [(label, module, name, inputs, *fused_specs(module))
                for label, module, name, inputs in test_cuda_gpu.programs()]
    libraries = prebuild(host, [s for *_, specs in programs for s in specs.values()])
    failures, launched = [], 0
    for label, module, name, inputs, fused, specs in programs:
        launches: list = []
        got = on_host(host, fused, specs, name, inputs, launches)
        launched += len(launches)
        want = numpy_run(module, name, inputs)
        try:
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape
                # f64 programs; the f32 ones (extra, collective) sum in CuPy's order
                tight = g.dtype == np.float64
                np.testing.assert_allclose(g, w, rtol=1e-9 if tight else 1e-5,
                                           atol=1e-11 if tight else 1e-6)
        except AssertionError as e:
            failures.append(f"{label}: {str(e).strip().splitlines()[-3:]}")
    assert not failures, "\n".join(failures)
    assert len(host.libraries) == libraries  # every launch found its kernel built
    assert launched > len(programs)  # the adjoints' kernels ran, not just NumPy


# ---- reductions: every op, dtype, axis form and operand layout -------------------------

AXES = [(None, False), (None, True), ([0], False), ([1], True), ([2], False), ([-1], False),
        ([0, 2], False), ([0, 2], True), ([0, 1], False), ([1, 2], False), ([0, 1, 2], False)]
REDUCTION_DTYPES = {"sum": DTYPES, "mean": list(FLOATS), "max": DTYPES[:-1],
                    "min": DTYPES[:-1]}


def _data(dtype: str, shape, rng) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in FLOATS:
        return rng.standard_normal(shape).astype(NP[dtype])
    return rng.integers(-100, 100, shape).astype(NP[dtype])


def reduction_module(op, args, attrs, perm=None):
    """``op(stop_gradient(x), **attrs)``, or of ``x * b`` with a second operand (broadcast);
    `perm` transposes `x` first, so the kernel reads a strided view."""
    body = Block([_type(a) for a in args], [f"a{k}" for k in range(len(args))])
    b = Builder(body)
    x = body.args[0] if perm is None else b.emit("transpose", body.args[0], perm=perm)
    v = b.emit("mul", x, body.args[1]) if len(args) > 1 else b.emit("stop_gradient", x)
    b.ret([b.emit(op, v, **attrs)])
    module = Module({"f": Function("f", body, [body.ops[-1].operands[0].type])})
    verify(module)
    return Fuse(min_ops=1)(module)


def reduction_cases():
    """(label, op, module, args) of every reduction in every dtype and axis form, over
    contiguous, transposed and broadcast operands, size-1, empty and 0-d shapes and sizes
    that take every block stride."""
    rng = np.random.default_rng(3)
    cases = []
    for op, dtypes in REDUCTION_DTYPES.items():
        for dtype in dtypes:
            x = _data(dtype, (3, 4, 5), rng)
            for axis, keep in AXES:
                attrs = {"axis": axis, "keepdims": keep}
                cases.append((f"{op}({dtype}, {axis}, {keep})", op, attrs, [x], None))
            cases.append((f"{op}({dtype}) transposed", op, {"axis": [1], "keepdims": False},
                          [_data(dtype, (5, 3, 4), rng)], [1, 2, 0]))
            cases.append((f"{op}({dtype}) transposed, all", op,
                          {"axis": None, "keepdims": False}, [_data(dtype, (5, 4), rng)],
                          [1, 0]))
            if dtype != "bool":
                cases.append((f"{op}({dtype}) broadcast", op, {"axis": [0], "keepdims": False},
                              [_data(dtype, (6, 1, 5), rng), _data(dtype, (4, 5), rng)],
                              None))
            for shape, axis in (((), None), ((1, 4, 1), [0, 2]), ((3, 700), [1]),
                                ((700, 3), [0]), ((40, 50), None), ((33, 17, 9), [0, 2])):
                cases.append((f"{op}({dtype}, {shape}, {axis})", op,
                              {"axis": axis, "keepdims": False}, [_data(dtype, shape, rng)],
                              None))
            if op in ("sum", "mean"):  # an empty axis: the identity (a mean is 0 / 0)
                for shape, axis in (((0, 3), [0]), ((3, 0), [1])):
                    cases.append((f"{op}({dtype}, {shape}, {axis})", op,
                                  {"axis": axis, "keepdims": False},
                                  [_data(dtype, shape, rng)], None))
    for dtype in FLOATS:  # sum_to: what the adjoint of a broadcast reduces with
        for shape, to in (((3, 4, 5), [4, 1]), ((3, 4, 5), [5]), ((2, 1, 5), [1, 1, 5])):
            cases.append((f"sum_to({dtype}, {shape} -> {to})", "sum_to", {"shape": to},
                          [_data(dtype, shape, rng)], None))
    big = np.full((3, 5), 2 ** 31 - 1, dtype=np.int32)  # an i32 sum wraps as NumPy's
    cases.append(("sum(i32 wrapping)", "sum", {"axis": [0], "keepdims": False}, [big], None))
    x = _data("f32", (4, 6), rng)
    x[1, 2] = np.nan
    for op in ("max", "min"):  # NaN propagates, as in NumPy
        cases.append((f"{op}(f32 with NaN)", op, {"axis": [1], "keepdims": False}, [x], None))
    return cases


def check_reduction(host, label, op, module, specs, args, launches=None) -> None:
    """max, min and integer sums bitwise; float sums and means within their accumulation
    error of the exact result (float for float16 and float32, double for float64), plus
    one rounding to the result's dtype."""
    inputs = {f"a{k}": a for k, a in enumerate(args)}
    # a 0-d operand has nothing to reduce: its group stays elementwise
    assert [s.kind for s in specs.values()] == [REDUCTION] or not args[0].ndim, label
    (got,) = on_host(host, module, specs, "f", inputs, launches)
    (want,) = numpy_run(module, "f", inputs)
    assert got.dtype == want.dtype and got.shape == want.shape, label
    if op in ("max", "min") or want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=label)
        return
    wide = [a.astype(np.float64) for a in args]
    (exact,) = numpy_run(reduction_module(op, wide, _attrs(module), _perm(module)),
                         "f", {f"a{k}": a for k, a in enumerate(wide)})
    (total,) = numpy_run(reduction_module(op, [np.abs(a) for a in wide], _attrs(module),
                                          _perm(module)),
                         "f", {f"a{k}": np.abs(a) for k, a in enumerate(wide)})
    n = max(1, np.prod(np.broadcast_shapes(*(a.shape for a in args))) // max(1, got.size))
    acc = EPS["f64" if want.dtype == np.float64 else "f32"]
    out = EPS[{2: "f16", 4: "f32", 8: "f64"}[want.dtype.itemsize]]
    g = got.astype(np.float64)
    # the map rounds each element to the operand's dtype, the sum adds n roundings of the
    # accumulator, the result is rounded once more
    bound = out * np.abs(exact) + (out + (n + 2) * acc) * np.abs(total)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(exact), err_msg=label)
    ok = np.isnan(exact) | (np.abs(g - exact) <= bound)
    assert ok.all(), f"{label}: got {g[~ok][:3]}, exact {exact[~ok][:3]}"


def _attrs(module):
    red = next(o for o in module["f"].walk() if o.name in REDUCTION_DTYPES or
               o.name == "sum_to")
    return dict(red.attrs)


def _perm(module):
    t = next((o for o in module["f"].walk() if o.name == "transpose"), None)
    return None if t is None else list(t.attrs["perm"])


def test_reductions_in_every_axis_form_dtype_and_layout(host):
    programs = []
    for label, op, attrs, args, perm in reduction_cases():
        module = reduction_module(op, args, attrs, perm)
        programs.append((label, op, module, kernel_specs(module), args))
    libraries = prebuild(host, [s for *_, specs, _ in programs for s in specs.values()])
    failures, launches = [], []
    for label, op, module, specs, args in programs:
        try:
            check_reduction(host, label, op, module, specs, args, launches)
        except AssertionError as e:
            failures.append(f"{label}: {str(e).strip().splitlines()[-3:]}")
    assert len(host.libraries) == libraries  # every launch found its kernel built
    # both of CuPy's paths: CUB for one contiguous input reduced over its last axes
    assert {"reduction", "reduction, CUB"} <= {kind for _, kind in launches}
    assert not failures, "\n".join(failures)


def test_float16_composite_ops_round_once(host):
    """float16 gelu, sigmoid, ... compute their whole formula in float and round once (the
    convention of adcompiler.emit.cuda): gelu(-2.5) is -0.01553 (exactly -0.015524), where
    NumPy's float16 steps give -0.01526."""
    x = np.array([-2.5], dtype=np.float16)
    module = Fuse(min_ops=1)(test_ops_shape.build("gelu", [x], {"approximate": "none"}))
    (got,) = on_host(host, module, kernel_specs(module), "f", {"a0": x})
    (steps,) = numpy_run(module, "f", {"a0": x})
    assert got[0] == np.float16(-0.015524) and steps[0] == np.float16(-0.01526)
