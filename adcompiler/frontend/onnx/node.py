"""`Node`: what a lowering entry sees of one ONNX node.

Inputs come as TDSL values (`x`), as constants known when importing (`const`, `ints`), or
as literals for elementwise arithmetic (`x(i, literal=True)`); attributes through `attr`.
The node remembers what the entry read: `finish` refuses attributes and inputs it did not.
"""
from __future__ import annotations

import numpy as np

from ...diagnostics import AdcError
from ..importer.names import number
from ..importer.writer import Val
from ...ir.types import TensorType


class Refused(AdcError):
    """A node the importer does not lower (the message says why)."""


class Const:
    """A value known when importing: a NumPy array (dtype object where it holds symbolic
    dimension names, from `Shape` of a tensor with symbolic dims)."""

    def __init__(self, value, source: str, frozen: bool = False):
        self.value = np.asarray(value)
        self.source, self.frozen = source, frozen


class Unavailable:
    """An output the importer does not compute; a node (or the graph) that reads it is
    refused with `reason`."""

    def __init__(self, reason: str):
        self.reason = reason


class Node:
    def __init__(self, importer, proto, version: int):
        self.imp, self.proto, self.version = importer, proto, version
        self.op = proto.op_type
        self.name = proto.name or (proto.output[0] if proto.output else proto.op_type)
        self.inputs = list(proto.input)
        while self.inputs and not self.inputs[-1]:
            self.inputs.pop()
        self.outputs = list(proto.output)
        self._attrs = {a.name: a for a in proto.attribute}
        self._read_attrs: set[str] = set()
        self._read_inputs: set[int] = set()

    # ---- refusing -----------------------------------------------------------------------
    def refuse(self, msg: str):
        raise Refused(msg)

    def finish(self) -> None:
        extra = sorted(set(self._attrs) - self._read_attrs)
        if extra:
            self.refuse(f"attribute '{extra[0]}' is not supported")
        unread = [i for i, n in enumerate(self.inputs) if n and i not in self._read_inputs]
        if unread:
            self.refuse(f"input {unread[0]} ('{self.inputs[unread[0]]}') is not supported")

    # ---- attributes ---------------------------------------------------------------------
    def attr(self, name: str, default=None):
        self._read_attrs.add(name)
        a = self._attrs.get(name)
        if a is None:
            return default
        import onnx
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        if isinstance(v, list) and v and isinstance(v[0], bytes):
            return [s.decode("utf-8", "replace") for s in v]
        if isinstance(v, onnx.TensorProto):
            return onnx.numpy_helper.to_array(v)
        return v

    def only(self, name: str, allowed, default):
        """The attribute's value, refused unless it is one of `allowed`."""
        v = self.attr(name, default)
        if v not in allowed:
            self.refuse(f"{name}={v!r} is not supported (supported: "
                        f"{', '.join(repr(a) for a in allowed)})")
        return v

    # ---- inputs -------------------------------------------------------------------------
    def has(self, i: int) -> bool:
        return i < len(self.inputs) and bool(self.inputs[i])

    @property
    def n_in(self) -> int:
        return len(self.inputs)

    def entry(self, i: int):
        if not self.has(i):
            self.refuse(f"input {i} is missing")
        self._read_inputs.add(i)
        e = self.imp.env[self.inputs[i]]
        if isinstance(e, Unavailable):
            self.refuse(f"input {i} ('{self.inputs[i]}') is {e.reason}")
        return e

    def const(self, i: int):
        """Input `i` as an array when it is known when importing, else None."""
        e = self.entry(i)
        return e.value if isinstance(e, Const) else None

    def ints(self, i: int, what: str) -> list:
        """Input `i`, a constant list of ints (or dim names), or refused."""
        v = self.const(i)
        if v is None:
            self.refuse(f"input {i} ({what}) must be a constant")
        return [d if isinstance(d, str) else int(d) for d in np.asarray(v).reshape(-1)]

    def is_const(self, i: int) -> bool:
        return isinstance(self.imp.env.get(self.inputs[i]), Const) if self.has(i) else False

    def x(self, i: int, literal: bool = False, frozen: bool = False) -> Val:
        """Input `i` as a TDSL value; a constant becomes a parameter (``stop_gradient`` of
        it when `frozen` or when it came from a Constant node), or with `literal` a number
        when it is a 0-d numeric constant."""
        e = self.entry(i)
        if not isinstance(e, Const):
            return e
        v = e.value
        if literal and v.ndim == 0 and v.dtype.kind in "fiu":
            from ..importer.writer import NP_TO_TDSL, WIDENED
            dt = WIDENED.get(v.dtype, v.dtype)
            if dt in NP_TO_TDSL and np.isfinite(v):
                d = NP_TO_TDSL[dt]
                return Val(number(v.item(), d), TensorType(d, ()))
        return self.imp.materialize(self.inputs[i], e, frozen or e.frozen, self)

    # ---- outputs ------------------------------------------------------------------------
    def emit(self, expr: str, i: int = 0) -> Val:
        """Write ``out_i = expr`` for this node and bind output `i`."""
        return self.emit_many(expr, [i])[0]

    def emit_many(self, expr: str, outs: list[int]) -> list[Val]:
        names = [self.outputs[i] for i in outs]
        vals = self.imp.write(self, names, expr)
        for n, v in zip(names, vals):
            self.imp.env[n] = v
        return vals

    def temp(self, expr: str, hint: str) -> Val:
        """An intermediate statement of this node (a value the model does not name)."""
        return self.imp.write(self, [hint], expr)[0]

    def alias(self, i: int, val) -> None:
        """Output `i` is `val` (a `Val` or a `Const`): nothing is written."""
        self.imp.env[self.outputs[i]] = val

    def set_const(self, i: int, value, frozen: bool = True) -> None:
        """Output `i` is known when importing; `frozen`: read through stop_gradient where
        it becomes a parameter (a Constant's value), else trained like an initializer."""
        self.imp.env[self.outputs[i]] = Const(value, self.outputs[i], frozen=frozen)

    def unavailable(self, i: int, reason: str) -> None:
        """Output `i` is not computed: refused only where something reads it."""
        if self.wants(i):
            self.imp.env[self.outputs[i]] = Unavailable(reason)

    def wants(self, i: int) -> bool:
        """Whether output `i` exists and is named (optional outputs may be left empty)."""
        return i < len(self.outputs) and bool(self.outputs[i])
