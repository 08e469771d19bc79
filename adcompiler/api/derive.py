"""Compiling a derivative program: the primal module (in another float dtype if asked),
then the pipeline around a derivative pass (cleanup, ``scan-inputs``, the pass, cleanup,
the ``remat`` schedule if asked), and the seed function of `vjp`."""
from __future__ import annotations

from typing import Mapping

from .program import FunctionBuilder, Source, load
from ..diagnostics import AdcError
from ..ir.core import Function, Module

FLOAT_DTYPES = ("f16", "f32", "f64", "bf16")


def primal(program: Source, fn: str | None,
           dtype: str | None = None) -> tuple[Module, Function]:
    """The module (a copy with every float type made `dtype`, when given) and `fn`."""
    module = load(program)
    name = fn or module.main.name
    if name not in module:
        raise AdcError(f"no function '{name}' (functions: {', '.join(module.functions)})")
    if dtype is not None:
        if dtype not in FLOAT_DTYPES:
            raise AdcError(f"dtype must be one of {', '.join(FLOAT_DTYPES)}, got {dtype!r}")
        from ..passes.to_dtype import to_dtype
        from ..passes.clone import clone_module
        module = to_dtype(clone_module(module), "f32" if dtype == "bf16" else dtype)
    return module, module[name]


def _around(passes: str, derivative, after=()) -> list:
    """`passes`, then `derivative` (a pass) after ``scan-inputs``, then `passes`: loops scan
    the stacked values they read as ``X[i]`` before they are differentiated."""
    from ..passes.pipeline import parse_pipeline
    from ..passes.scan_inputs import ScanInputs
    return [*parse_pipeline(passes), ScanInputs(), derivative, *parse_pipeline(passes), *after]


def _remat_passes(remat: str | None, fn: str, dims: Mapping[str, int] | None) -> list:
    if remat is None or remat == "none":
        return []
    from ..passes.remat import Remat
    return [Remat(policy=remat, fn=fn, bind=tuple(f"{k}={v}" for k, v in (dims or {}).items()))]


def no_remat(remat: str | None, what: str) -> None:
    if remat not in (None, "none"):
        raise AdcError(f"remat= applies to transforms with a reverse sweep (grad, "
                       f"value_and_grad, vjp, hvp, jacrev, hessian); {what} has none")


def derive(module: Module, derivative, passes: str, derived: str, remat=None,
           dims=None) -> Module:
    """`module` through `passes`, ``scan-inputs``, the derivative pass `derivative` (which
    adds the function `derived`), `passes` and the ``remat`` schedule of `derived`, if
    asked."""
    from ..passes.pipeline import run_pipeline
    if remat not in (None, "none") and dims:  # loops get plans for the trip counts bound here
        from ..passes.to_dtype import bind_dims
        from ..passes.clone import clone_module
        module = bind_dims(clone_module(module), dims)
    return run_pipeline(module, _around(passes, derivative,
                                        _remat_passes(remat, derived, dims)))


def reverse(module: Module, fn: str, wrt: list[str], passes: str, seed=(), remat=None,
            dims=None) -> Module:
    """The adjoint ``<fn>_grad`` of `fn` with respect to `wrt` (see `derive`)."""
    from ..passes.reverse import Reverse
    return derive(module, Reverse(wrt=tuple(wrt), fn=fn, seed=tuple(seed)), passes,
                  fn + "_grad", remat, dims)


def vjp_seed(module: Module, f: Function) -> tuple[Module, list[str]]:
    """`module` plus ``<f>_vjp(inputs..., cts...)`` returning ``sum(r_k * ct_k)`` for each
    float result ``r_k``: its gradient, seeded with ones, is the vector-Jacobian product."""
    taken = set(f.arg_names) | set(module.functions)
    ct_names = []
    for k, t in enumerate(f.result_types):
        if t.is_float:
            name = "ct" if len(f.result_types) == 1 else f"ct{k}"
            while name in taken:
                name = "_" + name
            ct_names.append(name)
    fn_name = f"{f.name}_vjp"
    while fn_name in taken:
        fn_name = "_" + fn_name
    inputs = {a.name: a.type for a in f.args}
    floats = [t for t in f.result_types if t.is_float]
    fb = FunctionBuilder(fn_name, {**inputs, **dict(zip(ct_names, floats))})
    results = fb.call(f, fb.block.args[:len(inputs)])
    cts = iter(fb.block.args[len(inputs):])
    sums = [fb.emit("sum", fb.emit("mul", r, next(cts))) for r in results if r.type.is_float]
    out = Module(dict(module.functions))
    fb.finish(*sums, module=out)
    return out, ct_names
