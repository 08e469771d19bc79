"""Remat policies (spec §7): ``none``, ``sqrt``, ``revolve:C``, ``budget:SIZE``, ``min-memory``,
and the ``mincut`` baseline."""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..memory.sizes import format_bytes, parse_size

KINDS = ("none", "sqrt", "revolve", "budget", "min-memory", "mincut")


@dataclass(frozen=True)
class Policy:
    kind: str
    checkpoints: int = 0   # revolve: slots per loop, the loop's initial state included
    budget: int = 0        # budget: bytes

    def __str__(self) -> str:
        if self.kind == "revolve":
            return f"revolve:{self.checkpoints}"
        if self.kind == "budget":
            return f"budget:{format_bytes(self.budget).replace(' ', '')}"
        return self.kind


def parse_policy(text: str) -> Policy:
    kind, _, arg = str(text).strip().partition(":")
    if kind not in KINDS:
        raise AdcError(f"unknown remat policy '{text}' (policies: none, sqrt, revolve:C, "
                       f"budget:SIZE, min-memory, mincut)")
    if kind == "revolve":
        if not arg.isdigit() or int(arg) < 1:
            raise AdcError(f"remat policy '{text}': revolve:C needs a number of checkpoints "
                           f"C >= 1, e.g. revolve:4")
        return Policy(kind, checkpoints=int(arg))
    if kind == "budget":
        if not arg:
            raise AdcError(f"remat policy '{text}': budget:SIZE needs a size, e.g. budget:64MiB")
        budget = parse_size(arg)
        if budget < 1:  # 0 would read as "no budget" downstream; no program fits in it
            raise AdcError(f"remat policy '{text}': the budget must be at least 1 byte")
        return Policy(kind, budget=budget)
    if arg:
        raise AdcError(f"remat policy '{kind}' takes no argument, got '{text}'")
    return Policy(kind)
