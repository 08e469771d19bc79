"""Emit an IR function as a Graphviz DOT graph.

Ops are box nodes labeled with the op name, short options and result types; function inputs
and loop block arguments are ellipses; an edge runs from the op (or argument) defining a
value to each op using it, labeled with the value's name. A ``for`` loop is a cluster that
holds the loop node, its block arguments and its body.
"""
from __future__ import annotations

from ..ir.core import Block, Function, Module, Op, Value
from ..ops.registry import has_trait
from .names import comment_text

MAX_ATTR_TEXT = 32  # longer option values are left out of node labels


def _quote(text: str) -> str:
    """A DOT string: quotes and backslashes escaped, a newline as DOT's ``\\n``, anything
    else that is not printable (NUL, CR, U+2028, ...) written as its Python escape."""
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + comment_text(text) + '"'


class _DotEmitter:
    def __init__(self, fn: Function):
        self.fn = fn
        self.lines: list[str] = []
        self.node_of: dict[Value, str] = {}  # value -> id of the node that defines it
        self.count = 0
        self.clusters = 0

    def node(self, label: str, depth: int, **style) -> str:
        nid = f"n{self.count}"
        self.count += 1
        extra = "".join(f", {k}={_quote(str(v))}" for k, v in style.items())
        self.lines.append("  " * depth + f"{nid} [label={_quote(label)}{extra}];")
        return nid

    def edge(self, src: str, dst: str, depth: int, label: str = "", **style) -> None:
        attrs = [f"label={_quote(label)}"] if label else []
        attrs += [f"{k}={_quote(str(v))}" for k, v in style.items()]
        self.lines.append("  " * depth + f"{src} -> {dst}" +
                          (f" [{', '.join(attrs)}]" if attrs else "") + ";")

    def args(self, args: list[Value], depth: int) -> None:
        for a in args:
            self.node_of[a] = self.node(f"{a.name or 'arg'}\n{a.type}", depth, shape="ellipse")

    def op_label(self, op: Op) -> str:
        if has_trait(op, "calls"):
            head = f"call @{op.attrs['callee']}"
        else:
            shown = [f"{k}={v}" for k, v in op.attrs.items()
                     if len(str(v)) <= MAX_ATTR_TEXT and not has_trait(op, "loop")]
            head = op.name + (" " + " ".join(shown) if shown else "")
        types = ", ".join(str(r.type) for r in op.results)
        return head + (f"\n{types}" if types else "")

    def inputs(self, op: Op, nid: str, depth: int) -> None:
        for v in op.operands:
            if v in self.node_of:
                self.edge(self.node_of[v], nid, depth, v.name or "")

    def block(self, block: Block, depth: int) -> str | None:
        """Emit the ops of `block`; returns the node id of its terminator."""
        last = None
        for op in block.ops:
            if has_trait(op, "loop"):
                self.loop(op, depth)
                continue
            shape = "doubleoctagon" if has_trait(op, "terminator") else "box"
            nid = last = self.node(self.op_label(op), depth, shape=shape)
            self.inputs(op, nid, depth)
            for r in op.results:
                self.node_of[r] = nid
        return last

    def loop(self, op: Op, depth: int) -> None:
        pad = "  " * depth
        self.clusters += 1
        title = f"for n={op.attrs['n']}" + (" reverse" if op.attrs.get("reverse") else "")
        self.lines.append(f"{pad}subgraph cluster_{self.clusters} {{")
        self.lines.append(f"{pad}  label={_quote(title)};")
        self.lines.append(f"{pad}  style=dashed;")
        nid = self.node(self.op_label(op), depth + 1, shape="box3d")
        self.inputs(op, nid, depth + 1)
        body = op.regions[0]
        self.args(body.args, depth + 1)
        for a in body.args:
            self.edge(nid, self.node_of[a], depth + 1, style="dotted")
        end = self.block(body, depth + 1)
        if end is not None:  # the yielded values feed the next iteration and the results
            self.edge(end, nid, depth + 1, style="dashed", constraint="false")
        self.lines.append(f"{pad}}}")
        for r in op.results:
            self.node_of[r] = nid

    def emit(self) -> str:
        self.lines.append(f"digraph {_quote(self.fn.name)} {{")
        self.lines.append('  node [shape=box, fontname="monospace"];')
        self.lines.append('  edge [fontname="monospace", fontsize=10];')
        self.args(self.fn.args, 1)
        self.block(self.fn.body, 1)
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"


def emit_dot(module: Module, fn_name: str) -> str:
    """The function `fn_name` of `module` as a DOT ``digraph``."""
    return _DotEmitter(module[fn_name]).emit()
