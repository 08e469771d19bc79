"""The Python front end: a function written with NumPy, parsed from its own source (not
traced) and lowered to the same IR as TDSL, through the TDSL syntax tree and lowering.

    module, spec, inputs = compile_python(f, (x, w), {})

`compile_python` specializes `f` to its arguments: arrays, NumPy scalars and Python floats
are run-time inputs (typed by their dtype and shape); Python ints, bools, None and strings
are compile-time values. Arguments may be pytrees (nested dicts, lists and tuples; see
`pytree`). The modules: `source` (the function's text and positions), `lowerer`
(statements), `exprs` (expressions), `calls`, `numpy_table`, `numpy_shapes` and
`numpy_calls` (calls), `callees` (calls of Python functions), `signature` (what a
compilation is specialized on) and `module` (the IR module).
"""
from __future__ import annotations

import inspect

from .module import Spec, compile_specialized
from .signature import ArgumentError, ParamSpec, entry_specs
from .source import PythonError, function_source

__all__ = ["compile_python", "bind_arguments", "entry_specs", "compile_specialized",
           "PythonError", "ParamSpec", "Spec", "function_source", "ArgumentError"]


def bind_arguments(f, args: tuple, kwargs: dict) -> dict:
    """`f`'s parameters bound to a call's arguments, defaults included (in order)."""
    try:
        bound = inspect.signature(f).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{getattr(f, '__name__', f)}(): {e}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def compile_python(f, args: tuple = (), kwargs: dict | None = None):
    """The IR module of `f` specialized to a call with `args` and `kwargs`, the entry's
    `Spec` and the run-time leaves of the arguments, in the IR function's input order."""
    bound = bind_arguments(f, args, kwargs or {})
    specs, values = entry_specs(bound)
    module, spec = compile_specialized(f, specs)
    return module, spec, values
