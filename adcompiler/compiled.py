"""`Compiled`: the callable a transform returns. It binds positional and named arrays to
the compiled function's inputs, runs it (one runner, made on the first call) and turns the
outputs into what the call returns (`finish`, from a `spec` that is data, so a `Compiled`
saves and pickles as IR text plus metadata: `adcompiler.artifact`)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .api import runner
from .diagnostics import AdcError
from .ir.core import Module
from .wrt import Shape, one_or_tuple


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
                from .transforms import gradient
                self._variants[names] = gradient(
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
        return one_or_tuple(outs, n == 1)
    if kind == "jvp":
        return one_or_tuple(outs[:n], n == 1), one_or_tuple(outs[n:], n == 1)
    if kind == "hvp":   # results, gradients, then the products
        return shape.pack(outs[len(outs) - len(shape.names):])
    aux = one_or_tuple(outs[1:n], n == 2) if spec["has_aux"] else None
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
