"""Importing a program exported by `torch.export`: placeholders by their kind (parameters
become ``param`` inputs grouped by module path, the buffers the program updates ``state``
inputs, other buffers and constants read-only ``param`` inputs behind ``stop_gradient``,
user inputs the function's inputs), then each node through the table. A state's update is
written under the state's own name where the node computing it is the buffer's only reader,
else as ``NAME = value`` before the return.

A node whose tensor arguments are all known when importing (masks built with ``arange``,
``full``, comparisons) is computed then, by the ATen op itself on those constants.
"""
from __future__ import annotations

import operator

import numpy as np

from ...diagnostics import AdcError
from ..importer.writer import ProgramWriter, Val
from ..onnx.graph import NodeError, NodeLoc
from ..onnx.node import Const, Refused
from . import ops_math, ops_nn, ops_shape  # noqa: F401  (they fill the table)
from .node import Multi, TNode
from .table import TABLE, TDSL_OF, supported

NO_FOLD = ("rand", "randn", "bernoulli", "dropout", "normal", "uniform", "empty")


def module_path(fx) -> str:
    stack = fx.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else ""


class ExportImporter:
    def __init__(self, ep, label: str, fn: str = "model", dim_names: dict | None = None):
        self.ep, self.label = ep, label
        self.writer = ProgramWriter(label, fn)
        self.env: dict[str, object] = {}
        self.params: dict[str, Val] = {}
        self.dim_names = dim_names or {}
        self.node: TNode | None = None
        # the buffers the program updates: output node name -> the buffer's target
        self.mutated = {s.arg.name: s.target for s in ep.graph_signature.output_specs
                        if s.kind.name == "BUFFER_MUTATION"}
        self.state_of: dict[str, str] = {}     # buffer target -> state input name
        self.bound: dict[str, Val] = {}        # state input name -> its binding now

    def run(self) -> ProgramWriter:
        sig = self.ep.graph_signature
        kinds = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
        state = self.ep.state_dict
        consts = getattr(self.ep, "constants", {}) or {}
        for fx in self.ep.graph.nodes:
            if fx.op == "placeholder":
                self._placeholder(fx, kinds.get(fx.name), state, consts)
            elif fx.op == "call_function":
                self._node(fx)
            elif fx.op == "output":
                self._output(fx, sig)
        return self.writer

    # ---- inputs -------------------------------------------------------------------------
    def _placeholder(self, fx, spec, state, consts) -> None:
        kind = spec.kind.name if spec is not None else "USER_INPUT"
        if kind == "USER_INPUT":
            val = fx.meta.get("val")
            if val is None or not hasattr(val, "shape"):
                raise AdcError(f"{self.label}: input '{fx.name}' is not a tensor")
            dtype = TDSL_OF.get(str(val.dtype))
            if dtype is None:
                raise AdcError(f"{self.label}: input '{fx.name}': dtype {val.dtype} is not "
                               "supported")
            shape = tuple(self.dim(d) for d in val.shape)
            self.env[fx.name] = self.writer.add_input(fx.name, dtype, shape)
            return
        target = spec.target
        tensor = state.get(target) if target in state else consts.get(target)
        if tensor is None:
            raise AdcError(f"{self.label}: '{target}' ({kind.lower()}) has no value")
        array = tensor.detach().cpu().numpy().copy()
        if kind == "PARAMETER":
            self.env[fx.name] = self.writer.add_param(target, array, hint="p")
        elif kind == "BUFFER" and target in self.mutated.values():
            try:
                v = self.writer.add_state(target, array)
            except ValueError as e:
                raise AdcError(f"{self.label}: buffer '{target}': {e}") from None
            self.env[fx.name] = self.bound[v.name] = v
            self.state_of[target] = v.name
        else:   # buffers and constants: read, never trained
            self.env[fx.name] = Const(array, target, frozen=True)

    def dim(self, d):
        if isinstance(d, int):
            return d
        if type(d).__name__ == "SymInt":
            fixed = d.node.maybe_as_int()   # int(d) would specialize the symbol
            if fixed is not None:
                return int(fixed)
        else:
            return int(d)
        key = str(d)
        if key not in self.dim_names:
            self.dim_names[key] = self.writer.names.fresh(key if key.isidentifier() else "N")
        return self.dim_names[key]

    def plain(self, v):
        """A node argument that is not a tensor: numbers, lists, dtypes, SymInt dims."""
        if isinstance(v, (list, tuple)):
            return [self.plain(a) for a in v]
        if hasattr(v, "op") and hasattr(v, "name"):   # an fx.Node: a SymInt or a tensor
            e = self.env.get(v.name)
            if isinstance(e, Const) and e.value.ndim == 0:
                item = e.value.item()
                return item
            return e
        if hasattr(v, "node") and type(v).__name__ == "SymInt":
            return self.dim(v)
        return v

    # ---- nodes --------------------------------------------------------------------------
    def _node(self, fx) -> None:
        path = module_path(fx)
        where = f"{path}: {fx.name}" if path else fx.name
        loc = NodeLoc(self.label, where, str(fx.target))
        try:
            if fx.target is operator.getitem:
                self._getitem(fx)
                return
            op = str(fx.target)
            if op == "aten.sym_size.int":
                x = self.env[fx.args[0].name]
                d = x.shape[fx.args[1]]
                self.env[fx.name] = Const(np.array(d, dtype=object if isinstance(d, str)
                                                   else np.int64), fx.name, True)
                return
            if self._fold(fx):
                return
            entry = TABLE.get(op)
            if entry is None:
                raise Refused(f"op '{op}' is not supported (supported: "
                              f"{', '.join(supported())})")
            n = TNode(self, fx)
            self.node = n
            entry(n)
            n.finish()
        except NodeError:
            raise
        except AdcError as e:
            msg = e.message if isinstance(e, Refused) else f"cannot be lowered: {e.message}"
            raise NodeError(msg, loc) from None

    def _getitem(self, fx) -> None:
        src, k = fx.args
        e = self.env[src.name]
        if isinstance(e, Multi):
            item = e.items[k] if k < len(e.items) else None
            if item is None:
                raise Refused(f"result {k} of '{src.name}' is not supported")
            self.env[fx.name] = item
        elif isinstance(e, Const) and isinstance(e.value, list):
            self.env[fx.name] = e.value[k]
        else:
            raise Refused(f"'{src.name}' has no results to pick from")

    def _fold(self, fx) -> bool:
        """Run the op on constants when every tensor argument is one."""
        import torch
        op = str(fx.target)
        if any(w in op for w in NO_FOLD):
            return False
        nodes = [a for a in fx.all_input_nodes]
        if not nodes and "fill" not in op and not any(
                k in op for k in ("arange", "full", "scalar_tensor", "zeros", "ones")):
            return False
        for a in nodes:
            e = self.env.get(a.name)
            if not isinstance(e, Const) or e.value.dtype == object:
                return False

        def real(v):
            if isinstance(v, (list, tuple)):
                return type(v)(real(a) for a in v)
            if hasattr(v, "op") and hasattr(v, "name"):
                return torch.from_numpy(np.ascontiguousarray(self.env[v.name].value))
            return v
        try:
            out = fx.target(*real(fx.args), **{k: real(v) for k, v in fx.kwargs.items()})
        except Exception:
            return False
        if isinstance(out, (tuple, list)):
            self.env[fx.name] = Multi([Const(o.numpy(), fx.name, True) for o in out])
        elif isinstance(out, torch.Tensor):
            self.env[fx.name] = Const(out.detach().numpy(), fx.name, True)
        else:
            return False
        return True

    # ---- outputs ------------------------------------------------------------------------
    def _output(self, fx, sig) -> None:
        other = [s for s in sig.output_specs if s.kind.name not in ("USER_OUTPUT",
                                                                      "BUFFER_MUTATION")]
        if other:
            raise AdcError(f"{self.label}: the module's outputs include "
                           f"{', '.join(f'{s.kind.name.lower()} {s.target}' for s in other)}"
                           ", which an import does not support")
        users = [a for a, s in zip(fx.args[0], sig.output_specs)
                 if s.kind.name == "USER_OUTPUT"]
        for a, s in zip(fx.args[0], sig.output_specs):
            if s.kind.name == "BUFFER_MUTATION":
                self._update_state(a, s.target)
        results = []
        for k, a in enumerate(users):
            e = self.env.get(a.name) if hasattr(a, "name") else None
            if isinstance(e, Const):
                e = self.materialize(a.name, e, True)
            if not isinstance(e, Val):
                raise AdcError(f"{self.label}: output {k} is not a tensor")
            results.append((e, a.name))
        self.writer.set_results(results)

    def _update_state(self, a, target: str) -> None:
        """Bind state `target` to its new value, output `a`, unless already bound to it."""
        name = self.state_of[target]
        e = self.env.get(a.name) if hasattr(a, "name") else None
        if isinstance(e, Const):
            e = self.materialize(a.name, e, True)
        if not isinstance(e, Val):
            raise AdcError(f"{self.label}: the new value of buffer '{target}' is not a tensor")
        if self.bound[name] is e:
            return
        self.bound[name] = self.writer.assign([name], e.name, f"{target} updated", keep={0})[0]

    @staticmethod
    def result_hint(node: TNode, k: int) -> str:
        """A name for result `k` of `node`: the module's path for the first one."""
        path = module_path(node.fx)
        return path if path and k == 0 else f"{node.name}_{k}"

    def keeps_state(self, node: TNode, out) -> str | None:
        """The state input that result `out` (an fx node) of `node` updates, where it can be
        written under the state's name: the buffer is read by this node alone."""
        target = self.mutated.get(getattr(out, "name", None))
        if target is None:
            return None
        name = self.state_of[target]
        old = [a for a in node.fx.all_input_nodes
               if self.env.get(a.name) is self.bound[name]]
        if not old or any(len(a.users) != 1 for a in old):
            return None
        return name

    # ---- writing ------------------------------------------------------------------------
    def materialize(self, name: str, c: Const, frozen: bool) -> Val:
        p = self.params.get(name)
        if p is None:
            try:
                p = self.writer.add_param(c.source, c.value, trainable=not frozen)
            except ValueError as e:
                raise Refused(f"constant '{name}': {e}") from None
            self.params[name] = p
        if frozen and p.type.is_float:
            return Val(f"stop_gradient({p.name})", p.type)
        return p

    def write(self, node: TNode, names: list[str], expr: str, keep=()) -> list[Val]:
        """`names`: hints, or (positions in `keep`) state inputs rebound by the statement."""
        path = module_path(node.fx)
        note = f"{path}: {node.op}" if path else node.op
        if path and names == [node.name]:   # named by the module: `fc`, `layers_0_attn`
            names = [path]
        hints = [n if k in keep else n.lstrip("_") or "v" for k, n in enumerate(names)]
        out = self.writer.assign(hints, expr, note, keep)
        for k in keep:
            self.bound[names[k]] = out[k]
        return out
