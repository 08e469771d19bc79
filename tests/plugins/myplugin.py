"""A test plugin: the op ``softsign(x) = x / (1 + |x|)`` and the pass ``lower_softsign``.

Loaded with ``adcompiler.load_plugins(["plugins.myplugin"])`` or ``adc ... --plugin
plugins.myplugin`` (with ``tests/`` on ``PYTHONPATH``).
"""
from __future__ import annotations

from dataclasses import dataclass

from adcompiler import Builder, FunctionPass, ShapeError, register_op, register_pass


def _infer(types, attrs):
    if not types[0].is_float:
        raise ShapeError(f"softsign expects a float tensor, got {types[0]}")
    return types[0]


def _slope(b: Builder, x):
    """d softsign / dx = 1 / (1 + |x|)^2."""
    one = b.const(1.0, x.type.dtype)
    return b.emit("reciprocal", b.emit("square", b.emit("add", one, b.emit("abs", x))))


def _vjp(b, op, cts):
    return [b.emit("mul", cts[0], _slope(b, op.operands[0]))]


def _jvp(b, op, tangents):
    t = tangents[0]
    return [None if t is None else b.emit("mul", t, _slope(b, op.operands[0]))]


def _kernel(xp, x):
    return x / (1 + xp.abs(x))


register_op("softsign", _infer, vjp=_vjp, jvp=_jvp, kernel=_kernel, traits=["elementwise"],
            doc="x / (1 + |x|)")


@register_pass("lower_softsign")
@dataclass(frozen=True)
class LowerSoftsign(FunctionPass):
    """Replace each ``softsign(x)`` by ``x / (1 + abs(x))`` (built-in ops only)."""

    def run_on_function(self, fn, module) -> None:
        _lower(fn.body)


def _lower(block) -> None:
    for op in list(block.ops):
        for region in op.regions:
            _lower(region)
        if op.name != "softsign":
            continue
        x = op.operands[0]
        b = Builder(block, op.loc, index=block.ops.index(op))
        new = b.emit("div", x, b.emit("add", b.const(1.0, x.type.dtype), b.emit("abs", x)))
        new.name = op.result.name
        for user in block.walk():  # uses may sit in nested regions
            user.operands = [new if v is op.result else v for v in user.operands]
        block.ops.remove(op)
