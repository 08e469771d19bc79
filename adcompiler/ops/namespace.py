"""``adc.ops.NAME``: each op of the registry as a function that a Python function compiled
by adc can call (``adc.ops.softmax(x, axis=-1)``); the Python front end translates the call
into the op. Outside a compiled function there is nothing to call, and saying so is the
function's only behaviour."""
from __future__ import annotations

from ..diagnostics import AdcError


class OpFunction:
    """The op `name`, as Python code compiled by adc calls it."""

    __slots__ = ("_adc_op",)

    def __init__(self, name: str):
        self._adc_op = name

    @property
    def __name__(self) -> str:
        return self._adc_op

    def __call__(self, *args, **kwargs):
        raise AdcError(f"adc.ops.{self._adc_op} can only be called inside a function that "
                       "adc compiles (adc.jit, adc.grad, adc.value_and_grad, ...), where it "
                       f"is the TDSL op '{self._adc_op}'")

    def __repr__(self) -> str:
        return f"<adc op {self._adc_op}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, OpFunction) and other._adc_op == self._adc_op

    def __hash__(self) -> int:
        return hash(("adc.ops", self._adc_op))


def op_function(name: str) -> OpFunction:
    from .registry import REGISTRY
    if name not in REGISTRY:
        raise AttributeError(f"adc.ops has no op {name!r}")
    return OpFunction(name)
