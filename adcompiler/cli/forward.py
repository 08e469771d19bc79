"""CLI pieces for forward mode and second derivatives, wired into `cli` by the lead:

* `compile_forward`: FILE compiled for ``jvp`` (adds ``<fn>_jvp``) or ``hvp`` (adds
  ``<fn>_grad`` and ``<fn>_hvp``), for ``adc compile --mode jvp|hvp`` and ``adc run``;
* `add_tangents_argument` and `run_main`: ``adc run --mode jvp|hvp --tangents T.npz``,
  writing the OUT.npz keys of spec §7 (``out``/``out0``..., then ``tangent_out``/
  ``tangent_out0``... for jvp, or ``grad_<input>`` and ``hvp_<input>`` for hvp);
* `add_jacobian_command` and `jacobian_main`: ``adc jacobian FILE``;
* `check_forward`: the forward-mode and dot-product columns of ``adc check``.

``T.npz`` (or ``.json``) holds one array per differentiated input, under the input's own
name; without ``--wrt``, the inputs it names are the differentiated ones. Without
``--tangents`` the tangents are seeded standard normal draws.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np

from .compile import (DEFAULT_PASSES, DERIVATIVE_PREP, Compiled, prepare_module,
                          resolve_wrt)
from ..diagnostics import AdcError
from ..ir.core import Block, Function
from ..memory.limit import check_run_fits
from .nonfinite import warn_nonfinite

FORWARD_MODES = ("jvp", "hvp")


@dataclass
class ForwardCompiled(Compiled):
    """A program compiled for ``jvp`` or ``hvp``; `run_fn` takes the primal inputs then
    one tangent per input of `wrt` (named by `tangent_inputs`)."""

    mode: str = "jvp"

    @property
    def tangent_inputs(self) -> list[str]:
        return self.run_fn.arg_names[len(self.primal.args):]

    def output_names(self) -> list[str]:
        n = self.n_results
        outs = ["out"] if n == 1 else [f"out{k}" for k in range(n)]
        if self.mode == "jvp":
            return outs + ["tangent_" + o for o in outs]
        return outs + [f"grad_{w}" for w in self.wrt] + [f"hvp_{w}" for w in self.wrt]


def compile_forward(path: str, mode: str, fn_name: str | None = None,
                    wrt: list[str] | None = None, passes: str | None = None,
                    dtype: str | None = None, bind: dict | None = None,
                    print_ir_after_all: bool = False,
                    tangents: tuple[str, list[str]] | None = None) -> ForwardCompiled:
    """Load `path` and run ``PASSES,scan-inputs,jvp{...},PASSES`` (or ``hvp{...}``) on it.

    `tangents` is ``(file, names)`` of a tangent file: without `wrt`, the inputs it names
    are the differentiated ones."""
    from ..passes.pipeline import run_pipeline

    if mode not in FORWARD_MODES:
        raise ValueError(mode)
    module, fn = prepare_module(path, fn_name, dtype, bind)
    notes: list[str] = []
    if tangents is not None and not wrt:
        where, names = tangents
        for key in names:
            if key not in fn.arg_names:
                raise AdcError(f"{where}: tangent '{key}' is not an input of '{fn.name}' "
                               f"(inputs: {', '.join(fn.arg_names)})")
        ints = [k for k in names if not fn.arg(k).type.is_float]
        for key in ints:
            notes.append(f"{where}: ignoring the tangent of '{key}', an input of type "
                         f"{fn.arg(key).type} (integers have no derivative)")
        wrt = [k for k in names if k not in ints] or None
    wrt = resolve_wrt(fn, wrt, notes)
    passes = DEFAULT_PASSES if passes is None else passes.strip()
    derive = f"{mode}{{wrt={','.join(wrt)} fn={fn.name}}}"
    pipeline = ",".join(p for p in (passes, DERIVATIVE_PREP, derive, passes) if p)
    module = run_pipeline(module, pipeline, print_ir_after_all=print_ir_after_all)
    return ForwardCompiled(module, fn, f"{fn.name}_{mode}", wrt, notes, mode)


def add_tangents_argument(parser) -> None:
    parser.add_argument("--tangents", metavar="T.npz",
                        help="jvp and hvp: one tangent array per differentiated input, "
                             "by input name (.npz or .json; default: seeded random)")


def load_tangents(comp: ForwardCompiled, path: str | None, binder, seed: int = 0) -> dict:
    """The tangent inputs of `comp.run_fn`, read from `path` or drawn from `seed`."""
    from ..files.inputs import check_inputs, load_data
    prim = comp.module[comp.primal.name] if comp.primal.name in comp.module else comp.primal
    types = [prim.arg(w).type for w in comp.wrt]
    if path is None:
        rng = np.random.default_rng(seed + 1)
        from adc_runtime.executor import resolve_dim
        arrays = {w: rng.standard_normal([resolve_dim(d, binder.env) for d in t.shape])
                  .astype(_np_dtype(t.dtype)) for w, t in zip(comp.wrt, types)}
    else:
        data = load_data(path)
        for key in list(data):
            if key in prim.arg_names and not prim.arg(key).type.is_float:
                del data[key]     # integer inputs have no tangent (compile_forward notes it)
            elif key not in comp.wrt:
                what = "is not differentiated" if key in prim.arg_names else "is not an input"
                raise AdcError(f"{path}: tangent '{key}' {what} (differentiated inputs: "
                               f"{', '.join(comp.wrt)})")
        view = Function(prim.name, Block(types, list(comp.wrt)), [])
        arrays = check_inputs(view, data, path, binder)
    return {t: arrays[w] for t, w in zip(comp.tangent_inputs, comp.wrt)}


def _np_dtype(dtype: str):
    from adc_runtime.kernels import DTYPES
    return DTYPES[dtype]


def _inputs(args, fn, binder, inputs_for):
    from ..files.inputs import random_inputs, read_inputs
    if inputs_for is not None:
        return inputs_for(args, fn, binder)
    if getattr(args, "inputs", None):
        return read_inputs(fn, args.inputs, binder, getattr(args, "seed", 0))
    return random_inputs(fn, binder, getattr(args, "seed", 0))[0]


def run_main(args, inputs_for=None) -> int:
    """``adc run --mode jvp|hvp``: print a summary and write ``--out``. `inputs_for(args, fn,
    binder)` loads or draws the primal inputs (default: --inputs, else seeded random)."""
    from adc_runtime.executor import run_function
    from .anomaly import anomaly_executor
    from ..files.inputs import DimBinder
    from ..files.paths import split_outputs
    from ..files.write import save_npz
    from .table import summary
    from ..files.inputs import load_data
    t_path = getattr(args, "tangents", None)
    if t_path and not os.path.isfile(t_path):
        raise AdcError(f"tangents file '{t_path}' does not exist")
    comp = compile_forward(args.file, args.mode, args.fn, args.wrt,
                           dtype=getattr(args, "dtype", None),
                           tangents=(t_path, list(load_data(t_path))) if t_path else None)
    for n in comp.notes:
        print(f"adc: {n}", file=sys.stderr)
    binder = DimBinder(getattr(args, "bind", None) or {})
    prim = comp.module[comp.primal.name]
    inputs = _inputs(args, prim, binder, inputs_for)
    tangents = load_tangents(comp, t_path, binder, getattr(args, "seed", 0))
    if not t_path:
        print(f"adc: no --tangents given: using random tangents (seed "
              f"{getattr(args, 'seed', 0)}) for {', '.join(comp.wrt)}", file=sys.stderr)
    check_run_fits(comp.module, comp.run_name, binder.env)
    outs, stats = run_function(comp.module, comp.run_name, {**inputs, **tangents},
                               dims=binder.env, executor=anomaly_executor(
                                   getattr(args, "detect_anomaly", False)))
    named = list(zip(comp.output_names(), [np.asarray(o) for o in outs]))
    warn_nonfinite(comp.module, comp.run_name, {**inputs, **tangents}, binder.env, named)
    named = split_outputs(comp.module[comp.run_name], named)   # one row per leaf
    print(summary(named))
    print(f"\npeak live memory: {stats['peak_bytes']:,} bytes")
    if getattr(args, "out", None):
        save_npz(args.out, dict(named))
    return 0


def add_jacobian_command(subparsers, common) -> None:
    """``adc jacobian FILE [--jacobian-mode auto|forward|reverse] [--dtype] [--out J.npz]``;
    `common(p)` adds --fn, --wrt, --bind, --inputs, --seed."""
    p = subparsers.add_parser(
        "jacobian", help="compute the full Jacobian, in forward or reverse mode",
        description="Compute d(results)/d(inputs) at the inputs; forward mode when the "
                    "differentiated inputs have no more elements than the float results, "
                    "else reverse mode. Writes blocks jac_<result>_<input> of shape "
                    "result.shape + input.shape.")
    common(p)
    p.add_argument("--jacobian-mode", choices=("auto", "forward", "reverse"), default="auto",
                   help="force a mode (default auto: by counting elements)")
    p.add_argument("--dtype", choices=("f16", "f32", "f64"),
                   help="make every float in the program this type, e.g. f64")
    p.add_argument("--out", metavar="J.npz", help="write the Jacobian blocks")
    p.set_defaults(func=jacobian_main, parser=p)


def jacobian_main(args, inputs_for=None) -> int:
    from .compile import compile_program
    from ..files.inputs import DimBinder
    from ..files.write import save_npz
    from .table import summary
    from ..api.jacobian import jacobian
    comp = compile_program(args.file, "forward", args.fn, dtype=getattr(args, "dtype", None))
    notes: list[str] = []
    wrt = resolve_wrt(comp.run_fn, args.wrt, notes)
    for n in notes:
        print(f"adc: {n}", file=sys.stderr)
    binder = DimBinder(getattr(args, "bind", None) or {})
    inputs = _inputs(args, comp.run_fn, binder, inputs_for)
    check_run_fits(comp.module, comp.run_name, binder.env)
    mode = getattr(args, "jacobian_mode", "auto")
    jac = jacobian(comp.module, comp.run_name, inputs, wrt, dims=binder.env,
                   mode=None if mode == "auto" else mode)
    print(f"{jac.reason} ({jac.runs} run{'s' if jac.runs != 1 else ''})\n")
    small = all(a.size <= 64 for a in jac.blocks.values())
    if small:
        for key, a in jac.blocks.items():
            print(f"{key} {a.shape}:\n{np.array2string(a, precision=6)}\n")
    else:
        print(summary(list(jac.blocks.items())))
    if getattr(args, "out", None):
        save_npz(args.out, jac.blocks)
    return 0


@dataclass
class ForwardCheck:
    """Forward mode against differences (`jvp_rel`) and the dot-product test (`dot_rel`)
    for one differentiated input."""

    name: str
    jvp_rel: float
    dot_rel: float
    ok: bool


def check_forward(fwd: Compiled, inputs: dict, wrt: list[str], dims: dict, eps: float,
                  rtol: float, seed: int = 0, floor: float = 1e-3) -> list[ForwardCheck]:
    """Per input `w` of `wrt`, with a random direction `v` on `w` alone and a random `u`
    per float result: ``J v`` against central differences of every result, and
    ``<u, J v>`` against ``<J^T u, v>``. `fwd` is the program compiled for values
    (float64). Errors are relative, with `floor` as the smallest scale."""
    from adc_runtime.executor import run_function
    from ..api.jacobian import build_pullback
    from ..passes.jvp import JVP

    name = fwd.run_name
    jm = JVP(wrt=tuple(wrt), fn=name)(fwd.module)
    t_names = jm[f"{name}_jvp"].arg_names[len(fwd.run_fn.args):]
    pm, ct_names = build_pullback(fwd.module, name, wrt)
    rng = np.random.default_rng(seed)
    outs, _ = run_function(fwd.module, name, inputs, dims=dims)
    floats = [k for k, t in enumerate(fwd.run_fn.result_types) if t.is_float]
    u = {c: rng.standard_normal(np.shape(outs[k])) for c, k in zip(ct_names, floats)}
    pulled = run_function(pm, f"{name}_pullback_grad", {**inputs, **u}, dims=dims)[0][1:]
    rows = []
    for k, w in enumerate(wrt):
        x = np.asarray(inputs[w], dtype=np.float64)
        v = rng.standard_normal(x.shape)
        zero = {t: np.zeros_like(np.asarray(inputs[ww], dtype=np.float64))
                for t, ww in zip(t_names, wrt)}
        jv = run_function(jm, f"{name}_jvp", {**inputs, **zero, t_names[k]: v},
                          dims=dims)[0][len(outs):]
        plus = run_function(fwd.module, name, {**inputs, w: x + eps * v}, dims=dims)[0]
        minus = run_function(fwd.module, name, {**inputs, w: x - eps * v}, dims=dims)[0]
        jvp_rel = 0.0
        for j in floats:
            fd = (np.asarray(plus[j], np.float64) - np.asarray(minus[j], np.float64)) / (2 * eps)
            got = np.asarray(jv[j], np.float64)
            scale = np.maximum(np.maximum(np.abs(got), np.abs(fd)), floor)
            jvp_rel = max(jvp_rel, float(np.max(np.abs(got - fd) / scale, initial=0.0)))
        lhs = sum(float(np.sum(u[c] * np.asarray(jv[j], np.float64)))
                  for c, j in zip(ct_names, floats))
        rhs = float(np.sum(np.asarray(pulled[k], np.float64) * v))
        dot_rel = abs(lhs - rhs) / max(abs(lhs), abs(rhs), floor)
        finite = np.isfinite(jvp_rel) and np.isfinite(dot_rel)
        rows.append(ForwardCheck(w, jvp_rel, dot_rel,
                                 bool(finite and jvp_rel <= rtol and dot_rel <= rtol)))
    return rows
