"""Pytrees: nested dicts, lists and tuples of arrays, flattened to a list of leaves.

    leaves, tree = flatten({"W": W, "b": [b0, b1]})     # [W, b0, b1]
    unflatten(tree, [dW, db0, db1])                     # {"W": dW, "b": [db0, db1]}
    leaf_names("params", tree)                          # ["params_W", "params_b_0", ...]

`tree` (a `TreeDef`) is hashable and compares equal for trees of the same structure, so it
can key a cache. Dicts keep their insertion order; ``None`` is a node without leaves (as in
JAX). Anything else is a leaf. This module imports nothing of adc: the Python front end, the
transforms and the training step share it.
"""
from __future__ import annotations

import keyword
import re
from typing import Any, NamedTuple


class TreeDef(NamedTuple):
    """The structure of a pytree: ``kind`` is ``leaf``, ``none``, ``tuple``, ``list`` or
    ``dict``; ``keys`` the dict's keys (else empty); ``children`` their `TreeDef`s."""

    kind: str
    keys: tuple = ()
    children: tuple = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __repr__(self) -> str:
        return f"TreeDef({describe(self)})"


LEAF = TreeDef("leaf")
NONE = TreeDef("none")


def flatten(tree: Any) -> tuple[list, TreeDef]:
    """The leaves of `tree` in order, and its structure."""
    leaves: list = []
    return leaves, _flatten(tree, leaves, 0)


def _flatten(x, leaves: list, depth: int) -> TreeDef:
    if depth > 100:
        raise ValueError("a pytree nested more than 100 levels deep")
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return TreeDef("tuple", (), tuple(_flatten(c, leaves, depth + 1) for c in x))
    if isinstance(x, list):
        return TreeDef("list", (), tuple(_flatten(c, leaves, depth + 1) for c in x))
    if isinstance(x, dict):
        return TreeDef("dict", tuple(x), tuple(_flatten(v, leaves, depth + 1)
                                               for v in x.values()))
    if x is None:
        return NONE
    leaves.append(x)
    return LEAF


def unflatten(tree: TreeDef, leaves) -> Any:
    """The pytree of structure `tree` with `leaves` (exactly `tree.num_leaves` of them)."""
    it = iter(leaves)
    out = _build(tree, it)
    if next(it, _END) is not _END:
        raise ValueError(f"unflatten: more leaves than the {tree.num_leaves} of the tree")
    return out


_END = object()


def _build(tree: TreeDef, it) -> Any:
    if tree.kind == "leaf":
        x = next(it, _END)
        if x is _END:
            raise ValueError("unflatten: fewer leaves than the tree has")
        return x
    if tree.kind == "none":
        return None
    items = [_build(c, it) for c in tree.children]
    if tree.kind == "tuple":
        return tuple(items)
    if tree.kind == "list":
        return items
    return dict(zip(tree.keys, items))


def leaf_paths(tree: TreeDef) -> list[tuple]:
    """The path (dict keys and sequence positions) of each leaf, in leaf order."""
    out: list[tuple] = []

    def walk(t: TreeDef, path: tuple) -> None:
        if t.kind == "leaf":
            out.append(path)
        elif t.kind == "dict":
            for k, c in zip(t.keys, t.children):
                walk(c, path + (k,))
        else:
            for i, c in enumerate(t.children):
                walk(c, path + (i,))
    walk(tree, ())
    return out


_NOT_WORD = re.compile(r"\W+")


def leaf_names(prefix: str, tree: TreeDef, taken=()) -> list[str]:
    """An identifier for each leaf: `prefix` and the leaf's path joined by ``_``
    (``params_layers_0_W``), made unique against `taken` and each other."""
    used = set(taken)
    names = []
    for path in leaf_paths(tree):
        parts = [prefix] + [_NOT_WORD.sub("_", str(p)).strip("_") or "k" for p in path]
        name = "_".join(parts)
        if not name.isidentifier() or keyword.iskeyword(name):
            name = "_" + name
        base, k = name, 1
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        names.append(name)
    return names


def describe(tree: TreeDef) -> str:
    """A short text of the structure: ``{'W': *, 'b': [*, *]}``."""
    if tree.kind == "leaf":
        return "*"
    if tree.kind == "none":
        return "None"
    inner = [describe(c) for c in tree.children]
    if tree.kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(tree.keys, inner)) + "}"
    if tree.kind == "tuple":
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
    return "[" + ", ".join(inner) + "]"


def tree_map(fn, tree: Any, *rest: Any) -> Any:
    """`fn` applied leaf by leaf to `tree` and the trees of the same structure `rest`."""
    leaves, td = flatten(tree)
    others = []
    for r in rest:
        ls, t = flatten(r)
        if t != td:
            raise ValueError(f"tree_map: structures differ: {describe(td)} and {describe(t)}")
        others.append(ls)
    return unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])
