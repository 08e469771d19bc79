"""The bias and activation after a matrix product run as one generated kernel on the GPU: the
product stays a cuBLAS call (``matmul``), and fusion groups the bias add with the activation
that follows it (and, in the reverse program, the activation's adjoint with the cotangent's
product), so a layer is one library call and one generated launch. Checked on the fused
modules and by generated step code on the host stand-in (the kernels' exact source built by
g++), against NumPy's run of the unfused program. Skipped without g++."""
from __future__ import annotations

import numpy as np
import pytest

from cuda_host import GXX, HostKernels, host_cupy

if GXX is None:
    pytest.skip("g++ is not installed: the kernels cannot be built for the host",
                allow_module_level=True)

from adcompiler.cli.compile import compile_program  # noqa: E402
from adcompiler.emit.cuda import ensure_fused, kernel_specs  # noqa: E402
from adc_runtime import cuda as backend, cuda_step  # noqa: E402
from adc_runtime.executor import run_function  # noqa: E402
from cuda_raw_host import with_raw_modules  # noqa: E402

ACTIVATIONS = {"relu": "relu(z)", "gelu": "gelu(z)", "gelu_tanh": 'gelu(z, approximate="tanh")',
               "sigmoid": "sigmoid(z)", "tanh": "tanh(z)", "leaky_relu": "leaky_relu(z)"}
LAYER = """
def f(x: f32[B, 12], param W: f32[12, 20], param b: f32[20]) -> f32 {{
    z = x @ W + b
    h = {act}
    return sum(h * h)
}}
"""


@pytest.fixture(scope="module")
def cache(request, tmp_path_factory):
    c = getattr(request.config, "cache", None)
    return c.mkdir("cuda-host") if c is not None else tmp_path_factory.mktemp("h")


def _program(tmp_path, act, mode):
    path = tmp_path / f"{act}.tdsl"
    path.write_text(LAYER.format(act=ACTIVATIONS[act]))
    return compile_program(str(path), mode)


def _members(op):
    return [o.name for o in op.regions[0].ops if o.operands and o.name != "yield"]


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_the_bias_and_activation_follow_the_product_as_one_group(tmp_path, act):
    comp = _program(tmp_path, act, "forward")
    ops = ensure_fused(comp.module).functions[comp.run_name].body.ops
    k = [op.name for op in ops].index("matmul")
    after = ops[k + 1]
    assert after.name == "fused" and after.operands[0] is ops[k].results[0]
    names = _members(after)
    assert names[0] == "add" and act.split("_")[0] in {n.split("_")[0] for n in names}


@pytest.mark.parametrize("act", ["relu", "gelu_tanh", "sigmoid"])
def test_a_layer_is_one_library_call_and_one_generated_launch(cache, tmp_path, act):
    comp = _program(tmp_path, act, "reverse")
    rng = np.random.default_rng(1)
    data = {"x": rng.standard_normal((5, 12)).astype(np.float32),
            "W": (rng.standard_normal((12, 20)) * 0.3).astype(np.float32),
            "b": rng.standard_normal(20).astype(np.float32)}
    want = run_function(comp.module, comp.run_name, dict(data))[0]
    fused = ensure_fused(comp.module)
    fn = fused.functions[comp.run_name]
    first = [op.name for op in fn.body.ops][:2]
    assert first == ["matmul", "fused"]
    launches: list = []
    cp = with_raw_modules(host_cupy(HostKernels(cache), launches), cache, launches)
    backend._KERNELS.clear()
    specs = kernel_specs(fused)
    got, stats = cuda_step.run_function(fused, comp.run_name, dict(data), specs, cupy=cp)
    # the forward layer: cuBLAS, then the epilogue kernel as the first generated launch
    assert launches[0] == (specs[fn.body.ops[1]].name, "elementwise")
    assert _members(fn.body.ops[1])[0] == "add"
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-5,
                                   atol=2e-5 * np.max(np.abs(w)))
