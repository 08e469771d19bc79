"""Activity analysis: which values need a derivative.

A value is *active* when it is both

* **varied**: it depends differentiably on an input in `wrt` (forward propagation through
  ops that are neither ``no_grad`` nor ``stop_gradient``), and
* **useful**: a returned result depends differentiably on it (backward propagation).

Only float values are ever active; integer and bool values carry no derivative. In loops, a
carried block argument is varied when its initial value or the value yielded for it is
varied, and useful when the loop's final value of it is useful or a useful value of the
body reads it. Both are reachability in a graph of the function's values built in one walk,
so nested loops cost their size, not a fixed point's rounds per level. Calls are treated
conservatively: every float result of a call with a varied argument is varied, and every
float argument of a call with a useful result is useful.

The function's own block is swept in order (variation) and in reverse (usefulness) rather
than built into that graph: in SSA form each op sees its operands' (or results') final
state, so the sweep is exact, at a fraction of the graph's cost on large straight-line
programs. Only an op with regions (a loop) gets a graph, of itself alone.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.core import Block, Function, Module, Op, Value
from ..ops.registry import ends, has_trait, names_with
from .pipeline import FunctionPass, register_pass


def _blocks_derivative(op: Op) -> bool:
    """Whether `op` has a zero derivative by declaration."""
    return has_trait(op, "no_grad")


Graph = dict  # node (a Value, or an Op standing for all its results) -> successor nodes


def _link(graph: Graph, src, dst) -> None:
    succ = graph.get(src)
    if succ is None:
        graph[src] = [dst]
    else:
        succ.append(dst)


def _loop_forward(op: Op, args, carry_args, yielded, n: int):
    """Variation: a loop's initial values to its carried and sliced arguments, each yielded
    carry to its argument (the next step's), a carry's argument to the loop's final value
    and each yielded stacked value to the stacked result."""
    yield from zip(op.operands, args)
    yield from zip(yielded[:n], carry_args)
    yield from zip(carry_args, op.results[:n])
    yield from zip(yielded[n:], op.results[n:])


def _loop_backward(op: Op, args, carry_args, yielded, n: int):
    """Usefulness: a loop's final carries to their arguments and yielded values, a carry's
    argument to the value yielded for it, each stacked result to its yielded value and each
    block argument to the operand that initializes or is sliced into it."""
    for r, a, y in zip(op.results[:n], carry_args, yielded[:n]):
        yield from ((r, a), (r, y), (a, y))
    yield from zip(op.results[n:], yielded[n:])
    yield from zip(args, op.operands)


def _graph(ops, g: Graph, forward: bool) -> Graph:
    """The edges among `ops` (one block's) along which variation (`forward`) or usefulness
    flows: between an op's operands and its results, and the loop rules above."""
    for op in ops:
        if has_trait(op, "terminator") or _blocks_derivative(op):
            continue
        if has_trait(op, "loop"):
            body, n = op.regions[0], op.attrs["n_carry"]
            edges = _loop_forward if forward else _loop_backward
            for src, dst in edges(op, body.args[1:], body.args[1:1 + n], body.ops[-1].operands,
                                  n):
                _link(g, src, dst)
            _graph(body.ops, g, forward)
            continue
        for region in op.regions:
            _graph(region.ops, g, forward)
        ins, outs = (op.operands, op.results) if forward else (op.results, op.operands)
        for v in ins:
            _link(g, v, op)
        g[op] = list(outs)
    return g


def _reach(seeds, graph: Graph) -> set[Value]:
    """The float values reachable from the float values of `seeds` through float values:
    each node is visited once, so loops of any nesting cost their size, not their size
    times the rounds of a fixed point."""
    reached = {v for v in seeds if v.type.is_float}
    stack = list(reached)
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in reached and (type(nxt) is not Value or nxt.type.is_float):
                reached.add(nxt)
                stack.append(nxt)
    return {v for v in reached if type(v) is Value}


def _sweep(ops: list[Op], seeds, forward: bool) -> set[Value]:
    """`_reach` over the graph of `ops` (one block's, taken in reverse when not `forward`),
    without building it: an op passes the flow from its operands to its float results
    (from its results to its float operands). An op with regions reaches through the
    graph of itself, seeded with the values reached so far that it reads (forward) or its
    reached results (backward): nothing after it flows into it in SSA form."""
    reached = {v for v in seeds if v.type.is_float}
    skip = names_with("terminator", "no_grad")  # the ops `_graph` leaves out
    for op in ops if forward else reversed(ops):
        if op.regions:
            g = _graph([op], {}, forward)
            reached |= _reach([v for v in g if type(v) is Value and v in reached], g)
            continue
        if op.name in skip:
            continue
        ins, outs = (op.operands, op.results) if forward else (op.results, op.operands)
        for v in ins:
            if v in reached:
                for w in outs:
                    if w.type.is_float:
                        reached.add(w)
                break
    return reached


def varied_values(fn: Function, wrt: list[str]) -> set[Value]:
    for w in wrt:
        if w not in fn.arg_names:
            raise AdcError(f"'{w}' is not an input of '{fn.name}' "
                           f"(inputs: {', '.join(map(str, fn.arg_names))})", fn.loc)
    return _sweep(fn.body.ops, [fn.arg(w) for w in wrt], forward=True)


def useful_values(fn: Function, results: list[Value] | None = None) -> set[Value]:
    if results is None:
        term = fn.body.ops[-1] if fn.body.ops else None
        if term is None or not ends(term, "function"):
            raise ValueError(f"function '{fn.name}' has no return op; pass `results`")
        results = term.operands
    return _sweep(fn.body.ops, results, forward=False)


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
