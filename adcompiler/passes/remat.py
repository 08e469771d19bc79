"""The ``remat`` pass: checkpointing schedules for the adjoint program (see `adcompiler.remat`).

Runs on the output of ``reverse``::

    reverse{wrt=W},remat{policy=sqrt},dce
    remat{policy=budget:64MiB bind=B=32}

`bind` gives the sizes of symbolic dimensions, which byte budgets need.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.core import Module
from .pipeline import ModulePass, register_pass


def parse_bindings(items) -> dict[str, int]:
    out = {}
    for item in items:
        name, eq, val = str(item).partition("=")
        if not eq or not val.strip().isdigit():
            raise AdcError(f"bad binding '{item}' (expected NAME=INT, e.g. B=32)")
        out[name.strip()] = int(val)
    return out


@register_pass("remat")
@dataclass(frozen=True)
class Remat(ModulePass):
    """Rematerialization with `policy` (none, sqrt, revolve:C, budget:SIZE, min-memory) on
    the adjoint function `fn` (default: every function made by ``reverse``)."""

    policy: str = "none"
    fn: str = ""
    bind: tuple[str, ...] = ()

    def __call__(self, module: Module) -> Module:
        from ..remat.schedule import schedule
        return schedule(module, self.policy, self.fn, parse_bindings(self.bind)).module
