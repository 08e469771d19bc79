"""One OpInfo sample written as a TDSL call: the inputs it names, the options it writes, and
what adc lacks to run it.

A translator (``opinfo_map``) reads a PyTorch ``SampleInput`` and writes the adc call with
the same meaning through a `Call`. Options are written as the sample gives them; an option
adc does not have is still written (so that adc's own error can be checked) and recorded as
the reason the sample is refused.
"""
from __future__ import annotations

import math

import torch

TDSL_DTYPES = {torch.float64: "f64", torch.float32: "f32", torch.int64: "i64",
               torch.int32: "i32", torch.bool: "bool"}


class Call:
    """The inputs, options and refusals of one sample's TDSL expression."""

    def __init__(self):
        self.inputs: dict[str, torch.Tensor] = {}  # TDSL input name -> the sample's tensor
        self._names: dict[int, str] = {}
        self.refusals: list[str] = []  # why adc is expected to refuse the call
        self.pick: int | None = None   # the result compared when torch returns a tuple
        # the other results of such a tuple that adc computes by a call of its own:
        # (their place in the tuple, the TDSL expression), compared by value
        self.also: list[tuple[int, str]] = []

    # ---- operands ----------------------------------------------------------------------

    def t(self, tensor) -> str:
        """The input name of a tensor operand (a Python number is written as a literal)."""
        if not isinstance(tensor, torch.Tensor):
            return self.lit(tensor)
        key = id(tensor)
        if key not in self._names:
            if tensor.dtype not in TDSL_DTYPES:
                self.refuse(f"dtype {tensor.dtype}")
            name = f"x{len(self._names)}"
            self._names[key] = name
            self.inputs[name] = tensor
        return self._names[key]

    def f(self, tensor, like=torch.float64) -> str:
        """A float operand: an integer or bool tensor is cast as PyTorch's type promotion
        does implicitly (TDSL asks for the cast to be written)."""
        name = self.t(tensor)
        if isinstance(tensor, torch.Tensor) and not tensor.dtype.is_floating_point:
            return f"cast({name}, {TDSL_DTYPES[like]})"
        return name

    def ts(self, tensors) -> str:
        """A list operand (`concat`, `stack`)."""
        return "[" + ", ".join(self.t(x) for x in tensors) + "]"

    # ---- options -----------------------------------------------------------------------

    def lit(self, v) -> str:
        """`v` as a TDSL literal; a value TDSL cannot write is written as PyTorch spells it
        (adc rejects it, as it should)."""
        if v is None:
            self.refuse("None")
            return "None"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            if not math.isfinite(v):
                self.refuse(f"the number {v}")
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, (list, tuple, torch.Size)):
            return "[" + ", ".join(self.lit(x) for x in v) + "]"
        if isinstance(v, torch.dtype):
            return TDSL_DTYPES.get(v, str(v))
        raise TypeError(f"no TDSL literal for {v!r}")

    def opt(self, name: str, value) -> str:
        return f"{name}={self.lit(value)}"

    def lacks(self, name: str, value) -> str:
        """An option adc does not have: written as given, and the sample refused."""
        if value is None:
            self.refuse(f"{name}=None")
            return f"{name}=None"
        if isinstance(value, torch.Tensor):  # a tensor option, as PyTorch's `weight=`
            self.refuse(f"{name}=<tensor>")
            return f"{name}={self.t(value)}"
        self.refuse(f"{name}={value!r}")
        return self.opt(name, value)

    def refuse(self, why: str) -> None:
        self.refusals.append(why)


def arg(s, i: int, name: str, default=None):
    """Argument `name` of a sample: positional `i` of ``s.args`` or a keyword."""
    if i < len(s.args):
        return s.args[i]
    return s.kwargs.get(name, default)


def extra(c: Call, s, known: set[str], positional: int = 0) -> str:
    """The sample's keywords (and positional arguments past `positional`) that the
    translator does not map: written as given, each refused."""
    parts = [c.lacks(f"arg{i}", v) for i, v in enumerate(s.args) if i >= positional]
    parts += [c.lacks(k, v) for k, v in s.kwargs.items() if k not in known]
    return ", ".join(parts)


def call(name: str, *parts: str) -> str:
    """``name(a, b, k=v)`` from the written operands and options (empty parts dropped)."""
    return f"{name}({', '.join(p for p in parts if p)})"


def axis_list(dim, ndim: int):
    """PyTorch's ``dim`` as adc's ``axis``: ``None`` for all axes. ``dim=()`` is PyTorch's
    spelling of all axes too, and on a 0-d tensor PyTorch accepts dim 0 and -1, meaning the
    tensor itself: both are adc's ``axis=None``."""
    if dim is None or dim == () or dim == []:
        return None
    if ndim == 0:
        return None
    return list(dim) if isinstance(dim, (list, tuple)) else dim


def normalize(dim: int, ndim: int) -> int:
    return dim + ndim if dim < 0 else dim


def spatial(v, n: int) -> list[int]:
    """A PyTorch int-or-tuple option as a list of `n` ints."""
    if isinstance(v, int):
        return [v] * n
    v = list(v)
    return v * n if len(v) == 1 else v
