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

__all__ = ["vmap"]

InAxes = Union[int, None, Sequence, Mapping[str, Any]]


def _axes(in_axes: InAxes, inputs: list[str]) -> dict[str, int]:
    """`in_axes` (an int or None for every input, a sequence by position, or a dict by
    name, missing names unbatched) as {batched input: axis}."""
    if in_axes is None or isinstance(in_axes, int):
        return {} if in_axes is None else {k: in_axes for k in inputs}
    if isinstance(in_axes, Mapping):
        for k in in_axes:
            if k not in inputs:
                raise TypeError(f"in_axes: {k!r} is not an input (inputs: {', '.join(inputs)})")
        items = in_axes.items()
    else:
        in_axes = list(in_axes)
        if len(in_axes) != len(inputs):
            raise TypeError(f"in_axes has {len(in_axes)} entries for {len(inputs)} inputs "
                            f"({', '.join(inputs)})")
        items = zip(inputs, in_axes)
    out = {}
    for k, a in items:
        if a is not None and (isinstance(a, bool) or not isinstance(a, int)):
            raise TypeError(f"in_axes[{k!r}] must be an int or None, got {a!r}")
        if a is not None:
            out[k] = a
    return out


def vmap(program: Source | Compiled, in_axes: InAxes = 0, *, fn: str | None = None,
         passes: str = "cse,dce", **options: Any) -> Compiled:
    """`program` (a TDSL/IR program, or a `Compiled` from `function`, `grad`,
    `value_and_grad`, `jvp` or `hvp`) mapped over a batch axis of the inputs in `in_axes`
    (default: axis 0 of every input). Every result gains the batch as axis 0; inputs left
    out are shared by all examples. `options` go to `function` for a program."""
    from ..passes.batch import Batch
    from ..passes.pipeline import parse_pipeline, run_pipeline
    inner = program if isinstance(program, Compiled) else function(program, fn, **options)
    if not inner.batchable:
        raise AdcError(f"vmap cannot batch '{inner.fn_name}': its result is a Python "
                       "function (a vjp pullback); vmap a grad or jvp instead")
    if any(inner.in_axes.values()):
        raise AdcError("vmap of a vmap needs the inner batch axes at 0 (in_axes=0)")
    axes = _axes(in_axes, inner.inputs)
    if not axes:
        raise TypeError("vmap needs at least one batched input (in_axes is all None)")
    batch = Batch(fn=inner.fn_name, inputs=tuple(k for k in inner.inputs if k in axes))
    module = run_pipeline(inner.module, [batch, *parse_pipeline(passes)])
    out = Compiled(module, inner.fn_name + "_batched", inner.inputs, inner.spec, inner.device,
                   inner.dims, inner.dtype)
    out.in_axes = axes
    return out
