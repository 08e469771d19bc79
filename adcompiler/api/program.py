"""The library layer: load programs, build functions and run them (the differentiating
convenience layer, `grad`, `jvp` and friends, is in `transforms`).

A program is given as a `Module`, TDSL or IR source text, or a path to a ``.tdsl``, ``.ir``
or ``.adcir`` file.
"""
from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping, Union

import numpy as np

from ..diagnostics import AdcError
from ..ir.builder import Builder
from ..ir.core import Block, Function, Module
from ..ir.types import DTYPES, TensorType

Source = Union[Module, str, "os.PathLike[str]"]
DEFAULT_PASSES = "inline,canonicalize,cse,dce"

__all__ = ["parse_tdsl", "parse_ir", "load", "tensor_type", "FunctionBuilder", "run"]


# ---- loading --------------------------------------------------------------------------

def parse_tdsl(text: str | bytes, filename: str = "<input>") -> Module:
    """TDSL source text -> IR module (the frontend's `compile_source`)."""
    from ..frontend import compile_source
    return compile_source(text, filename)


def parse_ir(text: str, filename: str = "<ir>", verify: bool = True) -> Module:
    """IR text (as `print_module` writes it) -> IR module, verified unless `verify=False`."""
    from ..ir.parser import parse_module
    module = parse_module(text, filename)
    if verify:
        from ..ir.verifier import verify as verify_module
        verify_module(module)
    return module


def load(source: Source) -> Module:
    """A `Module` as is; a path to a TDSL or IR file; or TDSL or IR source text. Which form a
    file or a text is follows `adcompiler.frontend`'s rule (extension; first line)."""
    from ..frontend import compile_file, path_kind, text_kind
    if isinstance(source, Module):
        return source
    if isinstance(source, os.PathLike) or (
            isinstance(source, str) and "\n" not in source and "{" not in source):
        path = os.fspath(source)
        if path_kind(path) == "ir":
            from ..files.read import read_bytes
            from ..frontend import decode
            return parse_ir(decode(read_bytes(path, "program"), path), path)
        return compile_file(path)
    if isinstance(source, str):
        return parse_ir(source) if text_kind(source) == "ir" else parse_tdsl(source)
    raise TypeError(f"expected a Module, a path or source text, got {type(source).__name__}")


# ---- building -------------------------------------------------------------------------

_TYPE = re.compile(r"\s*(\w+)\s*(?:\[(.*)\])?\s*\Z")


def tensor_type(text: str | TensorType) -> TensorType:
    """``"f32[B, 3]"`` -> ``TensorType("f32", ("B", 3))``; ``"f32"`` is a scalar."""
    if isinstance(text, TensorType):
        return text
    m = _TYPE.match(text)
    if not m or m.group(1) not in DTYPES:
        raise ValueError(f"not a tensor type: {text!r} (expected e.g. 'f32[B, 3]')")
    dims = [d.strip() for d in (m.group(2) or "").split(",") if d.strip()]
    return TensorType(m.group(1), tuple(int(d) if d.isdigit() else d for d in dims))


class FunctionBuilder(Builder):
    """A `Builder` positioned in the body of a new function with named inputs.

        fb = FunctionBuilder("f", {"x": "f32[3]", "w": "f32[3]"}, params=["w"])
        y = fb.emit("sum", fb.emit("mul", fb["x"], fb["w"]))
        fn = fb.finish(y, module=m)          # appends return(y); adds fn to m
    """

    def __init__(self, name: str, inputs: Mapping[str, TensorType | str],
                 params: Iterable[str] = ()):
        types = [tensor_type(t) for t in inputs.values()]
        super().__init__(Block(types, list(inputs)))
        self.name, self.params = name, set(params)

    def __getitem__(self, name: str):
        return next(a for a in self.block.args if a.name == name)

    def finish(self, *results, module: Module | None = None) -> Function:
        self.ret(list(results))
        fn = Function(self.name, self.block, [r.type for r in results], set(self.params))
        if module is not None:
            module.add(fn)
        return fn


# ---- running --------------------------------------------------------------------------

def _array_module(device: str):
    if device == "cpu":
        return np
    if device == "cuda":
        try:
            import cupy
        except ImportError as e:
            raise AdcError(f"device='cuda' needs CuPy ({e}); pip install 'adcompiler[cuda]'")
        return cupy
    raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def runner(module: Module, name: str, device: str = "cpu", donate: bool = False,
           fuse: bool = False):
    """An `adc_runtime.executor.Runner` of function `name`: on the CPU through the compiled
    executor (`adc_runtime.compiled`, bit-identical to the interpreter); on ``"cuda"``
    the module is fused and run by generated step code (`adc_runtime.cuda_step`: its
    groups as generated kernels, as ``adc run --device cuda`` runs them, and the softmax
    and norm adjoints as row kernels). With `donate`, results that replace inputs are
    written into the input arrays (see `Runner`). With `fuse`, runs of elementwise ops
    on the CPU are compiled into one loop each where numba is installed
    (`adc_runtime.fused_runs`): worth its compile time for a function called many times,
    such as a training step. A call whose predicted peak memory
    (`memory.limit.check_run_fits`) is past the limit is refused before it runs."""
    xp = _array_module(device)
    if device == "cuda":   # generated step code; the norms' adjoints left to its row kernels
        from adc_runtime.cuda_step import runner as cuda_runner
        from ..emit.cuda import ensure_fused, kernel_specs
        fused = ensure_fused(module, rows=True)
        r = cuda_runner(fused, name, kernel_specs(fused), xp)
    else:
        from adc_runtime.compiled import CompiledExecutor
        from adc_runtime.executor import Runner
        def make(dims):   # for each new binding of the dims: refused past the limit
            check_run_fits(module, name, dims)
            return CompiledExecutor(module, xp, dims, fuse=fuse)
        from ..memory.limit import check_run_fits
        r = Runner(module, name, xp, make)
    r.donate = donate
    from ..labels import label_check
    check = label_check(module[name])
    if check is not None:
        r.checks.append(check)
    return r


def run(program: Source, fn: str | None = None, inputs: Mapping[str, Any] | None = None, *,
        device: str = "cpu", dims: Mapping[str, int] | None = None, **named: Any) -> list:
    """Run function `fn` (default: the module's main function) on named input arrays.

    Inputs come from `inputs` and/or keywords; floats are converted to the declared dtype.
    Returns the list of results, NumPy arrays (CuPy arrays with ``device="cuda"``).
    """
    module = load(program)
    name = fn or module.main.name
    if name not in module:
        raise AdcError(f"no function '{name}' (functions: {', '.join(module.functions)})")
    outs, _ = runner(module, name, device)({**(inputs or {}), **named}, dims)
    return list(outs)


def with_executor(module: Module, name: str, device: str, executor, donate: bool = False):
    """`runner` of `name` whose executors are of class `executor` (an `Executor`)."""
    r = runner(module, name, device, donate)
    r.make_executor = lambda dims: executor(r.module, r.xp, dims)
    return r
