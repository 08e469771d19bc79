"""Imported parameters grouped by module path.

A trained parameter whose name in the model is a dotted path (PyTorch's ``layer1.0.conv1.weight``,
an ONNX initializer exported from such a module) becomes a leaf of a TDSL parameter group
mirroring the module tree: the input ``layer1`` of group type ``Layer1``, whose field ``_0``
is a ``Layer1_0`` holding ``conv1: Layer1_0_Conv1`` and so on, so that the leaf's path is the
model's, each part made an identifier (a number ``0`` reads ``_0``, as a field cannot start
with a digit). `ParamTree.place` decides a leaf's place, or that the name stays a plain input
(no dot, an empty part, or a part that is a leaf in one name and a module in another).
"""
from __future__ import annotations

from ...ir.types import TensorType
from ..tdsl.groups import GroupRef, GroupType
from .names import Names, quote, sanitize, type_text


def field_name(part: str) -> str:
    """The identifier of one part of a module path: itself when valid, ``_0`` for ``0``."""
    return "_" + part if part.isdigit() else sanitize(part, "m")


class _Node:
    """One module: its fields (a child `_Node` or a leaf's `TensorType`) by identifier."""

    def __init__(self, path: tuple, type_name: str):
        self.path, self.type_name = path, type_name
        self.fields: dict[str, object] = {}
        self.by_part: dict[str, str] = {}      # the model's part -> field identifier
        self.names = Names()

    def field(self, part: str) -> str:
        if part not in self.by_part:
            self.by_part[part] = self.names.fresh(field_name(part))
        return self.by_part[part]

    def group_type(self) -> GroupType:
        fields = {k: v if isinstance(v, TensorType) else GroupRef(v.group_type())
                  for k, v in self.fields.items()}
        return GroupType(self.type_name, fields)

    def groups(self) -> list["_Node"]:
        """This module and those below it, a module after the ones it holds."""
        out = []
        for v in self.fields.values():
            if isinstance(v, _Node):
                out += v.groups()
        return out + [self]


class ParamTree:
    """The groups of one imported function: top-level inputs (`tops`, by the first part of
    the model's path) and the type names of their groups."""

    def __init__(self, names: Names):
        self.names = names                  # the function's identifiers (the top inputs)
        self.type_names = Names()
        self.tops: dict[str, tuple[str, _Node]] = {}   # first part -> (input name, node)

    def place(self, source: str, t: TensorType) -> tuple[str, str] | None:
        """(top input name, leaf path below it) for parameter `source` of type `t`, the
        groups grown to hold it; None when it stays a plain input."""
        parts = source.split(".")
        if len(parts) < 2 or not all(parts) or not self._fits(parts):
            return None
        if parts[0] not in self.tops:
            top = self.names.take(parts[0], "m")
            self.tops[parts[0]] = (top, _Node((parts[0],), self._type_name((parts[0],))))
        top, node = self.tops[parts[0]]
        fields = []
        for k, part in enumerate(parts[1:-1], start=2):
            f = node.field(part)
            if f not in node.fields:
                node.fields[f] = _Node(tuple(parts[:k]), self._type_name(tuple(parts[:k])))
            node = node.fields[f]
            fields.append(f)
        leaf = node.field(parts[-1])
        node.fields[leaf] = t
        return top, ".".join(fields + [leaf])

    def _fits(self, parts: list[str]) -> bool:
        """Whether `parts` is a new leaf that no existing leaf or module stands in the way of."""
        entry = self.tops.get(parts[0])
        node = entry[1] if entry else None
        for k, part in enumerate(parts[1:], start=1):
            if node is None:
                return True
            f = node.by_part.get(part)
            child = node.fields.get(f) if f is not None else None
            last = k == len(parts) - 1
            if child is None:
                return True
            if last or isinstance(child, TensorType):
                return False        # taken: the same leaf twice, or a leaf and a module
            node = child
        return True

    def _type_name(self, path: tuple) -> str:
        text = "_".join(p[:1].upper() + p[1:] for p in path)
        return self.type_names.fresh(text if not text[:1].isdigit() else "M" + text)

    def group_type(self, first: str) -> GroupType:
        return self.tops[first][1].group_type()

    def top_of(self, input_name: str) -> str | None:
        for first, (top, _) in self.tops.items():
            if top == input_name:
                return first
        return None

    def declarations(self) -> list[str]:
        """The ``group`` declarations, each after those it holds, with its module path."""
        out = []
        for _, node in self.tops.values():
            for g in node.groups():
                out.append(f"# {quote('.'.join(g.path))}")
                out.append(f"group {g.type_name} {{")
                for k, v in g.fields.items():
                    text = v.type_name if isinstance(v, _Node) else type_text(v)
                    out.append(f"    {k}: {text}")
                out += ["}", ""]
        return out

