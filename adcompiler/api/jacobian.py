"""Full Jacobians, in whichever mode needs fewer sweeps, and the pullback program.

One JVP gives one column of the Jacobian per input element; one VJP gives one row per
output element. With ``n_in`` differentiated input elements and ``n_out`` float output
elements, forward mode needs ``n_in`` runs of ``f_jvp`` and reverse mode ``n_out`` runs of
the pullback: `choose_mode` picks the smaller count (forward on a tie, since a tangent
program stores nothing for a reverse sweep) and says why.

The pullback ``<fn>_pullback_grad(inputs..., ct_<result>...)`` returns
``sum_k <ct_k, result_k>`` followed by ``J^T ct`` for each differentiated input: reverse
mode applied to that weighted sum, so any cotangent can be pulled back (``f_grad`` only
seeds ones). The cotangent inputs are named ``ct_out`` (one result) or ``ct_out0``,
``ct_out1``, ... for the float results, with leading underscores added on a name clash.

Jacobian blocks have shape ``result.shape + input.shape`` and are keyed
``jac_<result key>_<input>`` (result keys as in spec §7: ``out`` or ``out0``, ``out1``...).
Integer results have no derivative and no block.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Block, Function, Module
from ..passes.dce import DCE
from ..passes.ad import resolve_wrt
from ..passes.jvp import JVP
from ..passes.reverse import Reverse
from ..passes.scan_inputs import ScanInputs


def result_keys(n: int) -> list[str]:
    return ["out"] if n == 1 else [f"out{k}" for k in range(n)]


def _fresh(name: str, taken: set) -> str:
    while name in taken:
        name = "_" + name
    taken.add(name)
    return name


def build_pullback(module: Module, fn_name: str, wrt: list[str]) -> tuple[Module, list[str]]:
    """`module` with ``<fn>_pullback`` and its adjoint ``<fn>_pullback_grad``; returns it and
    the cotangent input names (one per float result, in result order)."""
    fn = module[fn_name]
    wrt = resolve_wrt(fn, wrt)
    keys = result_keys(len(fn.result_types))
    floats = [k for k, t in enumerate(fn.result_types) if t.is_float]
    taken = set(fn.arg_names)
    ct_names = [_fresh(f"ct_{keys[k]}", taken) for k in floats]
    body = Block([a.type for a in fn.args] + [fn.result_types[k] for k in floats],
                 fn.arg_names + ct_names)
    b = Builder(body, fn.loc)
    results = b.call(fn, body.args[:len(fn.args)])
    total = None
    for k, ct in zip(floats, body.args[len(fn.args):]):
        term = b.emit("sum", b.emit("mul", results[k], ct))
        total = term if total is None else b.emit("add", total, term)
    if total is None:
        total = b.emit("zeros", shape=(), dtype=fn.args[0].type.dtype if fn.args else "f32")
    b.ret([total])
    name = f"{fn_name}_pullback"
    m = Module(dict(module.functions))
    m.add(Function(name, body, [total.type], params=set(wrt), loc=fn.loc))
    # DCE drops the cotangents the reverse sweep computes for constants (unused)
    return DCE(fn=f"{name}_grad")(Reverse(wrt=tuple(wrt), fn=name)(m)), ct_names


def choose_mode(n_in: int, n_out: int) -> tuple[str, str]:
    """``("forward" | "reverse", why)`` for `n_in` input and `n_out` output elements."""
    def n(count, what):
        return f"{count} {what}{'s' if count != 1 else ''}"
    if n_in <= n_out:
        return "forward", (f"forward mode: {n(n_in, 'differentiated input element')} <= "
                           f"{n(n_out, 'output element')}, so {n(n_in, 'JVP')} instead of "
                           f"{n(n_out, 'VJP')}")
    return "reverse", (f"reverse mode: {n(n_out, 'output element')} < "
                       f"{n(n_in, 'differentiated input element')}, so {n(n_out, 'VJP')} "
                       f"instead of {n(n_in, 'JVP')}")


@dataclass
class Jacobian:
    mode: str
    reason: str
    blocks: dict[str, np.ndarray] = field(default_factory=dict)   # key -> array
    runs: int = 0


def jacobian(module: Module, fn_name: str, inputs: dict, wrt: list[str] | None = None,
             dims: dict | None = None, mode: str | None = None) -> Jacobian:
    """The Jacobian of `fn_name` at `inputs` with respect to `wrt` (default: ``param``
    inputs, else every float input); `mode` forces ``forward`` or ``reverse``."""
    from adc_runtime.executor import run_function

    module = ScanInputs()(module)  # as the derivative pipelines do: stacked, not carried
    fn = module[fn_name]
    if not wrt:
        wrt = [a for a in fn.arg_names if a in fn.params and fn.arg(a).type.is_float] or \
              [a.name for a in fn.args if a.type.is_float]
    wrt = resolve_wrt(fn, wrt)
    outs, stats = run_function(module, fn_name, inputs, dims=dims)
    dims = stats["dims"]
    keys = result_keys(len(outs))
    floats = [k for k, t in enumerate(fn.result_types) if t.is_float]
    x = {w: np.asarray(inputs[w]) for w in wrt}
    n_in = sum(x[w].size for w in wrt)
    n_out = sum(np.size(outs[k]) for k in floats)
    chosen, reason = choose_mode(n_in, n_out)
    if mode is not None and mode != chosen:
        reason = (f"{mode} mode, as asked (with {n_in} differentiated input and {n_out} "
                  f"output elements, {chosen} mode would take fewer runs)")
        chosen = mode
    jac = Jacobian(chosen, reason)
    blocks = {(k, w): np.zeros(np.shape(outs[k]) + x[w].shape) for k in floats for w in wrt}
    if chosen == "forward":
        jm = JVP(wrt=tuple(wrt), fn=fn_name)(module)
        jfn = jm[f"{fn_name}_jvp"]
        t_names = jfn.arg_names[len(fn.args):]
        zeros = {t: np.zeros_like(x[w], dtype=_float_dtype(x[w])) for t, w in zip(t_names, wrt)}
        for t, w in zip(t_names, wrt):
            for i in range(x[w].size):
                seed = np.zeros(x[w].size, dtype=zeros[t].dtype)
                seed[i] = 1
                res, _ = run_function(jm, jfn.name, {**inputs, **zeros, t: seed.reshape(x[w].shape)},
                                      dims=dims)
                jac.runs += 1
                idx = np.unravel_index(i, x[w].shape)
                for k in floats:
                    blocks[(k, w)][(...,) + idx] = res[len(outs) + k]
    else:
        pm, ct_names = build_pullback(module, fn_name, wrt)
        cts = {c: np.zeros(np.shape(outs[k]), dtype=np.asarray(outs[k]).dtype)
               for c, k in zip(ct_names, floats)}
        for c, k in zip(ct_names, floats):
            for j in range(np.size(outs[k])):
                seed = np.zeros(np.size(outs[k]), dtype=cts[c].dtype)
                seed[j] = 1
                res, _ = run_function(pm, f"{fn_name}_pullback_grad",
                                      {**inputs, **cts, c: seed.reshape(np.shape(outs[k]))},
                                      dims=dims)
                jac.runs += 1
                idx = np.unravel_index(j, np.shape(outs[k]))
                for w, g in zip(wrt, res[1:]):
                    blocks[(k, w)][idx] = g
    jac.blocks = {f"jac_{keys[k]}_{w}": a for (k, w), a in blocks.items()}
    return jac


def _float_dtype(a: np.ndarray):
    return a.dtype if a.dtype.kind == "f" else np.float64
