"""`TNode`: what a lowering entry sees of one node of an exported program."""
from __future__ import annotations

import numpy as np

from ..importer.names import number
from ..importer.writer import Val
from ..onnx.node import Const, Refused
from ...ir.types import TensorType


class Multi:
    """The results of a node with several outputs (`getitem` picks one)."""

    def __init__(self, items: list):
        self.items = items


class TNode:
    def __init__(self, importer, fx):
        self.imp, self.fx = importer, fx
        self.op = str(fx.target)
        self.name = fx.name
        self.args, self.kwargs = list(fx.args), dict(fx.kwargs)
        self._read: set = set()

    def refuse(self, msg: str):
        raise Refused(msg)

    def finish(self) -> None:
        import torch
        for i, a in enumerate(self.args):
            if i not in self._read:
                self.refuse(f"argument {i} ({a}) is not supported")
        schema = getattr(self.fx.target, "_schema", None)
        defaults = {a.name: a.default_value for a in schema.arguments} if schema else {}
        for k, v in self.kwargs.items():
            if k in self._read or k in ("layout", "pin_memory", "memory_format"):
                continue
            if k == "device" and (v is None or torch.device(v).type == "cpu"):
                continue
            if k in defaults and defaults[k] == v:
                continue
            self.refuse(f"argument {k}={v} is not supported")

    # ---- arguments ----------------------------------------------------------------------
    def arg(self, i: int, default=None, name: str | None = None):
        """A non-tensor argument, by position or keyword (a SymInt as its dim name)."""
        self._read.add(i)
        if name is not None:
            self._read.add(name)
        if i < len(self.args):
            v = self.args[i]
        elif name is not None and name in self.kwargs:
            v = self.kwargs[name]
        else:
            return default
        return self.imp.plain(v)

    def has(self, i: int, name: str | None = None) -> bool:
        if i < len(self.args):
            return self.args[i] is not None
        return name is not None and self.kwargs.get(name) is not None

    def x(self, i: int, literal: bool = False, frozen: bool = False, name: str | None = None
          ) -> Val:
        """Tensor argument `i` as a TDSL value (a 0-d constant as a number with `literal`)."""
        self._read.add(i)
        a = self.args[i] if i < len(self.args) else self.kwargs[name]
        if name is not None:
            self._read.add(name)
        if not hasattr(a, "op"):   # a Python number where a tensor may stand
            if literal and isinstance(a, (int, float)) and not isinstance(a, bool):
                # a Python float is a double; the literal takes the tensor's dtype, as the
                # scalar does in torch
                d = "f64" if isinstance(a, float) else "i64"
                return Val(_lit(a, d), TensorType(d, ()))
            self.refuse(f"argument {i} must be a tensor")
        e = self.imp.env[a.name]
        if isinstance(e, Const):
            v = e.value
            if literal and v.ndim == 0 and v.dtype.kind in "fiu" and np.isfinite(v):
                d = {"float32": "f32", "float16": "f16"}.get(str(v.dtype), "f64") \
                    if v.dtype.kind == "f" else "i64"
                return Val(number(v.item(), d), TensorType(d, ()))
            return self.imp.materialize(a.name, e, frozen or e.frozen)
        if isinstance(e, Multi):
            self.refuse(f"argument {i} has several results")
        return e

    def scalar(self, i: int, dtype: str, name: str | None = None) -> str:
        """A Python number argument as a literal of `dtype`."""
        v = self.arg(i, None, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.refuse(f"argument {i} must be a number, got {v!r}")
        return _lit(v, dtype)

    # ---- results ------------------------------------------------------------------------
    def emit(self, expr: str) -> Val:
        if expr.isidentifier():   # a view that changes nothing: no statement
            same = [self.imp.env[a.name] for a in self.fx.all_input_nodes
                    if getattr(self.imp.env.get(a.name), "name", None) == expr]
            if same:
                self.imp.env[self.fx.name] = same[0]
                return same[0]
        state = self.imp.keeps_state(self, self.fx)
        v = self.imp.write(self, [state or self.name], expr, keep={0} if state else ())[0]
        self.imp.env[self.fx.name] = v
        return v

    def emit_multi(self, exprs: list) -> None:
        """Several results: each expression written as its own statement (None: a result
        the importer does not compute; reading it is refused)."""
        items, single = [], sum(e is not None for e in exprs) == 1
        for k, e in enumerate(exprs):
            hint = self.name if single else f"{self.name}_{k}"
            items.append(None if e is None else self.imp.write(self, [hint], e)[0])
        self.imp.env[self.fx.name] = Multi(items)

    def result(self, k: int):
        """The fx node reading result `k` (``getitem(node, k)``), or None."""
        for u in self.fx.users:
            if u.args[1:2] == (k,):
                return u
        return None

    def emit_together(self, exprs: list, call: str) -> None:
        """Several results of one TDSL call, ``a, b, c = call``, each name in `exprs` order
        (None: a result the importer does not compute); a result that updates a state is
        written under the state's name."""
        hints, keep, slots = [], set(), []
        for k, e in enumerate(exprs):
            if e is None:
                continue
            state = self.imp.keeps_state(self, self.result(k))
            if state:
                keep.add(len(hints))
            hints.append(state or self.imp.result_hint(self, k))
            slots.append(k)
        vals = self.imp.write(self, hints, call, keep)
        items = [None] * len(exprs)
        for k, v in zip(slots, vals):
            items[k] = v
        self.imp.env[self.fx.name] = Multi(items)

    def alias(self, val) -> None:
        self.imp.env[self.fx.name] = val

    def temp(self, expr: str, hint: str) -> Val:
        return self.imp.write(self, [hint], expr)[0]


def _lit(v, dtype: str) -> str:
    if isinstance(v, float) and not np.isfinite(v):
        raise Refused(f"the number {v} has no literal")
    return number(v, dtype)
