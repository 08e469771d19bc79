"""The convenience layer: programs differentiated once, called many times.

    g = grad("samples/backprop_tiny.tdsl", wrt=("W1", "b1"))   # compiled here, once
    dW1, db1 = g(x=x, y=y, W1=W1, b1=b1, v=v, b3=b3)           # runs the adjoint program

The callables returned by `function`, `grad`, `value_and_grad`, `vjp`, `jvp` and `hvp` are
`Compiled` objects: they keep the compiled module (``.module``, for printing or emitting)
and accept inputs by position (in the function's input order) or by name.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .api import DEFAULT_PASSES, FunctionBuilder, Source, load, runner
from .diagnostics import AdcError
from .ir.core import Function, Module

__all__ = ["function", "grad", "value_and_grad", "vjp", "jvp", "hvp", "Compiled"]


# ---- the convenience layer: compiled once, called many times --------------------------

class Compiled:
    """A compiled function of `module`, callable with positional or named arrays.

    `finish` turns the list of raw outputs into what the call returns.
    """

    def __init__(self, module: Module, fn_name: str, inputs: Sequence[str],
                 finish: Callable[[list, dict], Any], device: str = "cpu",
                 dims: Mapping[str, int] | None = None):
        self.module, self.fn_name, self.inputs = module, fn_name, list(inputs)
        self.device, self.dims, self._finish = device, dict(dims or {}), finish
        self._runner = None  # made on the first call; keeps executors for later ones

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
        return list(self._runner(named, self.dims)[0])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        named = self.bind(args, kwargs)
        return self._finish(self.call(named), named)

    def __repr__(self) -> str:
        return f"<Compiled {self.fn_name}({', '.join(self.inputs)})>"


def _one_or_tuple(values: list, single: bool):
    return values[0] if single else tuple(values)


def _default_wrt(fn: Function) -> list[str]:
    """The ``param`` inputs, or every float input when none is marked (as ``adc run``)."""
    floats = [a.name for a in fn.args if a.type.is_float]
    return [n for n in floats if n in fn.params] or floats


def _wrt_names(fn: Function, wrt: str | Sequence[str] | None) -> tuple[list[str], bool]:
    if isinstance(wrt, str):
        return [wrt], True
    names = list(wrt) if wrt is not None else _default_wrt(fn)
    if not names:
        raise AdcError(f"'{fn.name}' has no float inputs to differentiate")
    return names, False


def _around(passes: str, derive) -> list:
    """`passes`, then `derive` (a derivative pass) after ``scan-inputs``, then `passes`:
    loops scan the stacked values they read as ``X[i]`` before they are differentiated."""
    from .passes.pipeline import parse_pipeline
    from .passes.scan_inputs import ScanInputs
    return [*parse_pipeline(passes), ScanInputs(), derive, *parse_pipeline(passes)]


def _reverse(module: Module, fn: str, wrt: list[str], passes: str) -> Module:
    from .passes.pipeline import run_pipeline
    from .passes.reverse import Reverse
    return run_pipeline(module, _around(passes, Reverse(wrt=tuple(wrt), fn=fn)))


def _primal(program: Source, fn: str | None) -> tuple[Module, Function]:
    module = load(program)
    name = fn or module.main.name
    if name not in module:
        raise AdcError(f"no function '{name}' (functions: {', '.join(module.functions)})")
    return module, module[name]


def function(program: Source, fn: str | None = None, *, passes: str = DEFAULT_PASSES,
             device: str = "cpu", dims: Mapping[str, int] | None = None) -> Compiled:
    """`fn` as a Python callable returning its result (a tuple for several results)."""
    from .passes.pipeline import run_pipeline
    module, f = _primal(program, fn)
    single = len(f.result_types) == 1
    return Compiled(run_pipeline(module, passes), f.name, f.arg_names,
                    lambda outs, _: _one_or_tuple(outs, single), device, dims)


def value_and_grad(program: Source, fn: str | None = None,
                   wrt: str | Sequence[str] | None = None, *, passes: str = DEFAULT_PASSES,
                   device: str = "cpu", dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning ``(value, gradients)``.

    `wrt` is an input name (the gradient is one array) or a sequence of names (a tuple of
    arrays, in that order); by default the ``param`` inputs. Results that are not scalars
    are seeded with ones, so the gradient is that of their sum (as ``adc run``).
    """
    module, f = _primal(program, fn)
    names, single = _wrt_names(f, wrt)
    n = len(f.result_types)

    def finish(outs, _):
        return (_one_or_tuple(outs[:n], n == 1), _one_or_tuple(outs[n:], single))
    return Compiled(_reverse(module, f.name, names, passes), f"{f.name}_grad",
                    f.arg_names, finish, device, dims)


def grad(program: Source, fn: str | None = None, wrt: str | Sequence[str] | None = None, *,
         passes: str = DEFAULT_PASSES, device: str = "cpu",
         dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning the gradients only (see `value_and_grad`)."""
    c = value_and_grad(program, fn, wrt, passes=passes, device=device, dims=dims)
    finish = c._finish
    c._finish = lambda outs, named: finish(outs, named)[1]
    return c


def vjp(program: Source, fn: str | None = None, wrt: str | Sequence[str] | None = None, *,
        passes: str = DEFAULT_PASSES, device: str = "cpu",
        dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning ``(value, pullback)``; ``pullback(*cotangents)`` returns the
    vector-Jacobian products for `wrt` (shaped as in `value_and_grad`).

    One cotangent per float result, of that result's shape. The adjoint is compiled once,
    from ``sum(result * cotangent)``; each pullback call reruns the forward sweep rather
    than keeping the primal call's intermediates.
    """
    from .passes.pipeline import run_pipeline
    module, f = _primal(program, fn)
    names, single = _wrt_names(f, wrt)
    seeded, ct_names = _seeded(module, f)
    adjoint = Compiled(_reverse(seeded, seeded.main.name, names, passes), seeded.main.name
                       + "_grad", f.arg_names + ct_names, lambda outs, _: outs, device, dims)
    n, n_seeds = len(f.result_types), len(ct_names)

    def finish(outs, named):
        def pullback(*cts):
            if len(cts) != n_seeds:
                raise TypeError(f"pullback takes {n_seeds} cotangent(s), got {len(cts)}")
            grads = adjoint.call({**named, **dict(zip(ct_names, cts))})[n_seeds:]
            return _one_or_tuple(grads, single)
        return _one_or_tuple(outs, n == 1), pullback
    return Compiled(run_pipeline(module, passes), f.name, f.arg_names, finish, device, dims)


def _second_order(pass_cls, program: Source, fn: str | None, wrt, passes: str, suffix: str):
    """Run `pass_cls` (``jvp`` or ``hvp``) on `fn`, between the cleanup passes."""
    from .passes.pipeline import run_pipeline
    module, f = _primal(program, fn)
    names, single = _wrt_names(f, wrt)
    out = run_pipeline(module, _around(passes, pass_cls(wrt=tuple(names), fn=f.name)))
    return out, out[f.name + suffix], f, names, single


def jvp(program: Source, fn: str | None = None, wrt: str | Sequence[str] | None = None, *,
        passes: str = DEFAULT_PASSES, device: str = "cpu",
        dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning ``(value, tangent)``: the results and their directional
    derivatives (forward mode, the ``jvp`` pass).

    It takes `fn`'s inputs followed by one tangent per input of `wrt`, named ``t_<input>``
    (see `Compiled.inputs`); each of value and tangent is one array for a single result,
    else a tuple.
    """
    from .passes.forward import Forward
    module, tfn, f, _, _ = _second_order(Forward, program, fn, wrt, passes, "_jvp")
    n = len(f.result_types)

    def finish(outs, _):
        return _one_or_tuple(outs[:n], n == 1), _one_or_tuple(outs[n:], n == 1)
    return Compiled(module, tfn.name, tfn.arg_names, finish, device, dims)


def hvp(program: Source, fn: str | None = None, wrt: str | Sequence[str] | None = None, *,
        passes: str = DEFAULT_PASSES, device: str = "cpu",
        dims: Mapping[str, int] | None = None) -> Compiled:
    """A callable returning Hessian-vector products (forward-over-reverse, the ``hvp``
    pass), shaped like `grad`'s result.

    It takes `fn`'s inputs followed by the direction: one tangent per input of `wrt`, named
    ``t_<input>``. Non-scalar results are seeded with ones, as in `grad`.
    """
    from .passes.hvp import HVP
    module, hfn, f, names, single = _second_order(HVP, program, fn, wrt, passes, "_hvp")

    def finish(outs, _):  # outs: results, gradients, then the products
        return _one_or_tuple(outs[len(outs) - len(names):], single)
    return Compiled(module, hfn.name, hfn.arg_names, finish, device, dims)


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
