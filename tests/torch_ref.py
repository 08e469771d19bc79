"""Helpers of the PyTorch parity tests: run a TDSL program through ``adc run`` (in process,
argument parsing, input files and OUT.npz included) and compute the same quantities with
PyTorch: values and gradients by autograd, JVPs by ``torch.func.jvp`` and Hessian-vector
products by double backward."""
from __future__ import annotations

import contextlib
import io
import itertools
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pytest
try:
    import torch
except ImportError:  # the adc side (adc_run, assert_close) works without the reference
    torch = None

from adcompiler.cli import main as adc_main

TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64} if torch else {}
NP_DTYPES = {"f32": np.float32, "f64": np.float64}

_counter = itertools.count()


def adc_run(workdir: Path, src: str, mode: str, inputs: Mapping[str, np.ndarray], *,
            tangents: Mapping[str, np.ndarray] | None = None, dtype: str | None = None,
            fn: str | None = None, wrt: list[str] | None = None) -> dict[str, np.ndarray]:
    """``adc run PROG --mode MODE --inputs IN.npz [--tangents T.npz] --out OUT.npz`` for the
    TDSL text `src`; returns OUT.npz as a dict."""
    k = next(_counter)
    prog, inp = workdir / f"p{k}.tdsl", workdir / f"in{k}.npz"
    prog.write_text(src)
    np.savez(inp, **inputs)
    return adc_run_file(workdir, prog, mode, inp, tangents=tangents, dtype=dtype, fn=fn,
                        wrt=wrt)


def adc_run_file(workdir: Path, prog, mode: str, inputs_file, *,
                 tangents: Mapping[str, np.ndarray] | None = None, dtype: str | None = None,
                 fn: str | None = None, wrt: list[str] | None = None,
                 extra: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """``adc run`` on a program file and an inputs file (.npz or .json), `extra` options
    last; a nonzero exit status fails with adc's stderr."""
    k = next(_counter)
    out = workdir / f"out{k}.npz"
    argv = ["run", str(prog), "--mode", mode, "--inputs", str(inputs_file), "--out", str(out)]
    if tangents is not None:
        tpath = workdir / f"t{k}.npz"
        np.savez(tpath, **tangents)
        argv += ["--tangents", str(tpath)]
    if dtype:
        argv += ["--dtype", dtype]
    if fn:
        argv += ["--fn", fn]
    if wrt:
        argv += ["--wrt", ",".join(wrt)]
    argv += list(extra)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = adc_main(argv)
    assert rc == 0, f"adc {' '.join(argv)} exited {rc}:\n{err.getvalue()}"
    with np.load(out) as z:
        return {key: z[key] for key in z.files}


@pytest.fixture
def strict_dtypes(monkeypatch):
    """Fail when a kernel returns another dtype than the IR declares: the executor would
    convert it silently, hiding an f32 op computed in f64 (or a wrong integer width)."""
    from adc_runtime import executor
    fix = executor.Executor._fix
    seen = []

    def checked(self, r, v):
        want = executor.DTYPES[v.type.dtype]
        if hasattr(r, "dtype") and r.dtype != want:
            seen.append(f"{v.type} computed as {r.dtype}")
        return fix(self, r, v)

    monkeypatch.setattr(executor.Executor, "_fix", checked)
    yield
    assert not seen, f"kernels returned other dtypes than declared: {sorted(set(seen))}"


# ---- torch side -------------------------------------------------------------------------

TorchFn = Callable[[dict], "torch.Tensor | tuple"]


def to_torch(inputs: Mapping[str, np.ndarray], wrt=()) -> dict:
    """Tensors of `inputs` (dtypes kept); those named in `wrt` require grad."""
    out = {}
    for name, a in inputs.items():
        t = torch.from_numpy(np.array(a, copy=True))
        if name in wrt:
            t.requires_grad_(True)
        out[name] = t
    return out


def _results(y) -> tuple:
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


def torch_value_and_grad(fn: TorchFn, inputs, wrt) -> tuple[list[np.ndarray], dict]:
    """Results of `fn` and the gradient of their sum (``backward(ones_like(out))`` for each
    result, as spec §7 seeds non-scalar results) with respect to each input of `wrt`."""
    t = to_torch(inputs, wrt)
    ys = _results(fn(t))
    total = sum(y.sum() for y in ys if y.is_floating_point())
    params = [t[w] for w in wrt]
    gs = torch.autograd.grad(total, params, allow_unused=True) if total.requires_grad \
        else [None] * len(params)
    grads = {w: (torch.zeros_like(p) if g is None else g).numpy(force=True)
             for w, g, p in zip(wrt, gs, params)}
    return [y.numpy(force=True) for y in ys], grads


def torch_jvp(fn: TorchFn, inputs, wrt, tangents) -> tuple[list[np.ndarray], list]:
    """Results of `fn` and their tangents along `tangents` (by input name)."""
    t = to_torch(inputs)
    primals = tuple(t[w] for w in wrt)
    tans = tuple(torch.from_numpy(np.array(tangents[w], copy=True)) for w in wrt)

    def f(*args):
        return _results(fn({**t, **dict(zip(wrt, args))}))

    ys, tys = torch.func.jvp(f, primals, tans)
    return [y.numpy(force=True) for y in ys], [ty.numpy(force=True) for ty in tys]


def torch_hvp(fn: TorchFn, inputs, wrt, tangents) -> tuple[dict, dict]:
    """Gradient of the scalar `fn` and its Hessian-vector product along `tangents`, by
    double backward (missing second-order paths are zeros)."""
    t = to_torch(inputs, wrt)
    params = [t[w] for w in wrt]
    (y,) = _results(fn(t))
    gs = torch.autograd.grad(y, params, create_graph=True, allow_unused=True)
    gs = [torch.zeros_like(p) if g is None else g for g, p in zip(gs, params)]
    vs = [torch.from_numpy(np.array(tangents[w], copy=True)) for w in wrt]
    dot = sum((g * v).sum() for g, v in zip(gs, vs) if g.requires_grad)
    if isinstance(dot, torch.Tensor) and dot.requires_grad:
        hs = torch.autograd.grad(dot, params, allow_unused=True)
    else:
        hs = [None] * len(params)
    hvps = {w: (torch.zeros_like(p) if h is None else h).numpy(force=True)
            for w, h, p in zip(wrt, hs, params)}
    return {w: g.numpy(force=True) for w, g in zip(wrt, gs)}, hvps


# ---- comparison -------------------------------------------------------------------------

TOL = {"f64": dict(rtol=1e-10, atol=1e-12), "f32": dict(rtol=1e-4, atol=1e-5)}


def assert_close(got, want, dtype: str, what: str, scale: float | None = None) -> None:
    """`got` (adc) against `want` (torch): same shape, `dtype` kept for floats, and values
    within the tolerance of `dtype`; the absolute tolerance grows with `scale` (default:
    the largest finite magnitude in `want`, at least 1). NaNs must match NaNs."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != torch {want.shape}"
    if want.dtype.kind == "f":
        assert got.dtype == NP_DTYPES[dtype], f"{what}: dtype {got.dtype}, expected {dtype}"
        if scale is None:
            finite = np.abs(want[np.isfinite(want)])
            scale = max(1.0, float(finite.max(initial=0.0)))
        tol = TOL[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol["rtol"], atol=tol["atol"] * scale,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)
