"""The TDSL writer shared by the model importers.

An importer declares the inputs and parameters it finds and writes one statement per source
node (`assign`), each with a comment naming that node. Every statement is lowered as soon as
it is written, by the TDSL front end itself (`FunctionLowerer`), so the importer learns the
exact type of what it wrote from the same type rules the final compile applies, and a
statement the language refuses is reported at the node that produced it. `source` prints
the program: the inputs, then the parameters (each with its source name), the body, and
optionally a `loss` function over the model.

A trained parameter named by a dotted module path is a leaf of a parameter group mirroring
the module tree (`groups.ParamTree`); the model's read-only data (constants) are plain
``param`` inputs read through ``stop_gradient``, and the buffers a training step updates
(running statistics) are ``state`` inputs, rebound by the statement that updates them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...diagnostics import AdcError
from ...ir.core import Block, Function, Value
from ...ir.types import TensorType
from ..tdsl.function import Binding, FunctionLowerer
from ..tdsl.groups import GroupValue
from ..tdsl.parse import parse
from ..tdsl.randomness import KEY, KEY_INPUT, _calls, is_random_op
from .groups import ParamTree
from .losses import LOSSES
from .names import Names, number, quote, type_text

NP_TO_TDSL = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
              np.dtype(np.float16): "f16", np.dtype(np.int64): "i64",
              np.dtype(np.int32): "i32", np.dtype(np.bool_): "bool"}
# integer widths TDSL lacks, held exactly in i64 (constants and parameters only)
WIDENED = {np.dtype(t): np.dtype(np.int64)
           for t in (np.int8, np.int16, np.uint8, np.uint16, np.uint32)}


@dataclass
class Val:
    """A value of the program being written: its identifier and its type."""

    name: str
    type: TensorType

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def rank(self) -> int:
        return len(self.type.shape)


@dataclass
class ParamRecord:
    name: str
    type: TensorType
    value: np.ndarray
    source: str                 # the name in the model
    trainable: bool = True      # False: constant data the model reads (no gradient)
    top: str | None = None      # the group input holding it (its `name` is the leaf path)


@dataclass
class StateRecord:
    name: str
    type: TensorType
    value: np.ndarray
    source: str


@dataclass
class InputRecord:
    name: str
    type: TensorType
    source: str


def tdsl_array(value: np.ndarray) -> np.ndarray:
    """`value` in a dtype TDSL has (narrow integers widened exactly), or ValueError."""
    a = np.asarray(value)
    if a.dtype in WIDENED:
        return a.astype(WIDENED[a.dtype])
    if a.dtype not in NP_TO_TDSL:
        raise ValueError(f"element type {a.dtype} has no TDSL dtype")
    return a


class ProgramWriter:
    """One imported function, written statement by statement."""

    def __init__(self, file: str, fn: str = "model"):
        self.file = file
        # np.savez takes `file` and `allow_pickle` as its own arguments: no param may be so named
        self.names = Names(reserved={fn, "loss", "target", "out", "file", "allow_pickle",
                                     KEY_INPUT})
        self.fn_name = fn
        self.inputs: list[InputRecord] = []
        self.params: list[ParamRecord] = []
        self.states: list[StateRecord] = []
        self.tree = ParamTree(self.names)
        self.lines: list[str] = []
        self.results: list[tuple[Val, str]] = []
        self._fn = Function(fn, Block([], []), [])
        self._lower = FunctionLowerer(file, {}, self._fn, f"function '{fn}'", [])

    # ---- declarations -------------------------------------------------------------------
    def _arg(self, name: str, t: TensorType) -> Val:
        arg = self._fn.body.add_arg(t, name)
        self._lower.scope.vars[name] = Binding(arg, None)
        self._lower.symbols |= {d for d in t.shape if isinstance(d, str)}
        return Val(name, t)

    def add_input(self, source: str, dtype: str, shape: tuple) -> Val:
        name = self.names.take(source, "x")
        t = TensorType(dtype, tuple(shape))
        self.inputs.append(InputRecord(name, t, source))
        return self._arg(name, t)

    def add_param(self, source: str, value, *, trainable: bool = True, hint: str = "p") -> Val:
        """A ``param`` input holding `value`: a leaf of the groups when trained and named by a
        dotted path, else a plain input (`trainable` False: read, never trained)."""
        a = tdsl_array(value)
        t = TensorType(NP_TO_TDSL[a.dtype], tuple(int(d) for d in a.shape))
        placed = self.tree.place(source, t) if trainable else None
        if placed is None:
            name = self.names.take(source, hint)
            self.params.append(ParamRecord(name, t, a, source, trainable))
            return self._arg(name, t)
        top, leaf = placed
        name = f"{top}.{leaf}"
        self.params.append(ParamRecord(name, t, a, source, trainable, top))
        self._fn.body.add_arg(t, name)
        self._bind_group(top)
        return Val(name, t)

    def _bind_group(self, top: str) -> None:
        """(Re)bind group input `top` in the body to a group holding every leaf so far."""
        first = self.tree.top_of(top)
        g = self.tree.group_type(first)
        args = {a.name: a for a in self._fn.body.args}
        leaves = {path: args[f"{top}.{path}"] for path, _ in g.leaves()}
        self._lower.scope.vars[top] = Binding(GroupValue(g, (), leaves, (), top), None)

    def add_state(self, source: str, value) -> Val:
        """A ``state`` input starting at `value` (a buffer that the model updates)."""
        a = tdsl_array(value)
        name = self.names.take(source, "s")
        t = TensorType(NP_TO_TDSL[a.dtype], tuple(int(d) for d in a.shape))
        self.states.append(StateRecord(name, t, a, source))
        return self._arg(name, t)

    def state_names(self) -> set[str]:
        return {s.name for s in self.states}

    # ---- statements ---------------------------------------------------------------------
    def assign(self, hints: list[str], expr: str, comment: str, keep=()) -> list[Val]:
        """Write ``t1, t2 = expr  # comment`` with targets named from `hints`, lower it, and
        return the targets with their types; a hint whose position is in `keep` is a state
        input's name, rebound as it is. An `AdcError` means the language refused the
        statement; nothing is kept of it then."""
        targets = [h if k in keep else self.names.fresh(h) for k, h in enumerate(hints)]
        line = f"{', '.join(targets)} = {expr}"
        tree = parse(f"def _s() -> f32 {{\n{line}\nreturn 0.0\n}}\n", self.file)
        stmt = tree.defs[0].body[0]
        if self._lower.keys.entries[0][0] is None and \
                any(is_random_op(c.func, {}) for c in _calls(stmt, [])):
            # the first op that draws: the function gets its key input, as a compile gives it
            self._lower.keys.entries[0][0] = self._fn.body.add_arg(KEY, KEY_INPUT)
        self._lower.assign(stmt)
        self.lines.append(f"    {line}  # {quote(comment)}" if comment else f"    {line}")
        return [Val(t, self._lower.scope.vars[t].value.type) for t in targets]

    def value_type(self, name: str) -> TensorType:
        v = self._lower.scope.vars[name].value
        if not isinstance(v, Value):
            raise AdcError(f"'{name}' is a literal, not a tensor")
        return v.type

    def set_results(self, results: list[tuple[Val, str]]) -> None:
        """The function's results: (value, the model's name for it)."""
        self.results = list(results)

    # ---- printing -----------------------------------------------------------------------
    def param_inputs(self) -> list[str]:
        """The function's ``param`` and ``state`` inputs as a call passes them (a group
        input once, where its first leaf stands)."""
        out: list[str] = []
        for p in self.params:
            name = p.top or p.name
            if name not in out:
                out.append(name)
        return out + [s.name for s in self.states]

    def _header(self, name: str, extra: list[str], result: str) -> list[str]:
        out = [f"def {name}("]
        for r in self.inputs:
            out.append(f"    {r.name}: {type_text(r.type)},")
        out += [f"    {e}," for e in extra]
        seen = set()
        for p in self.params:
            if p.top is not None:
                if p.top not in seen:
                    seen.add(p.top)
                    first = self.tree.top_of(p.top)
                    g = self.tree.group_type(first)
                    out.append(f"    param {p.top}: {g.name},  # {quote(first)}")
                continue
            note = "" if p.trainable else ", constant"
            out.append(f"    param {p.name}: {type_text(p.type)},  # {quote(p.source)}{note}")
        for s in self.states:
            init = _state_init(s.value)
            out.append(f"    state {s.name}: {type_text(s.type)}{init},  # {quote(s.source)}")
        out.append(f") -> {result} {{")
        return out

    def result_types(self) -> list[TensorType]:
        return [v.type for v, _ in self.results]

    def source(self, header: list[str] = (), loss: str | None = None) -> str:
        types = self.result_types()
        result = type_text(types[0]) if len(types) == 1 else \
            "(" + ", ".join(type_text(t) for t in types) + ")"
        out = [f"# {quote(h)}" for h in header]
        groups = self.tree.declarations()
        out += [""] + groups if groups else []
        out += self._header(self.fn_name, [], result)
        out += self.lines
        out.append("    return " + ", ".join(v.name for v, _ in self.results) +
                   "  # " + quote(", ".join(n for _, n in self.results)))
        out.append("}")
        if loss is not None:
            out += [""] + self._loss(loss)
        return "\n".join(out) + "\n"

    def loss_target(self, kind: str) -> TensorType:
        """The type of the `target` input of the `kind` loss, or AdcError."""
        if kind not in LOSSES:
            raise AdcError(f"unknown loss '{kind}' (expected one of {', '.join(LOSSES)})")
        types = self.result_types()
        if len(types) != 1 or not types[0].is_float:
            raise AdcError(f"--loss {kind} needs a model with one float output; this one "
                           f"has {len(types)} outputs")
        t = types[0]
        if kind == "mse":
            return t
        if len(t.shape) < 1:
            raise AdcError("--loss cross_entropy needs outputs with a class axis (the last)")
        shape = self._class_shape(t)
        return TensorType("i64", shape[:-1])

    @staticmethod
    def _class_shape(t: TensorType) -> tuple:
        """The output's shape for cross entropy: [N, C, 1, 1] (a CNN ending in a 1x1
        convolution or pooling) counts as [N, C]; otherwise classes lie on the last axis."""
        if len(t.shape) > 2 and all(d == 1 for d in t.shape[2:]):
            return t.shape[:2]
        return t.shape

    def _loss(self, kind: str) -> list[str]:
        target = self.loss_target(kind)
        args = ", ".join([r.name for r in self.inputs] + self.param_inputs())
        body = LOSSES[kind]
        t = self.result_types()[0]
        squeeze = kind == "cross_entropy" and self._class_shape(t) != t.shape
        out = [f"# the mean {kind.replace('_', ' ')} of the model's output against `target`"]
        out += self._header("loss", [f"target: {type_text(target)}"],
                            type_text(TensorType(self.result_types()[0].dtype, ())))
        call = f"{self.fn_name}({args})"
        if squeeze:
            call = f"squeeze({call}, {list(range(2, len(t.shape)))})"
        out += [f"    out = {call}", f"    return {body}", "}"]
        return out

    def param_values(self) -> dict[str, np.ndarray]:
        return {p.name: p.value for p in self.params}

    def state_values(self) -> dict[str, np.ndarray]:
        return {s.name: s.value for s in self.states}


def _state_init(value: np.ndarray) -> str:
    """`` = V`` when every element of a state's starting value is V (torch's fresh running
    variance, 1), else nothing: the values themselves come with the parameters."""
    flat = np.asarray(value).reshape(-1)
    if flat.size and np.all(flat == flat[0]) and np.isfinite(flat[0]) and flat[0] != 0:
        v = flat[0].item()
        text = number(abs(v), "i64" if isinstance(v, int) else "f64")
        return f" = {'-' if v < 0 else ''}{text}"
    return ""
