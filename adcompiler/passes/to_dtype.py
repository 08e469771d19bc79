"""The `to-dtype` pass (``--dtype f64``, ``to-dtype{dtype=f64}`` in a pipeline) and the
whole-module type rewrite it shares with `bind_dims` (``adc compile --bind``).

Both rewrite a module in place: every value type, every function result type and every
attribute whose registry option kind says it holds a dtype (``dtype``) or dimensions
(``shape``, ``dim``; the ``n`` of a ``for`` loop).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from ..ir.core import Block, Module, Op, Value
from ..ir.types import TensorType, is_float, substitute_dim
from ..ops import registry
from ..ops.registry import has_trait
from .pipeline import ModulePass, register_pass


def _blocks(block: Block) -> Iterator[Block]:
    yield block
    for op in block.ops:
        for region in op.regions:
            yield from _blocks(region)


def _values(block: Block) -> Iterator[Value]:
    for b in _blocks(block):
        yield from b.args
        for op in b.ops:
            yield from op.results


def _attr_kinds(op: Op) -> dict[str, str]:
    """Option kind of each attribute of `op` (structural ops have their own fixed kinds)."""
    if has_trait(op, "loop"):
        return {"n": "dim"}
    if op.name in registry.REGISTRY:
        return {o.name: o.kind for o in registry.REGISTRY[op.name].options}
    return {}


def rewrite_types(module: Module, type_fn: Callable[[TensorType], TensorType],
                  attr_fn: Callable[[str, object], object]) -> Module:
    """Apply `type_fn` to every type and ``attr_fn(kind, value)`` to every typed attribute."""
    for fn in module.functions.values():
        fn.result_types = [type_fn(t) for t in fn.result_types]
        for v in _values(fn.body):
            v.type = type_fn(v.type)
        for op in fn.walk():
            for name, kind in _attr_kinds(op).items():
                if name in op.attrs and op.attrs[name] is not None:
                    op.attrs[name] = attr_fn(kind, op.attrs[name])
    return module


def to_dtype(module: Module, dtype: str = "f64") -> Module:
    """Make every float type and float ``dtype`` attribute `dtype` (``--dtype f64``)."""
    def type_fn(t: TensorType) -> TensorType:
        return t.with_dtype(dtype) if t.is_float else t

    def attr_fn(kind, value):
        return dtype if kind == "dtype" and isinstance(value, str) and is_float(value) else value

    return rewrite_types(module, type_fn, attr_fn)


def bind_dims(module: Module, env: Mapping[str, int]) -> Module:
    """Specialize symbolic dimensions to the sizes in `env` (``adc compile --bind B=32``)."""
    def type_fn(t: TensorType) -> TensorType:
        return t.with_shape(substitute_dim(d, env) for d in t.shape)

    def attr_fn(kind, value):
        if kind == "dim" and isinstance(value, (int, str)):
            return substitute_dim(value, env)
        if kind == "shape" and isinstance(value, (list, tuple)):
            return type(value)(substitute_dim(d, env) if isinstance(d, (int, str)) else d
                               for d in value)
        return value

    return rewrite_types(module, type_fn, attr_fn)


@register_pass("to-dtype")
@dataclass(frozen=True)
class ToDtype(ModulePass):
    """Every float type and float ``dtype`` attribute becomes `dtype`."""
    dtype: str = "f64"

    def run(self, module: Module) -> Module:
        return to_dtype(module, self.dtype)
