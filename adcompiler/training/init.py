"""Initial values of parameters by their role, inferred from how the program uses them.

A role declared in the program (``g: f32[D] @gain`` on a group's field or a ``param``
input, the function's ``roles`` attribute) is taken as it is. Otherwise a parameter's role
follows its first telling use in the loss function, calls inlined and
through the ops that only move or pick its elements (views such as ``index`` of a stacked
layer, ``reshape``, ``transpose``; ``cast``). Each op says what its operands tell in its
`param_role` rule (`adcompiler.ops.roles`); this module names no op:

| role | found as | starts at |
|---|---|---|
| gain | the ``gamma`` of ``layernorm``, ``batchnorm`` or ``rmsnorm`` | 1 |
| bias | the ``beta`` of a norm, or added to a matrix product or a convolution | 0 |
| weight | an operand of ``@``/``matmul``/``einsum``, the weight of a convolution | the scheme |
| embedding | the table of ``take`` | N(0, 1), as ``torch.nn.Embedding`` |
| other | anything else: rank 2 or more as a weight, smaller ones at 0 | |

Weights are drawn by the scheme with fans as ``torch.nn.init`` computes them, from the
shape the use sees (one layer of a stacked group): ``x @ W`` with ``W: [in, out]`` has
fan-in ``in``; a convolution weight ``[O, C/groups, k...]`` has fan-in ``C/groups * k...``
and fan-out ``O * k...``. Schemes: ``torch`` (the default, ``torch.nn.Linear``'s and
``Conv``'s: uniform in ±1/sqrt(fan_in), which is Kaiming-uniform with a = sqrt(5)),
``glorot`` (uniform in ±sqrt(6 / (fan_in + fan_out))), ``kaiming`` (normal, std
sqrt(2 / fan_in), for ReLU layers) and ``normal`` (std 0.01).
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..diagnostics import AdcError
from ..ir.core import Function, Module
from ..ops.registry import has_trait, lookup

SCHEMES = ("torch", "glorot", "kaiming", "normal")
NORMAL_STD = 0.01


def roles(module: Module, fn: Function, names: list[str]) -> dict[str, tuple]:
    """``{name: (role, fans)}`` for the inputs `names` of `fn`; `fans` is ``(fan_in,
    fan_out)`` of a weight (dims may be symbolic), else None."""
    from ..passes.clone import clone_module
    from ..passes.inline import Inline
    try:
        inlined = Inline(fn=fn.name).run(clone_module(module))[fn.name]
    except AdcError:
        inlined = fn
    uses = _uses(inlined)
    declared = fn.attrs.get("roles", {})
    out = {}
    for name in names:
        try:
            arg = inlined.arg(name)
        except KeyError:
            out[name] = ("other", None)
        else:
            out[name] = _role(arg, uses)
        if name in declared:   # the program's word over the uses'; a weight keeps its fans
            role, fans = out[name]
            out[name] = (declared[name], fans if role == declared[name] == "weight" else None)
    return out


def _uses(fn: Function) -> dict:
    """value -> [(op, operand position)] over every op, loop bodies included."""
    uses: dict = {}
    for op in fn.walk():
        for k, v in enumerate(op.operands):
            uses.setdefault(v, []).append((op, k))
    return uses


def _role(v, uses) -> tuple:
    """The role told by the first use of `v` (or of a view, cast or negation of it) whose
    op has a `param_role` rule that says one (`adcompiler.ops.roles`)."""
    todo, seen = [v], set()
    while todo:
        x = todo.pop(0)
        if x in seen:
            continue
        seen.add(x)
        for op, k in uses.get(x, []):
            told = _told(op, k)
            if told is None:
                continue
            role, fans = told
            if role == "through":
                todo += op.results
            elif role == "addend":
                if _is_product(op.operands[1 - k]):
                    return "bias", None
            else:
                return role, fans
    return "other", None


def _told(op, k: int):
    if k == 0 and has_trait(op, "view"):
        return "through", None
    opdef = lookup(op.name)
    rule = opdef.param_role if opdef is not None else None
    return rule(op, k) if rule is not None else None


def _is_product(v) -> bool:
    """Whether `v` is (a view, cast or negation of) a product with a weight operand."""
    op = getattr(v, "defining_op", None)
    while op is not None and (_told(op, 0) or ("",))[0] == "through":
        op = getattr(op.operands[0], "defining_op", None)
    return op is not None and any((_told(op, k) or ("",))[0] == "weight"
                                  for k in range(len(op.operands)))


def draw(role: str, fans, shape: tuple, dtype, scheme: str, rng: np.random.Generator,
         env: Mapping[str, int]) -> np.ndarray:
    """One parameter's initial value (`shape` resolved; `fans` may name dims of `env`)."""
    if scheme not in SCHEMES:
        raise AdcError(f"unknown init scheme '{scheme}' (choose from {', '.join(SCHEMES)})")
    if role == "gain":
        return np.ones(shape, dtype)
    if role == "bias":
        return np.zeros(shape, dtype)
    if role == "embedding" and scheme == "torch":
        return rng.standard_normal(shape).astype(dtype)
    if fans is None:
        if len(shape) < 2:
            return np.zeros(shape, dtype)
        fans = (shape[-2], shape[-1])
    fan_in, fan_out = (max(_value(f, env), 1) for f in fans)
    if scheme == "torch":
        a = 1.0 / math.sqrt(fan_in)
        v = rng.uniform(-a, a, shape)
    elif scheme == "glorot":
        a = math.sqrt(6.0 / (fan_in + fan_out))
        v = rng.uniform(-a, a, shape)
    elif scheme == "kaiming":
        v = rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)
    else:
        v = rng.standard_normal(shape) * NORMAL_STD
    return v.astype(dtype)


def _value(d, env: Mapping[str, int]) -> int:
    if isinstance(d, int):
        return d
    from ..ir.types import resolve_dim
    return int(resolve_dim(d, env))
