"""`vmap`: a program, or a compiled transform of one, over a batch of examples.

    per_example = adc.vmap(adc.grad(loss, wrt="W"), in_axes={"x": 0, "labels": 0})
    grads = per_example(x=X, labels=Y, W=W)        # one gradient per row of X

It runs the ``batch`` pass on the function the callable runs (the adjoint program, for
`grad`), so the batch is one program run, not a Python loop: the compiled function sees
the examples on a leading axis, and the callable keeps its own way of shaping the results.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

from .program import Source
from ..diagnostics import AdcError
from .transforms import Compiled, function
from .axes import axes_by_input

__all__ = ["vmap"]

InAxes = Union[int, None, Sequence, Mapping[str, Any]]


def vmap(program: Source | Compiled, in_axes: InAxes = 0, *, fn: str | None = None,
         passes: str = "cse,dce", **options: Any) -> Compiled:
    """`program` (a TDSL/IR program, or a `Compiled` from `function`, `grad`,
    `value_and_grad`, `jvp` or `hvp`) mapped over a batch axis of the inputs in `in_axes`
    (default: axis 0 of every input). `in_axes` is an int or None for every input, a
    sequence by position, or a tree of dicts (and lists for the layers of a stacked group)
    by input path, as JAX takes it: an int or None applies to the whole subtree below it
    (`adcompiler.api.axes`). Every result gains the batch as axis 0; inputs left out are
    shared by all examples. `options` go to `function` for a program."""
    from ..passes.batch import Batch
    from ..passes.pipeline import parse_pipeline, run_pipeline
    inner = program if isinstance(program, Compiled) else function(program, fn, **options)
    if not inner.batchable:
        raise AdcError(f"vmap cannot batch '{inner.fn_name}': its result is a Python "
                       "function (a vjp pullback); vmap a grad or jvp instead")
    if any(inner.in_axes.values()):
        raise AdcError("vmap of a vmap needs the inner batch axes at 0 (in_axes=0)")
    axes = axes_by_input(in_axes, inner.module[inner.fn_name], inner.inputs)
    if not axes:
        raise TypeError("vmap needs at least one batched input (in_axes is all None)")
    batch = Batch(fn=inner.fn_name, inputs=tuple(k for k in inner.inputs if k in axes))
    module = run_pipeline(inner.module, [batch, *parse_pipeline(passes)])
    out = Compiled(module, inner.fn_name + "_batched", inner.inputs, inner.spec, inner.device,
                   inner.dims, inner.dtype)
    out.in_axes = axes
    return out
