"""The convenience layer: programs differentiated once, called many times.

    g = grad("samples/backprop_tiny.tdsl", wrt=("W1", "b1"))   # compiled here, once
    dW1, db1 = g(x=x, y=y, W1=W1, b1=b1, v=v, b3=b3)           # runs the adjoint program

The callables returned by `function`, `grad`, `value_and_grad`, `vjp`, `jvp` and `hvp` are
`Compiled` objects: they keep the compiled module (``.module``, for printing or emitting)
and accept inputs by position (in the function's input order) or by name, or a dict of
parameters (``params={...}``, or first by position) whose gradients then come back as a dict.

The semantics are explicit, as in JAX: `grad` and `value_and_grad` differentiate a scalar
float result (with ``has_aux=True``: the first result, the others returned beside the
gradient), anything else is an error that names the result; `vjp` differentiates any result
along a given cotangent.

The callable is `adcompiler.api.compiled`, what is differentiated `adcompiler.api.wrt`, and the
pipelines that compile derivative programs `adcompiler.api.derive`.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .program import DEFAULT_PASSES, Source
from .compiled import Compiled, gradient
from .derive import derive, no_remat, primal, reverse, vjp_seed
from ..ir.core import Module
from .wrt import Shape, Wrt, one_or_tuple, require_scalar, wrt_shape

__all__ = ["function", "grad", "value_and_grad", "vjp", "jvp", "hvp", "Compiled"]


def function(program: Source, fn: str | None = None, *, passes: str = DEFAULT_PASSES,
             remat: str | None = None, dtype: str | None = None, device: str = "cpu",
             dims: Mapping[str, int] | None = None, seed: int = 0,
             training: bool = False) -> Compiled:
    """`fn` as a Python callable returning its result (a tuple for several results).

    It evaluates, as a model in ``model.eval()``: dropout is the identity and batch
    normalization reads its running statistics; ``training=True`` asks for training
    behaviour. Random ops draw from `seed` (a call's ``seed=`` overrides it)."""
    from ..passes.pipeline import run_pipeline
    no_remat(remat, "function")
    module, f = primal(program, fn, dtype)
    module = run_pipeline(module, passes)
    if training:
        from ..passes.train_mode import set_training
        set_training(module, f.name)
    return Compiled(module, f.name, f.arg_names,
                    {"kind": "function", "results": len(f.result_types), "seed": seed},
                    device, dims, dtype)


def value_and_grad(program: Source, fn: str | None = None, wrt: Wrt = None, *,
                   argnums: int | Sequence[int] | None = None, has_aux: bool = False,
                   passes: str = DEFAULT_PASSES, remat: str | None = None,
                   dtype: str | None = None, device: str = "cpu",
                   dims: Mapping[str, int] | None = None, seed: int = 0,
                   _what="value_and_grad") -> Compiled:
    """A callable returning ``(value, gradients)`` of a function with a scalar float result.

    `wrt` is an input name (the gradient is one array) or a sequence of names (a tuple of
    arrays, in that order), or `argnums` input positions; by default the ``param`` inputs
    (a tuple). With ``has_aux=True`` the function returns ``(value, aux...)``: only `value`
    is differentiated, and the call returns ``((value, aux), gradients)``. `remat` is a
    checkpointing policy (``sqrt``, ``revolve:C``, ``budget:64MiB``...), `dtype` makes
    every float of the program that type (``bf16``: computed in f32, results in bf16).
    Random ops draw from `seed` (a call's ``seed=`` overrides it).
    """
    module, f = primal(program, fn, dtype)
    require_scalar(f, _what, has_aux)
    shape = wrt_shape(f, wrt, argnums)
    spec = {"kind": _what, "has_aux": has_aux, "explicit": wrt is not None or argnums is not None,
            "passes": passes, "remat": remat, "seed": seed}
    return gradient(module, f.name, shape.names, spec, device, dims, dtype, shape.style)


def grad(program: Source, fn: str | None = None, wrt: Wrt = None, *,
         argnums: int | Sequence[int] | None = None, has_aux: bool = False,
         passes: str = DEFAULT_PASSES, remat: str | None = None, dtype: str | None = None,
         device: str = "cpu", dims: Mapping[str, int] | None = None,
         seed: int = 0) -> Compiled:
    """A callable returning the gradients (see `value_and_grad`); with ``has_aux=True``,
    ``(gradients, aux)``."""
    return value_and_grad(program, fn, wrt, argnums=argnums, has_aux=has_aux, passes=passes,
                          remat=remat, dtype=dtype, device=device, dims=dims, seed=seed,
                          _what="grad")


def vjp(program: Source, fn: str | None = None, wrt: Wrt = None, *,
        argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
        remat: str | None = None, dtype: str | None = None, device: str = "cpu",
        dims: Mapping[str, int] | None = None, seed: int = 0) -> Compiled:
    """A callable returning ``(value, pullback)``; ``pullback(*cotangents)`` returns the
    vector-Jacobian products for `wrt` (shaped as in `value_and_grad`).

    One cotangent per float result, of that result's shape: this is the way to
    differentiate non-scalar and several results. The adjoint is compiled once, from
    ``sum(result * cotangent)``; each pullback call reruns the forward sweep rather than
    keeping the primal call's intermediates.
    """
    from ..passes.pipeline import run_pipeline
    module, f = primal(program, fn, dtype)
    shape = wrt_shape(f, wrt, argnums)
    seeded, ct_names = vjp_seed(module, f)
    name = seeded.main.name
    adjoint = Compiled(reverse(seeded, name, shape.names, passes, (), remat, dims),
                       name + "_grad", f.arg_names + ct_names, {"kind": "raw"}, device,
                       dims, dtype)
    from ..passes.train_mode import set_training
    return Pullback(set_training(run_pipeline(module, passes), f.name), f.name, f.arg_names,
                    {"kind": "vjp", "results": len(f.result_types), "seed": seed}, device,
                    dims, dtype, adjoint=adjoint, ct_names=ct_names, shape=shape)


class Pullback(Compiled):
    """`vjp`'s callable: ``(value, pullback)``, the pullback a Python function."""

    def __init__(self, *args, adjoint: Compiled, ct_names: list[str], shape: "Shape", **kw):
        super().__init__(*args, **kw)
        self.adjoint, self.ct_names, self.shape = adjoint, ct_names, shape

    def finish(self, outs: list, named: dict) -> Any:
        n_seeds = len(self.ct_names)

        def pullback(*cts):
            if len(cts) != n_seeds:
                raise TypeError(f"pullback takes {n_seeds} cotangent(s), got {len(cts)}")
            grads = self.adjoint.call({**named, **dict(zip(self.ct_names, cts))},
                                      seed=self.spec.get("seed", 0))[n_seeds:]
            return self.shape.pack(grads)
        return one_or_tuple(outs, self.spec["results"] == 1), pullback

    def __reduce__(self):
        raise TypeError("a vjp callable holds a Python pullback: save or pickle grad, jvp "
                        "or function callables instead")

    save = __reduce__


def _second_order(pass_cls, program: Source, fn: str | None, wrt, argnums, passes: str,
                  suffix: str, dtype: str | None, remat=None, dims=None):
    """Run `pass_cls` (``jvp`` or ``hvp``) on `fn`, between the cleanup passes."""
    module, f = primal(program, fn, dtype)
    shape = wrt_shape(f, wrt, argnums)
    out = derive(module, pass_cls(wrt=tuple(shape.names), fn=f.name), passes,
                  f.name + suffix, remat, dims)
    return out, out[f.name + suffix], f, shape


def jvp(program: Source, fn: str | None = None, wrt: Wrt = None, *,
        argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
        remat: str | None = None, dtype: str | None = None, device: str = "cpu",
        dims: Mapping[str, int] | None = None, seed: int = 0) -> Compiled:
    """A callable returning ``(value, tangent)``: the results and their directional
    derivatives (forward mode, the ``jvp`` pass).

    It takes `fn`'s inputs followed by one tangent per input of `wrt`, named ``t_<input>``
    (see `Compiled.inputs`); each of value and tangent is one array for a single result,
    else a tuple.
    """
    from ..passes.jvp import JVP
    no_remat(remat, "jvp")
    module, tfn, f, _ = _second_order(JVP, program, fn, wrt, argnums, passes, "_jvp",
                                      dtype)
    return Compiled(module, tfn.name, tfn.arg_names,
                    {"kind": "jvp", "results": len(f.result_types), "seed": seed}, device,
                    dims, dtype)


def hvp(program: Source, fn: str | None = None, wrt: Wrt = None, *,
        argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
        remat: str | None = None, dtype: str | None = None, device: str = "cpu",
        dims: Mapping[str, int] | None = None, seed: int = 0) -> Compiled:
    """A callable returning Hessian-vector products of a function with a scalar float
    result (forward-over-reverse, the ``hvp`` pass), shaped like `grad`'s result.

    It takes `fn`'s inputs followed by the direction: one tangent per input of `wrt`, named
    ``t_<input>``.
    """
    from ..passes.hvp import HVP
    require_scalar(primal(program, fn, None)[1], "hvp")
    module, hfn, f, shape = _second_order(HVP, program, fn, wrt, argnums, passes, "_hvp",
                                          dtype, remat, dims)
    return Compiled(module, hfn.name, hfn.arg_names,
                    {"kind": "hvp", "results": len(f.result_types), "wrt": shape.names,
                     "style": shape.style, "seed": seed}, device, dims, dtype)
