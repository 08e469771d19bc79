"""`show`: a derivative as readable Python source.

    adc.show(loss, params, x, y, mode="reverse")          # prints the source

The derivative program (``reverse``: value and gradient; ``jvp``: value and directional
derivative; ``hvp``: Hessian-vector products; ``function``: the function alone) is emitted
as a standalone NumPy module (`adcompiler.emit.python`), one line per op, each group of lines
under a comment naming the file and line of the user's code it comes from.
"""
from __future__ import annotations

from typing import Any

import sys

from ..diagnostics import AdcError

MODES = {"reverse": "value_and_grad", "jvp": "jvp", "hvp": "hvp", "function": "function",
         "forward": "function"}


def show(f, *args: Any, mode: str = "reverse", argnums=0, file=None, **kwargs: Any) -> None:
    """Print the `mode` derivative of `f` as Python source to `file` (default: stdout).

    `f` is a Python function with example arguments (their dtypes and shapes, and the
    values of compile-time arguments, pick the specialization shown), a transform of one
    that has been called once (then no arguments are needed), or a TDSL/IR program (its
    main function; `argnums` picks the inputs).
    """
    from .pyfunc import PyTransform, is_python_function
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    kind = MODES[mode]
    if isinstance(f, PyTransform):
        if args or kwargs:
            f = f.__wrapped__
        elif len(f.cache) == 1:
            entry = next(iter(f.cache.values()))
            return emitted(PyTransform(f.f, kind, f.argnums).build(entry), file,
                           entry.module)
        else:
            raise TypeError("show() needs example arguments: this transform has "
                            f"{len(f.cache)} compiled specializations")
    if is_python_function(f):
        if not args and not kwargs:
            raise TypeError("show() of a Python function needs example arguments (adc "
                            "compiles a function for the dtypes and shapes of its "
                            "arguments): show(f, x, y, mode=...)")
        t = PyTransform(f, kind, argnums)
        entry, _ = t.entry(args, kwargs)
        return emitted(entry.compiled, file, entry.module)
    from . import transforms
    if args or kwargs:
        raise TypeError("show() of a TDSL program takes no arguments")
    if kind == "function":
        return emitted(transforms.function(f), file)
    if not isinstance(argnums, (int, tuple, list)):
        raise AdcError("argnums must be an int or a tuple of ints")
    return emitted(getattr(transforms, kind)(f, argnums=argnums), file)


def emitted(compiled, file=None, python=None) -> None:
    """Print the source of `compiled` (its module, the function it runs last); the lines of
    the Python files that the functions of module `python` were compiled from are quoted
    in the provenance comments."""
    import linecache
    from ..emit.python import emit_python
    sources = {}
    for fn in (python.functions.values() if python is not None else ()):
        if fn.loc is not None and fn.loc.file not in sources:
            sources[fn.loc.file] = "".join(linecache.getlines(fn.loc.file))
    print(emit_python(compiled.module, compiled.fn_name, sources=sources),
          file=file or sys.stdout)
