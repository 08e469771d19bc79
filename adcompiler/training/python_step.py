"""`train_step` of a Python loss: ``loss_fn(params, *batch)`` with `params` a pytree (nested
dicts, lists and tuples of arrays), compiled per signature like the other transforms of
Python functions (`adcompiler.api.pyfunc`), then trained by the compiled training step of its IR.

    step = adc.train_step(loss_fn, adc.optim.adam(1e-3))
    state = step.init(params, x, y)        # or pass state=None to the first call
    params, state, metrics = step(params, state, x, y)

The state mirrors the params' structure, as optax keeps it: ``{"step": ..., "exp_avg":
<params' tree>, ...}``, None where a leaf is not trained (an integer array, a constant).
"""
from __future__ import annotations

from typing import Any

from ..frontend.python import bind_arguments, compile_specialized, entry_specs, pytree
from .step import train_step as _train_step


class PyTrainStep:
    """The training step of Python loss `loss_fn`, whose first argument is trained."""

    def __init__(self, loss_fn, optimizer, **options: Any):
        self.f, self.optimizer, self.options = loss_fn, optimizer, options
        self.cache: dict = {}
        self.__name__ = getattr(loss_fn, "__name__", "loss")

    def compiled(self, params, batch: tuple):
        bound = bind_arguments(self.f, (params,) + tuple(batch), {})
        specs, values = entry_specs(bound)
        key = tuple(s.key() for s in specs)
        hit = self.cache.get(key)
        if hit is None:
            module, spec = compile_specialized(self.f, specs)
            names = iter(spec.inputs[0])
            trained = [next(names) if lf.runtime else None for lf in specs[0].leaves]
            wrt = [n for n, lf in zip(trained, specs[0].leaves)
                   if n is not None and lf.type.is_float]
            step = _train_step(module, self.optimizer, fn=spec.name, wrt=wrt,
                                  **self.options)
            hit = self.cache[key] = (step, spec, specs, wrt)
        step, spec, specs, wrt = hit
        named = dict(zip([n for names in spec.inputs for n in names], values))
        return step, specs[0], wrt, named

    def init(self, params, *batch) -> dict:
        """The optimizer state for `params` (the batch's shapes pick the compilation), a
        tree mirroring theirs."""
        step, ps, wrt, named = self.compiled(params, batch)
        return self._tree(step, ps, wrt, params, step.init({n: named[n] for n in wrt}))

    @staticmethod
    def _tree(step, ps, wrt: list, params, flat: dict) -> dict:
        """The step's flat state as a tree of `params`' structure (`state_tree`)."""
        from .state_tree import layout, to_tree
        _, tree = pytree.flatten(params)

        def regroup(by_name: dict):
            it = iter(wrt)
            return pytree.unflatten(tree, [by_name[next(it)] if lf.runtime and
                                           lf.type.is_float else None for lf in ps.leaves])
        return to_tree(flat, layout(step), regroup)

    @staticmethod
    def _flat(step, wrt: list, state) -> dict:
        """`_tree`'s inverse; a slot whose trained leaves do not match is an error."""
        from ..diagnostics import AdcError
        from .state_tree import from_tree, layout

        def ungroup(t, what: str, names: list) -> dict:
            leaves = [x for x in pytree.flatten(t)[0] if x is not None]
            if len(leaves) != len(names):
                raise AdcError(f"{what} has {len(leaves)} arrays where the params have "
                               f"{len(names)} trained ones")
            return dict(zip(names, leaves))
        return from_tree(state, layout(step), ungroup)

    def __call__(self, params, state, *batch):
        """One step: ``(params, state, metrics)``, the params in their own structure."""
        step, ps, wrt, named = self.compiled(params, batch)
        trained = {n: named[n] for n in wrt}
        from .state_tree import is_tree, layout
        tree = state is None or is_tree(state, layout(step))
        state = step.init(trained) if state is None else \
            self._flat(step, wrt, state) if tree else state
        data = {k: v for k, v in named.items() if k not in trained}
        new, state, metrics = step(trained, state, data)
        if tree:
            state = self._tree(step, ps, wrt, params, state)
        leaves, tree = pytree.flatten(params)
        it = iter(wrt)
        out = [new[next(it)] if lf.runtime and lf.type.is_float else x
               for x, lf in zip(leaves, ps.leaves)]
        return pytree.unflatten(tree, out), state, metrics

    def __repr__(self) -> str:
        return f"<adc.train_step of Python function {self.__name__}>"


def train_step_aware(tdsl_train_step):
    """`tdsl_train_step` that also takes a Python loss function (see `PyTrainStep`)."""
    import functools
    import inspect

    @functools.wraps(tdsl_train_step)
    def train_step(program, optimizer, *args, **kwargs):
        if inspect.isfunction(program):
            if args:
                raise TypeError("train_step of a Python function takes keyword options only")
            return PyTrainStep(program, optimizer, **kwargs)
        return tdsl_train_step(program, optimizer, *args, **kwargs)
    return train_step


train_step = train_step_aware(_train_step)
