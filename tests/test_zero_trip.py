"""Loops that run no step (``range(T)`` with T = 0, ``range(0)``): alone, nested, and feeding
later loops, in every mode, under every remat policy, as emitted Python and on the CUDA
backend's stand-in, against PyTorch in float64 (T = 2 checks each reference on a loop that
runs). Without PyTorch, remat policies, emitted Python and the stand-in are still compared
with the plain NumPy run. A zero-trip loop's results are its initial carries; nothing that reads them later may
see memory that the buffer plan gave to another value."""
from __future__ import annotations

import numpy as np
import pytest

from torch_ref import (adc_run_file, assert_close, torch, torch_hvp, torch_jvp,  # noqa: E402
                       torch_value_and_grad)
from adcompiler import cli  # noqa: E402
from adcompiler.cli.compile import compile_program  # noqa: E402
from adcompiler.emit.cuda import ensure_fused, kernel_specs  # noqa: E402
from adc_runtime import cuda as backend  # noqa: E402
from adc_runtime.executor import run_function  # noqa: E402

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is the reference")
if torch is not None:
    torch.set_num_threads(1)
SIG = "def f(xs: f32[T, 3], param w: f32[3], param v: f32[3])"

# name -> (TDSL program, the same in torch); the carry of a zero-trip loop is returned
# directly, read by a later loop, or a loop runs no step inside or around another one
PROGRAMS = {
    "direct_scalar": (f"""{SIG} -> f32 {{
    h = sum(w * v)
    for i in range(T) {{
        h = h * sum(xs[i] * w)
    }}
    return h
}}""", lambda t: _direct_scalar(t)),
    "direct_doubled": (f"""{SIG} -> f32 {{
    h = sum(w * v)
    for i in range(T) {{
        h = h * 2.0
    }}
    return h
}}""", lambda t: (t["w"] * t["v"]).sum() * 2.0 ** t["xs"].shape[0]),
    "direct_vector": (f"""{SIG} -> f32[3] {{
    h = sin(w) * v
    for i in range(T) {{
        h = tanh(h + xs[i] * w)
    }}
    return h
}}""", lambda t: _direct_vector(t)),
    "feeds_later": (f"""{SIG} -> f32 {{
    h = w * v
    loss = zeros([])
    for i in range(T) {{
        h = tanh(h + xs[i])
        loss = loss + sum(h)
    }}
    s = zeros([])
    for j in range(3) {{
        s = s + sum(h * v)
        h = sin(h)
    }}
    return s + loss + sum(h)
}}""", lambda t: _feeds_later(t)),
    "inner_zero": (f"""{SIG} -> f32 {{
    h = w * v
    acc = zeros([])
    for j in range(2) {{
        for i in range(T) {{
            h = tanh(h * xs[i] + w)
        }}
        acc = acc + sum(h * h * v)
        h = cos(h)
    }}
    return acc + sum(h)
}}""", lambda t: _inner_zero(t)),
    "outer_zero": (f"""{SIG} -> f32 {{
    h = w * v
    for i in range(T) {{
        for j in range(2) {{
            h = sin(h + xs[i]) * v
        }}
    }}
    s = zeros([])
    for k in range(3) {{
        s = s + sum(h * w)
        h = h * v
    }}
    return s
}}""", lambda t: _outer_zero(t)),
    "literal_zero": (f"""{SIG} -> f32 {{
    h = sum(sin(w))
    for i in range(0) {{
        h = h * 2.0
    }}
    s = h
    for j in range(3) {{
        s = s * h + sum(v)
    }}
    return s + h + sum(xs)
}}""", lambda t: _literal_zero(t)),
}


def _steps(t):
    return range(t["xs"].shape[0])


def _direct_scalar(t):
    h = (t["w"] * t["v"]).sum()
    for i in _steps(t):
        h = h * (t["xs"][i] * t["w"]).sum()
    return h


def _direct_vector(t):
    h = torch.sin(t["w"]) * t["v"]
    for i in _steps(t):
        h = torch.tanh(h + t["xs"][i] * t["w"])
    return h


def _feeds_later(t):
    h, loss = t["w"] * t["v"], 0.0
    for i in _steps(t):
        h = torch.tanh(h + t["xs"][i])
        loss = loss + h.sum()
    s = 0.0
    for _ in range(3):
        s = s + (h * t["v"]).sum()
        h = torch.sin(h)
    return s + loss + h.sum()


def _inner_zero(t):
    h, acc = t["w"] * t["v"], 0.0
    for _ in range(2):
        for i in _steps(t):
            h = torch.tanh(h * t["xs"][i] + t["w"])
        acc = acc + (h * h * t["v"]).sum()
        h = torch.cos(h)
    return acc + h.sum()


def _outer_zero(t):
    h = t["w"] * t["v"]
    for i in _steps(t):
        for _ in range(2):
            h = torch.sin(h + t["xs"][i]) * t["v"]
    s = 0.0
    for _ in range(3):
        s = s + (h * t["w"]).sum()
        h = h * t["v"]
    return s


def _literal_zero(t):
    h = torch.sin(t["w"]).sum()
    s = h
    for _ in range(3):
        s = s * h + t["v"].sum()
    return s + h + t["xs"].sum()


WRT = ["w", "v"]
POLICIES = ["sqrt", "revolve:1", "revolve:3", "budget:4KiB", "min-memory"]


def data(steps: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(steps)
    inputs = {"xs": rng.standard_normal((steps, 3)), "w": rng.standard_normal(3),
              "v": rng.standard_normal(3)}
    return inputs, {k: rng.standard_normal(3) for k in WRT}


def run(tmp_path, name: str, mode: str, steps: int, *extra: str) -> tuple[dict, dict, dict]:
    """``adc run --dtype f64`` of program `name` on T = `steps`: (OUT.npz, inputs,
    tangents)."""
    prog = tmp_path / f"{name}.tdsl"
    prog.write_text(PROGRAMS[name][0])
    inputs, tangents = data(steps)
    inp = tmp_path / f"in{steps}.npz"
    np.savez(inp, **inputs)
    out = adc_run_file(tmp_path, prog, mode, inp, dtype="f64", extra=extra,
                       tangents=tangents if mode in ("jvp", "hvp") else None)
    return out, inputs, tangents


def check_reverse(got: dict, name: str, inputs: dict) -> None:
    """`got` against PyTorch (nothing to check against without it)."""
    if torch is None:
        return
    (want,), grads = torch_value_and_grad(PROGRAMS[name][1], inputs, WRT)
    assert_close(got["out"], want, "f64", f"{name}: out")
    for w in WRT:
        assert_close(got[f"grad_{w}"], grads[w], "f64", f"{name}: grad_{w}")


@needs_torch
@pytest.mark.parametrize("steps", [0, 2])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_mode_matches_torch(tmp_path, name, steps):
    fn = PROGRAMS[name][1]
    got, inputs, tangents = run(tmp_path, name, "forward", steps)
    (want,), _ = torch_value_and_grad(fn, inputs, WRT)
    assert_close(got["out"], want, "f64", f"{name}: forward out")
    got, _, _ = run(tmp_path, name, "reverse", steps)
    check_reverse(got, name, inputs)
    got, _, _ = run(tmp_path, name, "jvp", steps)
    (want,), (tan,) = torch_jvp(fn, inputs, WRT, tangents)
    assert_close(got["out"], want, "f64", f"{name}: jvp out")
    assert_close(got["tangent_out"], tan, "f64", f"{name}: tangent_out")
    if name == "direct_vector":
        return  # hvp needs a scalar result
    got, _, _ = run(tmp_path, name, "hvp", steps)
    grads, hvps = torch_hvp(fn, inputs, WRT, tangents)
    assert_close(got["out"], want, "f64", f"{name}: hvp out")
    for w in WRT:
        assert_close(got[f"grad_{w}"], grads[w], "f64", f"{name}: hvp grad_{w}")
        assert_close(got[f"hvp_{w}"], hvps[w], "f64", f"{name}: hvp_{w}")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_remat_policy_on_zero_trips(tmp_path, name):
    plain, inputs, _ = run(tmp_path, name, "reverse", 0)
    check_reverse(plain, name, inputs)
    for policy in POLICIES:
        got, _, _ = run(tmp_path, name, "reverse", 0, "--bind", "T=0", "--remat", policy)
        assert got.keys() == plain.keys()
        for key in plain:  # a policy never changes the results
            np.testing.assert_array_equal(got[key], plain[key], err_msg=f"{policy}: {key}")


def load_emitted(path) -> dict:
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("steps", [0, 2])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_emitted_python(tmp_path, name, steps):
    prog = tmp_path / f"{name}.tdsl"
    prog.write_text(PROGRAMS[name][0])
    inputs, tangents = data(steps)
    modes = ["reverse"] if name == "direct_vector" else ["reverse", "hvp"]
    for mode in modes:
        out = tmp_path / f"{mode}.py"
        argv = ["compile", str(prog), "--mode", mode, "--dtype", "f64", "--emit", "python",
                "-o", str(out)]
        assert cli.main(argv) == 0
        ns = load_emitted(out)
        executed, _, _ = run(tmp_path, name, mode, steps)  # the executor's run of the same
        if mode == "reverse":
            value, *grads = ns["f_grad"](inputs["xs"], inputs["w"], inputs["v"])
            got = {"out": value, "grad_w": grads[0], "grad_v": grads[1]}
            check_reverse(got, name, inputs)
        else:
            value, *rest = ns["f_hvp"](inputs["xs"], inputs["w"], inputs["v"],
                                       tangents["w"], tangents["v"])
            got = {"out": value, **{f"grad_{w}": rest[k] for k, w in enumerate(WRT)},
                   **{f"hvp_{w}": rest[2 + k] for k, w in enumerate(WRT)}}
            if torch is not None:
                want_g, want_h = torch_hvp(PROGRAMS[name][1], inputs, WRT, tangents)
                for w in WRT:
                    assert_close(got[f"grad_{w}"], want_g[w], "f64", f"{name}: emitted grad_{w}")
                    assert_close(got[f"hvp_{w}"], want_h[w], "f64", f"{name}: emitted hvp_{w}")
        assert got.keys() == executed.keys()
        for key in got:
            assert_close(got[key], executed[key], "f64", f"{name} {mode}: emitted {key}")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cuda_backend_stand_in(tmp_path, name):
    from test_cuda_runtime import fake_cupy
    prog = tmp_path / f"{name}.tdsl"
    prog.write_text(PROGRAMS[name][0])
    comp = compile_program(str(prog), "reverse", dtype="f64")
    module = ensure_fused(comp.module)
    specs = kernel_specs(module)
    cp = fake_cupy({s.name: op for op, s in specs.items()}, [])
    backend._KERNELS.clear()
    inputs, _ = data(0)
    want, _ = run_function(comp.module, comp.run_name, inputs)
    for _ in range(2):  # the second run reuses the first one's arena
        got, _ = backend.run_function(module, comp.run_name, inputs, specs, cupy=cp)
        named = dict(zip(comp.output_names(), got))
        check_reverse(named, name, inputs)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


@needs_torch
def test_library_value_and_grad_on_zero_trips():
    import adcompiler as adc
    src, fn = PROGRAMS["direct_scalar"]
    inputs, _ = data(0)
    step = adc.value_and_grad(src, wrt=WRT)
    for _ in range(2):  # a second call reuses the planned buffers
        value, grads = step(**inputs)
        (want,), want_g = torch_value_and_grad(fn, inputs, WRT)
        assert_close(value, want.astype(np.float32), "f32", "value")
        for k, w in enumerate(WRT):
            assert_close(grads[k], want_g[w].astype(np.float32), "f32", f"grad_{w}")
