"""`check_grads` of a Python function: its derivatives at some arguments checked against
central differences in float64 (the checks of `derivatives.check_grads`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..frontend.python import bind_arguments, compile_specialized, entry_specs


def check_grads_python(f, args: tuple, order: int = 1, *, argnums=0, **options: Any):
    """Check `f`'s derivatives at `args` (a tuple of its arguments) with respect to the
    arguments `argnums`; returns the relative error of each check."""
    from .derivatives import check_grads
    if not isinstance(args, tuple):
        raise TypeError("check_grads of a Python function takes its arguments as a tuple")
    args = tuple(np.asarray(a, np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
                 else a for a in args)
    specs, values = entry_specs(bind_arguments(f, args, {}))
    module, spec = compile_specialized(f, specs)
    nums = [argnums] if isinstance(argnums, int) else list(argnums)
    wrt = [n for k in nums for n, lf in zip(spec.inputs[k], [x for x in specs[k].leaves
                                                               if x.runtime])
           if lf.type.is_float]
    inputs = dict(zip([n for names in spec.inputs for n in names], values))
    return check_grads(module, inputs, order, fn=spec.name, wrt=wrt, **options)


def check_grads_aware(tdsl_check_grads):
    import functools
    import inspect

    @functools.wraps(tdsl_check_grads)
    def check_grads(program, inputs, order: int = 1, **kwargs):
        if inspect.isfunction(program):
            return check_grads_python(program, inputs, order, **kwargs)
        return tdsl_check_grads(program, inputs, order, **kwargs)
    return check_grads


from .derivatives import check_grads as _check_grads  # noqa: E402

check_grads = check_grads_aware(_check_grads)
