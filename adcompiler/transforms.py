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
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, Union

from .api import DEFAULT_PASSES, FunctionBuilder, Source, load, runner
from .diagnostics import AdcError
from .ir.core import Function, Module

__all__ = ["function", "grad", "value_and_grad", "vjp", "jvp", "hvp", "Compiled"]

Wrt = Union[str, Sequence[str], None]
FLOAT_DTYPES = ("f16", "f32", "f64", "bf16")


# ---- the convenience layer: compiled once, called many times --------------------------

class Compiled:
    """A compiled function of `module`, callable with positional or named arrays.

    `spec` says what the call returns from the function's list of outputs (`finish`): the
    transform (``kind``), the number of the primal's results, the differentiated inputs and
    how their gradients are packed, ``has_aux``. It is data, so a `Compiled` saves, loads and
    pickles as its IR text plus this metadata (`adcompiler.artifact`). `in_axes` maps the
    inputs `vmap` batched to the axis their examples come on.
    """

    def __init__(self, module: Module, fn_name: str, inputs: Sequence[str], spec: dict,
                 device: str = "cpu", dims: Mapping[str, int] | None = None,
                 dtype: str | None = None):
        self.module, self.fn_name, self.inputs = module, fn_name, list(inputs)
        self.spec, self.device, self.dims, self.dtype = dict(spec), device, dict(dims or {}), dtype
        self.in_axes: dict[str, int] = {}
        self._runner = None  # made on the first call; keeps executors for later ones
        self._variants: dict[tuple, Compiled] = {}

    @property
    def batchable(self) -> bool:
        """Whether the call's result is made from the outputs alone (what `vmap` needs)."""
        return self.spec["kind"] != "vjp"

    @property
    def outputs(self) -> list[str]:
        """The names of the compiled function's outputs (``out``, ``grad_W1``, ...)."""
        from .artifact import output_names
        return output_names(self.module, self.module[self.fn_name])

    def bind(self, args: tuple, kwargs: dict) -> dict:
        """Positional and keyword arguments -> named inputs, checked like a Python call."""
        if len(args) > len(self.inputs):
            raise TypeError(f"{self.fn_name}() takes {len(self.inputs)} inputs, "
                            f"got {len(args)}")
        named = dict(zip(self.inputs, args))
        for k, v in kwargs.items():
            if k not in self.inputs:
                raise TypeError(f"{self.fn_name}() has no input {k!r} "
                                f"(inputs: {', '.join(self.inputs)})")
            if k in named:
                raise TypeError(f"{self.fn_name}() got input {k!r} twice")
            named[k] = v
        missing = [k for k in self.inputs if k not in named]
        if missing:
            raise TypeError(f"{self.fn_name}() is missing input {missing[0]!r}")
        return named

    def call(self, named: Mapping[str, Any]) -> list:
        if self._runner is None:
            self._runner = runner(self.module, self.fn_name, self.device)
        if self.in_axes:   # the batch pass reads each batched input's examples on axis 0
            import numpy as np
            named = {k: np.moveaxis(np.asarray(v), self.in_axes[k], 0)
                     if self.in_axes.get(k) else v for k, v in named.items()}
        outs = list(self._runner(named, self.dims)[0])
        return _to_bf16(outs) if self.dtype == "bf16" else outs

    def finish(self, outs: list, named: dict) -> Any:
        return finish(self.spec, outs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        params = None
        if "params" in kwargs and "params" not in self.inputs:
            params = kwargs.pop("params")
        elif args and isinstance(args[0], Mapping):
            params, args = args[0], args[1:]
        if params is None:
            named = self.bind(args, kwargs)
            return self.finish(self.call(named), named)
        return self._call_with_params(dict(params), args, kwargs)

    def _call_with_params(self, params: dict, args: tuple, kwargs: dict) -> Any:
        """Inputs from the dict `params` and the rest; a gradient built without an explicit
        `wrt` differentiates the dict's entries and returns their gradients as a dict."""
        for k in params:
            if k not in self.inputs:
                raise TypeError(f"{self.fn_name}() has no input {k!r} (params)")
        rest = [k for k in self.inputs if k not in params]
        if len(args) > len(rest):
            raise TypeError(f"{self.fn_name}() takes {len(rest)} inputs besides params, "
                            f"got {len(args)}")
        positional = dict(zip(rest, args))
        target = self
        if self.spec["kind"] in ("grad", "value_and_grad") and not self.spec["explicit"] \
                and not self.in_axes:
            names = tuple(k for k in self.inputs if k in params)
            if names not in self._variants:
                self._variants[names] = _gradient(
                    self.module, self.spec["primal"], list(names), self.spec, self.device,
                    self.dims, self.dtype, style="dict")
            target = self._variants[names]
        named = target.bind((), {**positional, **kwargs, **params})
        return target.finish(target.call(named), named)

    def save(self, path) -> None:
        """Write the program and what the call needs as one IR file (`load_compiled`)."""
        from .artifact import save
        save(self, path)

    def __reduce__(self):
        from .artifact import compiled_from_text, to_text
        return compiled_from_text, (to_text(self),)

    def __repr__(self) -> str:
        return f"<Compiled {self.fn_name}({', '.join(self.inputs)})>"


def finish(spec: dict, outs: list) -> Any:
    """What a call returns, from the compiled function's outputs (see `Compiled`)."""
    kind, n = spec["kind"], spec["results"]
    shape = Shape(spec.get("wrt", []), spec.get("style", "tuple"))
    if kind == "function":
        return _one_or_tuple(outs, n == 1)
    if kind == "jvp":
        return _one_or_tuple(outs[:n], n == 1), _one_or_tuple(outs[n:], n == 1)
    if kind == "hvp":   # results, gradients, then the products
        return shape.pack(outs[len(outs) - len(shape.names):])
    aux = _one_or_tuple(outs[1:n], n == 2) if spec["has_aux"] else None
    grads = shape.pack(outs[n:])
    if kind == "grad":
        return (grads, aux) if spec["has_aux"] else grads
    return ((outs[0], aux) if spec["has_aux"] else outs[0]), grads


def _to_bf16(outs: list) -> list:
    bf16 = _bfloat16()
    return [o.astype(bf16) if o.dtype.kind == "f" else o for o in outs]


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        raise AdcError("dtype='bf16' needs the ml_dtypes package "
                       "(pip install 'adcompiler[bf16]')") from None
    return ml_dtypes.bfloat16


# ---- what to differentiate and how results are shaped ---------------------------------

class Shape:
    """How a list of per-input arrays is returned: one array, a tuple, or a dict."""

    def __init__(self, names: list[str], style: str):
        self.names, self.style = names, style   # style: "one", "tuple" or "dict"

    def pack(self, values: list):
        if self.style == "one":
            return values[0]
        if self.style == "dict":
            return dict(zip(self.names, values))
        return tuple(values)


def _one_or_tuple(values: list, single: bool):
    return values[0] if single else tuple(values)


def _default_wrt(fn: Function) -> list[str]:
    """The ``param`` inputs, or every float input when none is marked (as ``adc run``)."""
    floats = [a.name for a in fn.args if a.type.is_float]
    return [n for n in floats if n in fn.params] or floats


def _wrt_shape(fn: Function, wrt, argnums=None) -> Shape:
    """`wrt` (a name or names) or `argnums` (an input position or positions) as a `Shape`;
    neither: the default inputs, as a tuple."""
    if wrt is not None and argnums is not None:
        raise TypeError("give wrt= or argnums=, not both")
    if argnums is not None:
        n = len(fn.args)
        single = isinstance(argnums, int)
        nums = [argnums] if single else list(argnums)
        for i in nums:
            if not isinstance(i, int) or not -n <= i < n:
                raise TypeError(f"argnums: {i!r} is not an input position of "
                                f"'{fn.name}', which takes {n} inputs")
        wrt = fn.arg_names[nums[0]] if single else [fn.arg_names[i] for i in nums]
    if isinstance(wrt, str):
        return Shape([wrt], "one")
    names = list(wrt) if wrt is not None else _default_wrt(fn)
    if not names:
        raise AdcError(f"'{fn.name}' has no float inputs to differentiate")
    return Shape(names, "tuple")


def result_label(fn: Function, k: int) -> str:
    """How a result is named in messages: its name in the program, else its position."""
    name = fn.returned[k].name if fn.body.ops else None
    if name and name.isidentifier():
        return f"'{name}'"
    return f"result {k}" if len(fn.result_types) > 1 else "its result"


def require_scalar(fn: Function, what: str, has_aux: bool = False) -> None:
    """`what` (``grad``, ...) differentiates one scalar float result of `fn`: the only one,
    or the first with `has_aux`. Anything else is an error naming the result and type."""
    types = fn.result_types
    listing = ", ".join(f"{result_label(fn, k)}: {t}" for k, t in enumerate(types))
    if has_aux and len(types) < 2:
        raise AdcError(f"{what}(has_aux=True) needs '{fn.name}' to return (value, aux, ...), "
                       f"but it returns one result ({listing})")
    if not has_aux and len(types) != 1:
        raise AdcError(f"{what} needs one scalar float result, but '{fn.name}' returns "
                       f"{len(types)} ({listing}); pass has_aux=True to differentiate the "
                       "first and return the others beside the gradient, or use vjp")
    t = types[0]
    if not (t.is_float and t.shape == ()):
        raise AdcError(f"{what} needs a scalar float result, but {result_label(fn, 0)} of "
                       f"'{fn.name}' is {t}; use vjp (or jacrev) for a non-scalar result, "
                       "or reduce it in the program (sum, mean)")


# ---- compiling ------------------------------------------------------------------------

def _primal(program: Source, fn: str | None,
            dtype: str | None = None) -> tuple[Module, Function]:
    """The module (a copy with every float type made `dtype`, when given) and `fn`."""
    module = load(program)
    name = fn or module.main.name
    if name not in module:
        raise AdcError(f"no function '{name}' (functions: {', '.join(module.functions)})")
    if dtype is not None:
        if dtype not in FLOAT_DTYPES:
            raise AdcError(f"dtype must be one of {', '.join(FLOAT_DTYPES)}, got {dtype!r}")
        from .cli.dtype import to_dtype
        from .passes.clone import clone_module
        module = to_dtype(clone_module(module), "f32" if dtype == "bf16" else dtype)
    return module, module[name]


def _around(passes: str, derive, after=()) -> list:
    """`passes`, then `derive` (a derivative pass) after ``scan-inputs``, then `passes`:
    loops scan the stacked values they read as ``X[i]`` before they are differentiated."""
    from .passes.pipeline import parse_pipeline
    from .passes.scan_inputs import ScanInputs
    return [*parse_pipeline(passes), ScanInputs(), derive, *parse_pipeline(passes), *after]


def _remat_passes(remat: str | None, fn: str, dims: Mapping[str, int] | None) -> list:
    if remat is None or remat == "none":
        return []
    from .passes.remat import Remat
    return [Remat(policy=remat, fn=fn, bind=tuple(f"{k}={v}" for k, v in (dims or {}).items()))]


def _no_remat(remat: str | None, what: str) -> None:
    if remat not in (None, "none"):
        raise AdcError(f"remat= applies to transforms with a reverse sweep (grad, "
                       f"value_and_grad, vjp, hvp, jacrev, hessian); {what} has none")


def _derive(module: Module, derive, passes: str, derived: str, remat=None,
            dims=None) -> Module:
    """`module` through `passes`, ``scan-inputs``, the derivative pass `derive` (which adds
    the function `derived`), `passes` and the ``remat`` schedule of `derived`, if asked."""
    from .passes.pipeline import run_pipeline
    if remat not in (None, "none") and dims:  # loops get plans for the trip counts bound here
        from .cli.dtype import bind_dims
        from .passes.clone import clone_module
        module = bind_dims(clone_module(module), dims)
    return run_pipeline(module, _around(passes, derive, _remat_passes(remat, derived, dims)))


def _reverse(module: Module, fn: str, wrt: list[str], passes: str, seed=(), remat=None,
             dims=None) -> Module:
    from .passes.reverse import Reverse
    return _derive(module, Reverse(wrt=tuple(wrt), fn=fn, seed=tuple(seed)), passes,
                   fn + "_grad", remat, dims)


def function(program: Source, fn: str | None = None, *, passes: str = DEFAULT_PASSES,
             remat: str | None = None, dtype: str | None = None, device: str = "cpu",
             dims: Mapping[str, int] | None = None) -> Compiled:
    """`fn` as a Python callable returning its result (a tuple for several results)."""
    from .passes.pipeline import run_pipeline
    _no_remat(remat, "function")
    module, f = _primal(program, fn, dtype)
    return Compiled(run_pipeline(module, passes), f.name, f.arg_names,
                    {"kind": "function", "results": len(f.result_types)}, device, dims, dtype)


def value_and_grad(program: Source, fn: str | None = None, wrt: Wrt = None, *,
                   argnums: int | Sequence[int] | None = None, has_aux: bool = False,
                   passes: str = DEFAULT_PASSES, remat: str | None = None,
                   dtype: str | None = None, device: str = "cpu",
                   dims: Mapping[str, int] | None = None, _what="value_and_grad") -> Compiled:
    """A callable returning ``(value, gradients)`` of a function with a scalar float result.

    `wrt` is an input name (the gradient is one array) or a sequence of names (a tuple of
    arrays, in that order), or `argnums` input positions; by default the ``param`` inputs
    (a tuple). With ``has_aux=True`` the function returns ``(value, aux...)``: only `value`
    is differentiated, and the call returns ``((value, aux), gradients)``. `remat` is a
    checkpointing policy (``sqrt``, ``revolve:C``, ``budget:64MiB``...), `dtype` makes
    every float of the program that type (``bf16``: computed in f32, results in bf16).
    """
    module, f = _primal(program, fn, dtype)
    require_scalar(f, _what, has_aux)
    shape = _wrt_shape(f, wrt, argnums)
    spec = {"kind": _what, "has_aux": has_aux, "explicit": wrt is not None or argnums is not None,
            "passes": passes, "remat": remat}
    return _gradient(module, f.name, shape.names, spec, device, dims, dtype, shape.style)


def _gradient(module: Module, fn: str, names: list[str], spec: dict, device, dims, dtype,
              style: str) -> Compiled:
    """A `grad` or `value_and_grad` callable of `fn` in `module` differentiating `names`."""
    f = module[fn]
    spec = {**spec, "primal": fn, "results": len(f.result_types), "wrt": list(names),
            "style": style}
    derived = _reverse(module, fn, names, spec["passes"], (0,) if spec["has_aux"] else (),
                       spec["remat"], dims)
    return Compiled(derived, f"{fn}_grad", f.arg_names, spec, device, dims, dtype)


def grad(program: Source, fn: str | None = None, wrt: Wrt = None, *,
         argnums: int | Sequence[int] | None = None, has_aux: bool = False,
         passes: str = DEFAULT_PASSES, remat: str | None = None, dtype: str | None = None,
         device: str = "cpu", dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning the gradients (see `value_and_grad`); with ``has_aux=True``,
    ``(gradients, aux)``."""
    return value_and_grad(program, fn, wrt, argnums=argnums, has_aux=has_aux, passes=passes,
                          remat=remat, dtype=dtype, device=device, dims=dims, _what="grad")


def vjp(program: Source, fn: str | None = None, wrt: Wrt = None, *,
        argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
        remat: str | None = None, dtype: str | None = None, device: str = "cpu",
        dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning ``(value, pullback)``; ``pullback(*cotangents)`` returns the
    vector-Jacobian products for `wrt` (shaped as in `value_and_grad`).

    One cotangent per float result, of that result's shape: this is the way to
    differentiate non-scalar and several results. The adjoint is compiled once, from
    ``sum(result * cotangent)``; each pullback call reruns the forward sweep rather than
    keeping the primal call's intermediates.
    """
    from .passes.pipeline import run_pipeline
    module, f = _primal(program, fn, dtype)
    shape = _wrt_shape(f, wrt, argnums)
    seeded, ct_names = _seeded(module, f)
    name = seeded.main.name
    adjoint = Compiled(_reverse(seeded, name, shape.names, passes, (), remat, dims),
                       name + "_grad", f.arg_names + ct_names, {"kind": "raw"}, device,
                       dims, dtype)
    return Pullback(run_pipeline(module, passes), f.name, f.arg_names,
                    {"kind": "vjp", "results": len(f.result_types)}, device, dims, dtype,
                    adjoint=adjoint, ct_names=ct_names, shape=shape)


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
            grads = self.adjoint.call({**named, **dict(zip(self.ct_names, cts))})[n_seeds:]
            return self.shape.pack(grads)
        return _one_or_tuple(outs, self.spec["results"] == 1), pullback

    def __reduce__(self):
        raise TypeError("a vjp callable holds a Python pullback: save or pickle grad, jvp "
                        "or function callables instead")

    save = __reduce__


def _second_order(pass_cls, program: Source, fn: str | None, wrt, argnums, passes: str,
                  suffix: str, dtype: str | None, remat=None, dims=None):
    """Run `pass_cls` (``jvp`` or ``hvp``) on `fn`, between the cleanup passes."""
    module, f = _primal(program, fn, dtype)
    shape = _wrt_shape(f, wrt, argnums)
    out = _derive(module, pass_cls(wrt=tuple(shape.names), fn=f.name), passes,
                  f.name + suffix, remat, dims)
    return out, out[f.name + suffix], f, shape


def jvp(program: Source, fn: str | None = None, wrt: Wrt = None, *,
        argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
        remat: str | None = None, dtype: str | None = None, device: str = "cpu",
        dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning ``(value, tangent)``: the results and their directional
    derivatives (forward mode, the ``jvp`` pass).

    It takes `fn`'s inputs followed by one tangent per input of `wrt`, named ``t_<input>``
    (see `Compiled.inputs`); each of value and tangent is one array for a single result,
    else a tuple.
    """
    from .passes.jvp import JVP
    _no_remat(remat, "jvp")
    module, tfn, f, _ = _second_order(JVP, program, fn, wrt, argnums, passes, "_jvp",
                                      dtype)
    return Compiled(module, tfn.name, tfn.arg_names,
                    {"kind": "jvp", "results": len(f.result_types)}, device, dims, dtype)


def hvp(program: Source, fn: str | None = None, wrt: Wrt = None, *,
        argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
        remat: str | None = None, dtype: str | None = None, device: str = "cpu",
        dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning Hessian-vector products of a function with a scalar float
    result (forward-over-reverse, the ``hvp`` pass), shaped like `grad`'s result.

    It takes `fn`'s inputs followed by the direction: one tangent per input of `wrt`, named
    ``t_<input>``.
    """
    from .passes.hvp import HVP
    require_scalar(_primal(program, fn, None)[1], "hvp")
    module, hfn, f, shape = _second_order(HVP, program, fn, wrt, argnums, passes, "_hvp",
                                          dtype, remat, dims)
    return Compiled(module, hfn.name, hfn.arg_names,
                    {"kind": "hvp", "results": len(f.result_types), "wrt": shape.names,
                     "style": shape.style}, device, dims, dtype)


def _seeded(module: Module, f: Function) -> tuple[Module, list[str]]:
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
