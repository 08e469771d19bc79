"""Importing an ONNX graph: inputs, initializers, then each node through the table.

Values known when importing (initializers, Constant nodes, and every node whose inputs are
all such values: the shape arithmetic of exported models) stay NumPy arrays until a node
computes with one; then it becomes a ``param`` input (initial value in the params file), so
an initializer that only feeds a Reshape's shape never shows in the program. Folding uses
ONNX's own reference implementation, for numeric arrays of the standard domain.
"""
from __future__ import annotations

import numpy as np

from ...diagnostics import AdcError
from ..importer.writer import ProgramWriter, Val
from . import ops_math, ops_nn, ops_norm, ops_shape  # noqa: F401  (they fill the table)
from .node import Const, Node, Refused, Unavailable
from .read import default_opset
from .table import TABLE, supported

ONNX_DTYPES = {1: "f32", 11: "f64", 10: "f16", 7: "i64", 6: "i32", 9: "bool"}
# never folded: they draw random numbers, or fold only by their own entries
NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
           "Multinomial", "Bernoulli", "Dropout", "If", "Loop", "Scan", "SequenceMap"}
MAX_FOLD_ELEMENTS = 1 << 26


class NodeError(AdcError):
    """An error at one node; rendered ``MODEL.onnx: node 'NAME' (OpType): error: ...``."""


class NodeLoc:
    """A location that prints as ``FILE: node 'NAME' (OpType)``."""

    line = col = 0

    def __init__(self, file: str, node: str, op: str):
        from ..importer.names import quote
        self.file, self.node, self.op = file, quote(node), quote(op)

    def __str__(self) -> str:
        return f"{self.file}: node '{self.node}' ({self.op})"


class GraphImporter:
    def __init__(self, model, label: str, fn: str = "model"):
        self.model, self.label = model, label
        self.opset = default_opset(model)
        self.writer = ProgramWriter(label, fn)
        self.env: dict[str, object] = {}
        self.materialized: dict[str, Val] = {}
        self.node: Node | None = None

    # ---- the graph ----------------------------------------------------------------------
    def run(self) -> ProgramWriter:
        import onnx
        g = self.model.graph
        inits = {t.name: t for t in g.initializer}
        for t in g.initializer:
            self.env[t.name] = Const(onnx.numpy_helper.to_array(t), t.name)
        for vi in g.input:
            if vi.name not in inits:
                self.env[vi.name] = self._input(vi)
        for proto in g.node:
            self._node(proto)
        results = []
        for vi in g.output:
            v = self.env.get(vi.name)
            if isinstance(v, Unavailable):
                raise AdcError(f"{self.label}: output '{vi.name}' is {v.reason}, which is "
                               "not supported")
            if isinstance(v, Const):
                v = self.materialize(vi.name, v, True, None)
            results.append((v, vi.name))
        self.writer.set_results(results)
        return self.writer

    def _input(self, vi) -> Val:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None or tt.elem_type not in ONNX_DTYPES:
            what = "not a tensor" if tt is None else f"element type {tt.elem_type}"
            raise AdcError(f"{self.label}: input '{vi.name}': {what} is not supported "
                           f"(supported: float, double, float16, int64, int32, bool)")
        if not tt.HasField("shape"):
            raise AdcError(f"{self.label}: input '{vi.name}' has no shape (its rank is "
                           "needed)")
        shape = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            else:
                hint = d.dim_param if d.HasField("dim_param") else f"{vi.name}_{k}"
                shape.append(self.writer.names.take(hint, "N") if d.HasField("dim_param")
                             else self.writer.names.fresh(hint))
        return self.writer.add_input(vi.name, ONNX_DTYPES[tt.elem_type], tuple(shape))

    def _node(self, proto) -> None:
        import onnx
        name = proto.name or (proto.output[0] if proto.output else proto.op_type)
        loc = NodeLoc(self.label, name, proto.op_type)
        try:
            if proto.domain not in ("", "ai.onnx"):
                raise Refused(f"domain '{proto.domain}' is not supported (supported: the "
                              f"default domain, ops {', '.join(supported())})")
            try:
                version = onnx.defs.get_schema(proto.op_type, self.opset, "").since_version
            except Exception:
                version = 0
            entry = TABLE.get(proto.op_type)
            if entry is None:
                raise Refused(f"op type '{proto.op_type}' is not supported (supported: "
                              f"{', '.join(supported())})")
            if version not in entry.versions:
                raise Refused(f"{proto.op_type} version {version} (opset {self.opset}) is not "
                              f"supported (supported versions: "
                              f"{', '.join(map(str, sorted(entry.versions)))})")
            node = Node(self, proto, version)
            self.node = node
            if not self._fold(node):
                entry.lower(node)
                node.finish()
            missing = [o for o in proto.output if o and o not in self.env]
            if missing:
                raise Refused(f"output '{missing[0]}' is not supported")
        except NodeError:
            raise
        except AdcError as e:
            msg = e.message
            if not isinstance(e, Refused):
                msg = f"cannot be lowered: {msg}"
            raise NodeError(msg, loc) from None

    def _fold(self, node: Node) -> bool:
        """Compute the node now when every input is known and folding is exact."""
        if node.op in NO_FOLD or not node.inputs or any(
                a.type == 5 for a in node.proto.attribute):  # GRAPH attributes
            return False
        vals = []
        for name in node.inputs:
            e = self.env.get(name) if name else None
            if name and not isinstance(e, Const):
                return False
            vals.append(None if e is None else e.value)
        if any(v is not None and (v.dtype == object or v.size > MAX_FOLD_ELEMENTS)
               for v in vals):
            return False
        from .fold import fold
        outs = fold(self.model, node.proto, vals, self.opset)
        if outs is None:
            return False
        # computed from initializers only: trained as they are; from a Constant: read only
        frozen = any(self.env[n].frozen for n in node.inputs if n)
        for k, o in enumerate(outs):
            if node.wants(k):
                node.set_const(k, o, frozen)
        return True

    # ---- writing ------------------------------------------------------------------------
    def constant(self, hint: str, value) -> Val:
        """A constant the importer computed (a divisor map), read through stop_gradient."""
        return self.materialize(hint, Const(value, hint, True), True, None)

    def materialize(self, name: str, c: Const, frozen: bool, node) -> Val:
        """The parameter holding constant `c` (made on first use), read through
        ``stop_gradient`` where `frozen`."""
        p = self.materialized.get(name)
        if p is None:
            if c.value.dtype == object:
                raise Refused(f"'{name}' holds a symbolic dimension "
                              f"({list(c.value.reshape(-1))}); a tensor computed from one "
                              "is not supported")
            try:
                p = self.writer.add_param(name, c.value, trainable=not frozen)
            except ValueError as e:
                raise Refused(f"constant '{name}': {e}") from None
            self.materialized[name] = p
        elif not frozen:
            self.writer.params[[r.name for r in self.writer.params].index(p.name)] \
                .trainable = True
        if frozen and p.type.is_float:
            return Val(f"stop_gradient({p.name})", p.type)
        return p

    def write(self, node: Node, names: list[str], expr: str) -> list[Val]:
        return self.writer.assign(names, expr, f"{node.name} ({node.op})")
