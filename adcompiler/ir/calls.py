"""The call graph of a module, walked without recursion (chains of calls can be long:
rematerialization emits one function per distinct part of a checkpointing plan)."""
from __future__ import annotations

from ..ops.registry import has_trait
from .core import Module


def callees(module: Module, name: str) -> list[str]:
    """The functions that `name` calls, in order of first call."""
    seen: dict[str, None] = {}
    for op in module.functions[name].walk():
        if has_trait(op, "calls"):
            seen.setdefault(op.attrs["callee"], None)
    return list(seen)


def calls_bottom_up(module: Module, root: str) -> list[str]:
    """`root` and every function it reaches through calls, each after all it calls (a
    recursive cycle is entered once)."""
    order: list[str] = []
    done, open_ = set(), {root}
    stack = [(root, iter(callees(module, root)))]
    while stack:
        name, it = stack[-1]
        nxt = next((c for c in it if c not in done and c not in open_ and c in module), None)
        if nxt is not None:
            open_.add(nxt)
            stack.append((nxt, iter(callees(module, nxt))))
            continue
        stack.pop()
        open_.discard(name)
        done.add(name)
        order.append(name)
    return order
