"""The ``train-mode`` pass: the ops that behave differently in training and evaluation
(those with a ``training`` option: `dropout`, `batchnorm_running`) set to training.

A program runs in evaluation mode unless this pass ran (tdsl.md section 9): the derivative
passes (`adcompiler.passes.ad`) and training steps apply it to what they differentiate, and
``adc run --mode forward --train-mode`` and a library call with ``training=True`` to the
function they run.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Module
from ..ops.registry import REGISTRY, has_trait
from .pipeline import ModulePass, register_pass


def set_training(module: Module, fn: str | None = None) -> Module:
    """Set ``training`` on the moded ops of `fn` and the functions it calls (every function
    of `module` when `fn` is None), in place."""
    names, seen = list(module.functions) if fn is None else [fn], set()
    moded = {n for n, d in REGISTRY.items() if d.option("training") is not None}
    while names:
        name = names.pop()
        if name in seen or name not in module:
            continue
        seen.add(name)
        for op in module[name].walk():
            if has_trait(op, "calls"):
                names.append(op.attrs["callee"])
            elif op.name in moded and not op.attrs.get("training"):
                op.attrs = {**op.attrs, "training": True}
    return module


@register_pass("train-mode")
@dataclass(frozen=True)
class TrainMode(ModulePass):
    """Training behaviour for function `fn` and its callees (default: every function)."""

    fn: str = ""

    def run(self, module: Module) -> Module:
        return set_training(module, self.fn or None)
