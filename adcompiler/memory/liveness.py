"""Predicted peak live bytes of a function, by the runtime's accounting convention.

The convention (pinned by tests/test_memory.py against `adc_runtime.executor`):

* every SSA value counts the full size of its type, from the end of its defining op (or the
  start of its block, for block arguments) until its last use in its own block; an op with a
  region is a use of every outer value that region reads; views and aliases count in full;
* an op's results are all counted before its dead operands are freed, so the op's inputs and
  outputs are live together; an unused result is counted and freed at once;
* function inputs count from the start and outputs until the end (inputs and outputs
  included); a ``call`` counts its callee's frame on top of the caller's: the callee's
  arguments again, in full, unless it borrows them (``borrows_args``: an operand that dies
  at the call moves into the callee's frame, the others stay the caller's; see
  `adc_runtime.liveness`). A frame is the same at every call that moves the same operands,
  so it is walked once per function and moved operands, callees first (no recursion along
  chains of calls);
* a ``for`` loop counts its stacked outputs (``n`` x the slice) from its start, and per
  iteration the body's arguments (the ``i64`` index, the carries and the slices of the
  scanned inputs, each again in full) plus the body's own values. Every iteration has the same
  profile, so the body is walked once; the loop's operands stay live until it ends. A
  ``repeat`` counts as a loop without stacks, when it runs at all in its enclosing loop.

Temporaries inside kernels are not counted: the model, like the runtime, counts SSA values.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..ir.core import Block, Function, Module, Op, Value
from ..ops.registry import STRUCTURAL, has_trait
from .sizes import value_bytes


class _Unknown(Exception):
    """A call whose frame is not known yet (`_Walk.frame`)."""

    def __init__(self, key):
        self.key = key


@dataclass
class MemoryProfile:
    peak_bytes: int
    peak_op: Op | None = None          # the op during or after which the peak is reached
    live_at_peak: list[tuple[Value, int]] = field(default_factory=list)
    tracked_peak: int = 0              # the peak of the bytes of `tracked` values alone


class _Walk:
    def __init__(self, module: Module, dims: Mapping[str, int], tracked, capture_at):
        self.module, self.dims = module, dims
        self.tracked = tracked or set()
        self.capture_at = capture_at
        self.live = self.peak = self.tlive = self.tpeak = 0
        self.values: dict[Value, int] = {}
        self.current: Op | None = None
        self.peak_op: Op | None = None
        self.snapshot: list[tuple[Value, int]] = []
        self._plans: dict[int, dict] = {}
        self.frames: dict[tuple, tuple[int, int, int, int]] = {}   # (callee, borrowed) -> `frame`
        self.known_only = False     # a callee's walk: stop at a call of an unknown frame

    def bump(self, nbytes: int) -> None:
        self.live += nbytes
        if self.live > self.peak:
            self.peak, self.peak_op = self.live, self.current
        if self.capture_at is not None and self.live == self.capture_at and not self.snapshot:
            self.snapshot = sorted(self.values.items(), key=lambda kv: -kv[1])

    def add(self, v: Value) -> None:
        nb = value_bytes(v, self.dims)
        self.values[v] = self.values.get(v, 0) + nb
        if v in self.tracked:
            self.tlive += nb
            self.tpeak = max(self.tpeak, self.tlive)
        self.bump(nb)

    def drop(self, v: Value) -> None:
        nb = value_bytes(v, self.dims)
        self.live -= nb
        self.values[v] -= nb
        if not self.values[v]:
            del self.values[v]
        if v in self.tracked:
            self.tlive -= nb

    def block(self, block: Block, keep_results: bool = False,
              borrowed: frozenset = frozenset()) -> None:
        key = (id(block), borrowed) if borrowed else id(block)
        plan = self._plans.get(key)
        if plan is None:
            from adc_runtime.liveness import last_uses  # the rule the runtime frees by
            plan = self._plans[key] = last_uses(block, borrowed)
        for j, v in enumerate(block.args):
            if j not in borrowed:
                self.add(v)
        for v in plan.get(-1, ()):
            self.drop(v)
        for k, op in enumerate(block.ops):
            if has_trait(op, "terminator"):
                for v in plan.get(k, ()):
                    if not keep_results or v not in op.operands:
                        self.drop(v)
                return
            saved, self.current = self.current, op
            if has_trait(op, "calls") and \
                    self.module.functions[op.attrs["callee"]].attrs.get("borrows_args"):
                from adc_runtime.liveness import borrowed_positions
                self.call(op, borrowed_positions(op, set(plan.get(k, ()))))
            else:
                self.op(op)
            for v in op.results:
                self.add(v)
            self.current = saved
            for v in plan.get(k, ()):
                self.drop(v)

    def op(self, op: Op) -> None:
        """What `op` adds while it runs besides its results: its regions' or its callee's
        values, by its `memory` rule (`adcompiler.ops.structural`)."""
        d = STRUCTURAL.get(op.name)
        if d is not None and d.memory is not None:
            d.memory(self, op)

    def call(self, op: Op, borrowed: frozenset | None) -> None:
        """A call: its callee's frame on top of this one's. `borrowed`: the operands that
        stay this frame's when the callee borrows its arguments (the others move into the
        callee's frame for the call); None when it copies them all."""
        moved = []
        if borrowed is not None:
            moved = [v for j, v in enumerate(op.operands) if j not in borrowed]
            for v in moved:
                self._shift(v, -1)
        key = (op.attrs["callee"], borrowed)
        if key not in self.frames and self.known_only:
            raise _Unknown(key)
        peak, tpeak, rest, trest = self.frame(*key)
        if self.live + peak > self.peak:
            self.peak, self.peak_op = self.live + peak, self.current
        if self.capture_at is not None and not self.snapshot and \
                self.live + peak == self.capture_at:  # (the caller's values, at the call)
            self.snapshot = sorted(self.values.items(), key=lambda kv: -kv[1])
        self.tpeak = max(self.tpeak, self.tlive + tpeak)
        self.live += rest
        self.tlive += trest
        for v in moved:
            self._shift(v, 1)

    def _shift(self, v: Value, sign: int) -> None:
        """Stop (-1) or resume (+1) counting `v` here, without a new peak."""
        nb = sign * value_bytes(v, self.dims)
        self.live += nb
        if v in self.tracked:
            self.tlive += nb

    def frame(self, name: str, borrowed: frozenset | None) -> tuple[int, int, int, int]:
        """The frame of function `name` over the caller's live bytes, with the arguments at
        `borrowed` not its own (None: it copies them all): (its peak, its peak of tracked
        bytes, what it leaves live, tracked bytes left). Walked once per function and
        `borrowed`, callees first: a walk that meets a call whose frame is not known yet
        stops, and resumes after that frame (an explicit stack, no recursion)."""
        todo = [(name, borrowed)]
        while todo:
            key = todo[-1]
            if key in self.frames:
                todo.pop()
                continue
            f = self.module.functions[key[0]]
            w = _Walk(self.module, self.dims, self.tracked, None)
            w.frames, w._plans = self.frames, self._plans
            w.known_only = True
            try:
                w.block(f.body, keep_results=True, borrowed=key[1] or frozenset())
            except _Unknown as e:
                if e.key in todo:
                    raise ValueError(f"@{e.key[0]} calls itself: its frame has no bound") \
                        from None
                todo.append(e.key)
                continue
            for v in f.returned:
                w.drop(v)
            self.frames[key] = (w.peak, w.tpeak, w.live, w.tlive)
            todo.pop()
        return self.frames[name, borrowed]


def predict_peak(module: Module, fn: str | Function, dims: Mapping[str, int] | None = None,
                 tracked: set[Value] | None = None, detail: bool = False) -> MemoryProfile:
    """The peak live bytes of running `fn` with its symbols bound by `dims`.

    `tracked` values get their own peak (`tracked_peak`), e.g. the values a remat schedule
    stores for the reverse sweep; `detail` also records the live values at the peak.
    """
    f = module.functions[fn] if isinstance(fn, str) else fn
    w = _Walk(module, dict(dims or {}), tracked, None)
    w.block(f.body, keep_results=True)
    prof = MemoryProfile(w.peak, w.peak_op, [], w.tpeak)
    if detail:
        w2 = _Walk(module, dict(dims or {}), tracked, w.peak)
        w2.block(f.body, keep_results=True)
        prof.live_at_peak = w2.snapshot
    return prof
