"""`Compiled`: the callable a transform returns. It binds positional and named arrays to
the compiled function's inputs, runs it (one runner, made on the first call) and turns the
outputs into what the call returns (`finish`, from a `spec` that is data, so a `Compiled`
saves and pickles as IR text plus metadata).

A saved `Compiled` is one IR file whose first line is a comment holding JSON metadata (the
function, its inputs and output names, what the call returns: `finish`'s spec, the dtype,
device, bound dims and vmap axes); IR comments are ignored, so ``adc run`` and `adc.load`
read the same file as a plain program. Pickling goes through the same text: nothing but IR
text and JSON is stored, and loading runs no code from the file."""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from ..diagnostics import AdcError
from ..ir.core import Module
from .derive import reverse
from .outputs import output_names
from .program import runner
from .wrt import Shape, one_or_tuple
from ..ops.random import KEY_INPUT

HEADER = "// adc-compiled "


def _seed(seed) -> int:
    """A seed checked: an integer in [0, 2**64)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    return seed


class Compiled:
    """A compiled function of `module`, callable with positional or named arrays.

    `spec` says what the call returns from the function's list of outputs (`finish`): the
    transform (``kind``), the number of the primal's results, the differentiated inputs and
    how their gradients are packed, ``has_aux``. It is data, so a `Compiled` saves, loads and
    pickles as its IR text plus this metadata (`to_text`). `in_axes` maps the
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
        return output_names(self.module, self.module[self.fn_name])

    def bind(self, args: tuple, kwargs: dict) -> dict:
        """Positional and keyword arguments -> named inputs, checked like a Python call."""
        # the key input of a program that draws is given by name or drawn from the seed
        positional = [k for k in self.inputs if k != KEY_INPUT]
        if len(args) > len(positional):
            raise TypeError(f"{self.fn_name}() takes {len(positional)} inputs, "
                            f"got {len(args)}")
        named = dict(zip(positional, args))
        for k, v in kwargs.items():
            if k not in self.inputs:
                raise TypeError(f"{self.fn_name}() has no input {k!r} "
                                f"(inputs: {', '.join(self.inputs)})")
            if k in named:
                raise TypeError(f"{self.fn_name}() got input {k!r} twice")
            named[k] = v
        missing = [k for k in self.inputs if k not in named and k != KEY_INPUT]
        if missing:
            raise TypeError(f"{self.fn_name}() is missing input {missing[0]!r}")
        return named

    def call(self, named: Mapping[str, Any], seed: int | None = None) -> list:
        """Run on named inputs; a program that draws random values draws from `seed`
        (default: the transform's ``seed=``) unless `named` holds its key input."""
        if self._runner is None:
            self._runner = runner(self.module, self.fn_name, self.device)
        self._runner.seed = _seed(self.spec.get("seed", 0) if seed is None else seed)
        if self.in_axes:   # the batch pass reads each batched input's examples on axis 0
            import numpy as np
            named = {k: np.moveaxis(np.asarray(v), self.in_axes[k], 0)
                     if self.in_axes.get(k) else v for k, v in named.items()}
        outs = list(self._runner(named, self.dims)[0])
        return _to_bf16(outs) if self.dtype == "bf16" else outs

    def finish(self, outs: list, named: dict) -> Any:
        return finish(self.spec, outs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "seed" in kwargs and "seed" not in self.inputs:   # this call's seed
            seed = _seed(kwargs.pop("seed"))
            return self.reseeded(seed)(*args, **kwargs)
        params = None
        if "params" in kwargs and "params" not in self.inputs:
            params = kwargs.pop("params")
        elif args and isinstance(args[0], Mapping):
            params, args = args[0], args[1:]
        if params is None:
            named = self.bind(args, kwargs)
            return self.finish(self.call(named), named)
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a dict of arrays by input name (or nested dicts "
                            f"and lists by path), got {type(params).__name__}")
        from ..files.paths import is_nested
        if is_nested(params):   # nested dicts and lists, keyed by path: returned so
            return self._call_with_tree(params, args, kwargs)
        return self._call_with_params(dict(params), args, kwargs)

    def _call_with_tree(self, params, args: tuple, kwargs: dict) -> Any:
        """`params` as nested dicts and lists (a pytree) whose leaves are the inputs' paths
        (``{"m": {"blocks": [{"W": ...}, ...]}}``); the gradients come back the same way."""
        from ..files.paths import flat_paths, join, nest, split, stacks_of
        fn = self.module[self.fn_name]
        flat = join(fn, flat_paths(params), "params", self.inputs)
        out = self._call_with_params(flat, args, kwargs)
        stacks, names = stacks_of(fn), set(self.inputs)

        def renest(x):
            if isinstance(x, dict) and x and set(x) <= names:
                if self.in_axes:   # each result's examples on axis 0, before its layers
                    x = {k: _layers_first(v, k, stacks) for k, v in x.items()}
                return nest(split(stacks, x))
            if isinstance(x, tuple):
                return tuple(renest(v) for v in x)
            return x
        return renest(out)

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
                self._variants[names] = gradient(
                    self.module, self.spec["primal"], list(names), self.spec, self.device,
                    self.dims, self.dtype, style="dict")
            target = self._variants[names]
        elif self.in_axes and self.spec["kind"] in ("grad", "value_and_grad") and \
                not self.spec["explicit"] and set(self.spec["wrt"]) == set(params):
            # a batched gradient of the params given: returned as a dict, as unbatched
            named = self.bind((), {**positional, **kwargs, **params})
            return finish({**self.spec, "style": "dict"}, self.call(named))
        named = target.bind((), {**positional, **kwargs, **params})
        return target.finish(target.call(named), named)

    def reseeded(self, seed: int) -> "Compiled":
        """This callable drawing from `seed` (it shares the compiled module)."""
        import copy
        other = copy.copy(self)
        other.spec = {**self.spec, "seed": seed}
        other._runner, other._variants = None, {}
        return other

    def save(self, path) -> None:
        """Write the program and what the call needs as one IR file (`load_compiled`)."""
        save(self, path)

    def __reduce__(self):
        return compiled_from_text, (to_text(self),)

    def __repr__(self) -> str:
        return f"<Compiled {self.fn_name}({', '.join(self.inputs)})>"


def _layers_first(a, name: str, stacks: Mapping):
    """A batched result of a stacked input with its layer axes before the batch axis, so
    that splitting it by layer leaves each layer's examples on axis 0."""
    import numpy as np
    depth = sum(1 for p in stacks if name.startswith(p + "."))
    return np.moveaxis(a, 0, depth) if depth else a


def gradient(module: Module, fn: str, names: list[str], spec: dict, device, dims, dtype,
              style: str) -> Compiled:
    """A `grad` or `value_and_grad` callable of `fn` in `module` differentiating `names`."""
    f = module[fn]
    spec = {**spec, "primal": fn, "results": len(f.result_types), "wrt": list(names),
            "style": style}
    derived = reverse(module, fn, names, spec["passes"], (0,) if spec["has_aux"] else (),
                       spec["remat"], dims)
    return Compiled(derived, f"{fn}_grad", f.arg_names, spec, device, dims, dtype)


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


# ---- saved as IR text plus metadata ------------------------------------------------

def to_text(compiled) -> str:
    from ..ir.printer import print_module
    meta = {"fn": compiled.fn_name, "inputs": compiled.inputs, "outputs": compiled.outputs,
            "spec": compiled.spec, "device": compiled.device, "dims": compiled.dims,
            "dtype": compiled.dtype, "in_axes": compiled.in_axes}
    return HEADER + json.dumps(meta) + "\n" + print_module(compiled.module)


def compiled_from_text(text: str, filename: str = "<compiled>"):
    """A `Compiled` from `to_text`'s output."""
    from .program import parse_ir
    first, _, rest = text.partition("\n")
    if not first.startswith(HEADER):
        raise AdcError(f"{filename}: not a saved adc program (its first line is not "
                       f"'{HEADER.strip()} {{...}}')")
    try:
        meta = json.loads(first[len(HEADER):])
        module = parse_ir(text, filename)
        c = Compiled(module, meta["fn"], meta["inputs"], meta["spec"], meta["device"],
                     meta["dims"], meta["dtype"])
        c.in_axes = dict(meta["in_axes"])
    except (ValueError, KeyError, TypeError) as e:
        raise AdcError(f"{filename}: bad metadata line ({type(e).__name__}: {e})") from None
    if c.fn_name not in module:
        raise AdcError(f"{filename}: no function '{c.fn_name}'")
    return c


def save(compiled, path) -> None:
    from ..files.write import save_text
    save_text(os.fspath(path), to_text(compiled))


def load_compiled(source):
    """A `Compiled` saved by ``Compiled.save`` (a path), or its text."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and
                                           not source.startswith(HEADER)):
        from ..files.read import read_bytes
        path = os.fspath(source)
        raw = read_bytes(path, "compiled program", f"cannot read '{path}': no such file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise AdcError(f"'{path}' is not a saved compiled program (not UTF-8 text)") \
                from None
        return compiled_from_text(text, path)
    return compiled_from_text(source)
