"""Activity analysis: which values need a derivative.

A value is *active* when it is both

* **varied**: it depends differentiably on an input in `wrt` (forward propagation through
  ops that are neither ``no_grad`` nor ``stop_gradient``), and
* **useful**: a returned result depends differentiably on it (backward propagation).

Only float values are ever active; integer and bool values carry no derivative. Loops are
solved by a fixed point over their carries: a carried block argument is varied when its
initial value or the value yielded for it is varied, and useful when the loop's final value
of it is useful or a useful value of the body reads it. Calls are treated conservatively:
every float result of a call with a varied argument is varied, and every float argument of
a call with a useful result is useful.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.core import Block, Function, Module, Op, Value
from ..ops.registry import ends, has_trait
from .pipeline import FunctionPass, register_pass


def _blocks_derivative(op: Op) -> bool:
    """Whether `op` has a zero derivative by declaration."""
    return has_trait(op, "no_grad")


def _mark(values, into: set[Value]) -> bool:
    """Add the float values of `values` to `into`; whether anything was new."""
    new = {v for v in values if v.type.is_float} - into
    into |= new
    return bool(new)


def _forward(block: Block, varied: set[Value]) -> None:
    for op in block.ops:
        if has_trait(op, "terminator") or _blocks_derivative(op):
            continue
        if has_trait(op, "loop"):
            _forward_loop(op, varied)
        else:
            for region in op.regions:
                _forward(region, varied)
            if any(v in varied for v in op.operands):
                _mark(op.results, varied)


def _forward_loop(op: Op, varied: set[Value]) -> None:
    body, n = op.regions[0], op.attrs["n_carry"]
    carry_args = body.args[1:1 + n]
    _mark([a for a, v in zip(body.args[1:], op.operands) if v in varied], varied)
    yielded = body.ops[-1].operands
    while True:
        _forward(body, varied)
        if not _mark([a for a, v in zip(carry_args, yielded[:n]) if v in varied], varied):
            break
    _mark([r for r, a in zip(op.results[:n], carry_args) if a in varied], varied)
    _mark([r for r, v in zip(op.results[n:], yielded[n:]) if v in varied], varied)


def _backward(block: Block, useful: set[Value]) -> None:
    for op in reversed(block.ops):
        if has_trait(op, "terminator") or _blocks_derivative(op):
            continue
        if not any(r in useful for r in op.results):
            continue
        if has_trait(op, "loop"):
            _backward_loop(op, useful)
            continue
        for region in op.regions:
            _backward(region, useful)
        _mark(op.operands, useful)


def _backward_loop(op: Op, useful: set[Value]) -> None:
    body, n = op.regions[0], op.attrs["n_carry"]
    carry_args = body.args[1:1 + n]
    yielded = body.ops[-1].operands
    carries = {j for j in range(n) if op.results[j] in useful}
    _mark([y for r, y in zip(op.results[n:], yielded[n:]) if r in useful], useful)
    while True:
        _mark([carry_args[j] for j in carries] + [yielded[j] for j in carries], useful)
        _backward(body, useful)
        grown = carries | {j for j, a in enumerate(carry_args) if a in useful}
        if grown == carries:
            break
        carries = grown
    _mark([v for a, v in zip(body.args[1:], op.operands) if a in useful], useful)


def varied_values(fn: Function, wrt: list[str]) -> set[Value]:
    for w in wrt:
        if w not in fn.arg_names:
            raise AdcError(f"'{w}' is not an input of '{fn.name}' "
                           f"(inputs: {', '.join(map(str, fn.arg_names))})", fn.loc)
    varied: set[Value] = set()
    _mark([fn.arg(w) for w in wrt], varied)
    _forward(fn.body, varied)
    return varied


def useful_values(fn: Function, results: list[Value] | None = None) -> set[Value]:
    if results is None:
        term = fn.body.ops[-1] if fn.body.ops else None
        if term is None or not ends(term, "function"):
            raise ValueError(f"function '{fn.name}' has no return op; pass `results`")
        results = term.operands
    useful: set[Value] = set()
    _mark(results, useful)
    _backward(fn.body, useful)
    return useful


def analyze_activity(fn: Function, wrt: list[str],
                     results: list[Value] | None = None) -> set[Value]:
    """The active values of `fn` for differentiation with respect to the inputs `wrt`.

    `results` defaults to the operands of the function's ``return`` op; pass it when the
    body's return has been detached.
    """
    return varied_values(fn, list(wrt)) & useful_values(fn, results)


@register_pass("activity")
@dataclass(frozen=True)
class Activity(FunctionPass):
    """Leave the module unchanged; with `report`, list each function's active values.

    `wrt` defaults to each function's ``param`` inputs; functions without any are skipped.
    """

    wrt: tuple[str, ...] = ()
    report: bool = False

    def run_on_function(self, fn: Function, module: Module) -> None:
        wrt = list(self.wrt) or [a for a in fn.arg_names if a in fn.params]
        if not self.report or not wrt:
            return
        active = analyze_activity(fn, wrt)
        order = list(fn.args) + [r for op in fn.walk() for r in op.results]
        order += [a for op in fn.walk() for r in op.regions for a in r.args]
        names = [v.name or f"#{v.uid}" for v in order if v in active]
        sys.stderr.write(f"// activity of {fn.name} wrt {', '.join(wrt)}: "
                         f"{len(names)} active: {' '.join(names)}\n")
