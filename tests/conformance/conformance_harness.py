"""Run TDSL programs through `adc run` (in process or as a subprocess) and compute the
same quantities with PyTorch: values, reverse-mode gradients (the results seeded with ones),
JVPs by `torch.func.jvp` and Hessian-vector products by double backward."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from conformance_cli import HERE, PROGRAMS, adc_out, run_adc  # noqa: F401  (re-exported)


TORCH = {"f16": torch.float16, "f32": torch.float32, "f64": torch.float64}


@dataclass
class Case:
    """One conformance program: its inputs, its PyTorch reimplementation and how to run it.

    `ref(t, F)` gets the inputs as tensors and `F(name)`, the torch dtype a TDSL dtype name
    denotes in this run (every float is f64 under --dtype f64); it returns a tensor or a tuple.
    `wrt` lists the differentiated inputs (the program's params unless `extra` has --wrt)."""
    prog: str
    inputs: Callable[[np.random.Generator], dict]
    ref: Callable
    wrt: list[str]
    extra: list[str] = field(default_factory=list)
    modes: tuple = ("reverse", "reverse32", "jvp", "hvp")
    rtol32: float = 2e-3
    subprocess_: bool = False

    @property
    def path(self) -> Path:
        return PROGRAMS / f"{self.prog}.tdsl"


def _tensors(inputs: dict, f64: bool) -> dict:
    out = {}
    for k, v in inputs.items():
        t = torch.from_numpy(np.array(v))
        if t.is_floating_point() and f64:
            t = t.double()
        out[k] = t
    return out


def _resolver(f64: bool):
    return (lambda name: torch.float64) if f64 else (lambda name: TORCH[name])


def _as_tuple(r):
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


def out_keys(n: int, prefix: str = "") -> list[str]:
    return [prefix + "out"] if n == 1 else [f"{prefix}out{i}" for i in range(n)]


def torch_reference(case: Case, inputs: dict, f64: bool, tangents: dict | None = None):
    """Values, gradients (and, given tangents, JVP tangents and HVPs) by PyTorch."""
    t = _tensors(inputs, f64)
    F = _resolver(f64)
    for name in case.wrt:
        t[name].requires_grad_(True)
    outs = _as_tuple(case.ref(t, F))
    total = sum(o.sum() for o in outs)
    xs = [t[n] for n in case.wrt]
    grads = torch.autograd.grad(total, xs, create_graph=tangents is not None,
                                allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, xs)]
    res = {"values": [o.detach() for o in outs],
           "grads": {n: g.detach() for n, g in zip(case.wrt, grads)}}
    if tangents is not None:
        vs = [torch.from_numpy(tangents[n]) for n in case.wrt]
        dot = sum((g * v).sum() for g, v in zip(grads, vs))
        if dot.requires_grad:
            h = torch.autograd.grad(dot, xs, allow_unused=True)
        else:
            h = [None] * len(xs)
        res["hvp"] = {n: (torch.zeros_like(x) if g is None else g).detach()
                      for n, g, x in zip(case.wrt, h, xs)}

        plain = _tensors(inputs, f64)

        def fn(*ws):
            d = dict(plain)
            d.update(zip(case.wrt, ws))
            return _as_tuple(case.ref(d, F))
        _, tan = torch.func.jvp(fn, tuple(plain[n] for n in case.wrt), tuple(vs))
        res["tangents"] = list(tan)
    return res


def assert_close(got, want, rtol, atol, what):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want.astype(np.float64)), initial=0.0)))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol * scale, err_msg=what)


def check_case(case: Case, mode: str, tmp: Path, seed: int = 0) -> None:
    """Run `case` in one mode (reverse in f64, reverse32 natively, jvp, hvp in f64) and
    compare every OUT.npz key of spec §7 with PyTorch."""
    rng = np.random.default_rng(seed)
    inputs = case.inputs(rng)
    f64 = mode != "reverse32"
    extra = list(case.extra) + (["--dtype", "f64"] if f64 else [])
    tangents = None
    if mode in ("jvp", "hvp"):
        tangents = {n: rng.standard_normal(np.shape(inputs[n])) for n in case.wrt}
    ref = torch_reference(case, inputs, f64, tangents)
    adc_mode = "reverse" if mode == "reverse32" else mode
    got = adc_out(tmp, case.path, adc_mode, inputs, extra=extra, tangents=tangents,
                  subprocess_=case.subprocess_)
    rtol, atol = (1e-9, 1e-11) if f64 else (case.rtol32, case.rtol32 / 10)
    keys = out_keys(len(ref["values"]))
    expect = set(keys)
    for k, v in zip(keys, ref["values"]):
        assert_close(got[k], v, rtol, atol, k)
        if f64:
            assert got[k].dtype in (np.float64, np.bool_, np.int64, np.int32), k
    if mode in ("reverse", "reverse32", "hvp"):
        for n, g in ref["grads"].items():
            expect.add(f"grad_{n}")
            assert_close(got[f"grad_{n}"], g, rtol, atol, f"grad_{n}")
            if not f64:
                assert got[f"grad_{n}"].dtype == np.asarray(inputs[n]).dtype, n
    if mode == "jvp":
        for k, v in zip(out_keys(len(ref["values"]), "tangent_"), ref["tangents"]):
            expect.add(k)
            assert_close(got[k], v, rtol, atol, k)
    if mode == "hvp":
        for n, h in ref["hvp"].items():
            expect.add(f"hvp_{n}")
            assert_close(got[f"hvp_{n}"], h, 1e-8, 1e-10, f"hvp_{n}")
    assert set(got) == expect, f"OUT.npz keys {sorted(got)}, expected {sorted(expect)}"
