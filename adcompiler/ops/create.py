"""Constructors: scalar constants, zeros/ones/full, *_like, arange."""
from __future__ import annotations

from ..ir.types import TensorType
from .registry import Option, register

CTOR = ("constructor",)

# const: a scalar literal (`value`) of `dtype`; the frontend gives a literal the dtype of the
# tensor it meets.
register("const", lambda types, attrs: TensorType(attrs["dtype"], ()), operands=(),
         options=(Option("value", "number"), Option("dtype", "dtype", "f32")), traits=CTOR)
register("zeros", lambda types, attrs: TensorType(attrs["dtype"], tuple(attrs["shape"])),
         operands=(), options=(Option("shape", "shape"), Option("dtype", "dtype", "f32")),
         traits=CTOR)
register("ones", lambda types, attrs: TensorType(attrs["dtype"], tuple(attrs["shape"])),
         operands=(), options=(Option("shape", "shape"), Option("dtype", "dtype", "f32")),
         traits=CTOR)
