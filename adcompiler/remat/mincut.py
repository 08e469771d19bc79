"""The min-cut baseline (``--remat mincut``): what to save, as a minimum s–t cut.

AOTAutograd's partitioner states remat as a cut of the joint graph: every forward value the
reverse sweep reads must be reachable from what is saved, and saving a value costs its
bytes. Each forward value ``v`` becomes an edge ``v.in -> v.out`` of capacity
``bytes(v)``; dataflow edges ``u.out -> v.in`` and the edges from the source (to values
read straight from the function's inputs, and to values that must not be recomputed) and
to the sink (from values the reverse sweep reads) are uncapacitated. The values whose edge
crosses a minimum cut (networkx's max-flow) are saved; everything else the reverse sweep
reads is recomputed (`saved.clones_for`). Like AOTAutograd, compute-heavy ops (trait
``heavy``: `matmul`, `einsum`) are never recomputed. It minimizes the saved bytes, not the peak: a baseline.
"""
from __future__ import annotations

from ..ir.core import Value
from ..ops.registry import has_trait
from .dag import Problem, recomputable
from .saved import forward_values

def mincut_saved(prob: Problem) -> set[Value]:
    import networkx as nx
    B = prob.boundary
    wanted = {v for v in prob.reverse_uses if prob.born[v] >= 0}
    if not wanted:
        return set()
    g = nx.DiGraph()
    src, sink = "source", "sink"
    for v in forward_values(prob):
        op = v.defining_op
        g.add_edge(("in", v.uid), ("out", v.uid), capacity=prob.nbytes[v])
        operands = [u for u in op.operands if u in prob.born]
        if any(prob.born[u] < 0 for u in operands) or not operands \
                or not recomputable(op) or has_trait(op, "heavy"):
            g.add_edge(src, ("in", v.uid))
        for u in operands:
            if prob.born[u] >= 0 and prob.born[u] < B:
                g.add_edge(("out", u.uid), ("in", v.uid))
        if v in wanted:
            g.add_edge(("out", v.uid), sink)
    _, (reach, _) = nx.minimum_cut(g, src, sink)
    return {v for v in forward_values(prob)
            if ("in", v.uid) in reach and ("out", v.uid) not in reach}
