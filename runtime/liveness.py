"""When each value of a block dies: the rule the executor frees by and the compiler's
memory model and buffer planner predict with; and what calls need of the interpreter.

A function with the attribute ``borrows_args = true`` (rematerialization emits them) does
not copy its arguments into its frame, so each is counted once: an operand whose last use
in the caller is the call *moves* into the callee (the caller stops counting it when the
call begins, the callee counts it from its start until its last use there); any other
operand is *borrowed* (the caller counts it throughout; the callee neither counts nor frees
it, nor returns it)."""
from __future__ import annotations

from typing import Any


def last_uses(block, borrowed=()) -> dict[int, list]:
    """For each op index, the values defined in `block` whose last use is that op (-1:
    arguments never used). The compiler's memory model uses this same rule. `borrowed`:
    positions of arguments that the block's frame does not own (left out)."""
    last: dict[Any, int] = {}
    for j, v in enumerate(block.args):
        if j not in borrowed:
            last[v] = -1
    for k, op in enumerate(block.ops):
        for v in op.results:
            last[v] = k
        for inner in op.walk():
            for v in inner.operands:
                if v in last:
                    last[v] = k
    table: dict[int, list] = {}
    for v, k in last.items():
        table.setdefault(k, []).append(v)
    return table


def borrows_args(fn) -> bool:
    """Whether `fn` takes its arguments without copying them (module doc)."""
    return bool(fn.attrs.get("borrows_args"))


def borrowed_positions(op, dying) -> frozenset:
    """The operands of `op` (a call of a function that borrows its arguments) that stay the
    caller's: all but the first occurrence of each value in `dying` (those that die at
    `op`, which move into the callee)."""
    moved, out = set(), set()
    for j, v in enumerate(op.operands):
        if v in dying and v not in moved:
            moved.add(v)
        else:
            out.add(j)
    return frozenset(out)


FRAMES_PER_CALL = 12   # Python frames one level of calls and loops takes, with room to spare


def frames_needed(module) -> int:
    """A recursion limit deep enough for the longest chain of calls in `module` (found
    without recursion; a recursive function counts once)."""
    callees = {name: {o.attrs["callee"] for o in fn.walk() if o.name == "call"}
               for name, fn in module.functions.items()}
    depth: dict[str, int] = {}
    for root in callees:
        stack = [(root, iter(callees[root]))]
        on_stack = {root}
        while stack:
            name, it = stack[-1]
            nxt = next((c for c in it if c in callees and c not in depth), None)
            if nxt is not None and nxt not in on_stack:
                stack.append((nxt, iter(callees[nxt])))
                on_stack.add(nxt)
                continue
            if nxt is not None:       # a cycle: recursion the limit cannot bound
                continue
            depth[name] = 1 + max((depth.get(c, 0) for c in callees[name]), default=0)
            stack.pop()
            on_stack.discard(name)
    return 1000 + FRAMES_PER_CALL * max(depth.values(), default=0)
