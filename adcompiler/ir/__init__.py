"""The typed SSA IR: types, core classes, builder, printer, parser, verifier.

A `Module` pickles as its IR text (what `print_module` shows) and unpickles through the
parser; the registration lives here, above both, so that `core` never imports the parser.
"""
import copyreg

from .core import Block, Function, Module, Op, Value  # noqa: F401
from .parser import module_from_text
from .printer import print_module
from .types import TensorType  # noqa: F401


def _reduce_module(module: Module):
    return module_from_text, (print_module(module),)


copyreg.pickle(Module, _reduce_module)
