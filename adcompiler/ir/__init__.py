"""The typed SSA IR: types, core classes, builder, printer, parser, verifier."""
from .core import Block, Function, Module, Op, Value  # noqa: F401
from .types import TensorType  # noqa: F401
