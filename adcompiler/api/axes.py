"""`vmap`'s `in_axes` as a tree: an axis (an int, or None for "shared") per input, given
as JAX takes it, a prefix of the inputs' tree.

    in_axes={"x": 0, "m": None}                     # every leaf of group m shared
    in_axes={"x": 0, "m": {"l1": 0, "l2": None}}    # a subtree batched, another shared
    in_axes={"m.l1": 0}                             # a dotted path reads the same

An int or None where the inputs have a subtree applies to each leaf below it; a name left
out is shared. The leaves are those the library takes and returns (`files.paths`): each
layer of a stacked group (``m.blocks: Block[L]``) is a leaf of its own, so an axis given
for ``m.blocks`` or ``m.blocks.3.W`` is the axis of one layer's array, and a list under
``m.blocks`` gives one entry per layer; a dict under it (``{"W": 0, "c": None}``) applies to
every layer. The layers of a stack are one input of the compiled function, so they must all
be batched alike, and an axis k of one layer's array is axis k + 1 of that input (the layers
lead). A sequence by position names the compiled function's inputs themselves.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..files.paths import split_names

__all__ = ["axes_by_input"]


def axes_by_input(in_axes: Any, fn, inputs: list[str]) -> dict[str, int]:
    """`in_axes` (an int or None for every leaf, a sequence by input position, or a tree of
    dicts and lists by path) as {batched input: axis of the compiled function's input}."""
    stacks = dict(fn.attrs.get("stacked", {})) if fn is not None else {}
    if in_axes is None or _axis(in_axes):
        return {} if in_axes is None else {k: _shift(in_axes, k, stacks) for k in inputs}
    if isinstance(in_axes, Mapping):
        given: dict = {}
        lists: dict = {}
        _walk(in_axes, "", given, lists)
        _check_lists(lists, stacks)
        return _resolve(given, inputs, stacks, fn)
    in_axes = list(in_axes)
    if len(in_axes) != len(inputs):
        raise TypeError(f"in_axes has {len(in_axes)} entries for {len(inputs)} inputs "
                        f"({', '.join(inputs)})")
    out = {}
    for k, a in zip(inputs, in_axes):
        if a is not None and not _axis(a):
            raise TypeError(f"in_axes[{k!r}] must be an int or None, got {a!r}")
        if a is not None:
            out[k] = a
    return out


def _axis(a) -> bool:
    return isinstance(a, int) and not isinstance(a, bool)


def _depth(name: str, stacks: Mapping) -> int:
    """How many stacked groups input `name` lies in (its leading layer axes)."""
    return sum(1 for p in stacks if name.startswith(p + "."))


def _shift(axis: int, name: str, stacks: Mapping) -> int:
    """The input's axis for `axis` of one layer's array: past the layer axes (a negative
    axis counts from the end, which the layers do not change)."""
    return axis + _depth(name, stacks) if axis >= 0 else axis


def _walk(node, path: str, out: dict, lists: dict) -> None:
    """The tree's leaves (int or None) by dotted path; `lists` gets each list's path and
    length."""
    if node is None or _axis(node):
        out[path] = node
    elif isinstance(node, Mapping):
        if not node and path:
            out[path] = None
        for k, v in node.items():
            if not isinstance(k, str) or not k:
                raise TypeError(f"in_axes: a key must be a non-empty string, got {k!r}"
                                f"{f' under {path!r}' if path else ''}")
            _walk(v, f"{path}.{k}" if path else k, out, lists)
    elif isinstance(node, (list, tuple)) and path:
        lists[path] = len(node)
        for i, v in enumerate(node):
            _walk(v, f"{path}.{i}", out, lists)
    else:
        raise TypeError(f"in_axes[{path!r}] must be an int, None, or a dict or list of them, "
                        f"got {node!r}")


def _check_lists(lists: dict, stacks: Mapping) -> None:
    """A list in the tree stands for the layers of a stacked group: one entry per layer."""
    for path, n in lists.items():
        base, _ = _parse(path, stacks)
        if base not in stacks:
            raise TypeError(f"in_axes['{path}'] is a list, but '{base}' is not a stacked "
                            "group (a list gives one entry per layer of one)")
        if _axis(stacks[base]) and n != stacks[base]:
            raise TypeError(f"in_axes['{path}'] has {n} entries for the {stacks[base]} "
                            f"layers of stacked group '{base}'")


def _parse(path: str, stacks: Mapping) -> tuple[str, tuple]:
    """`path` without its layer indices (``m.blocks.2.W`` -> ``m.blocks.W``), and them."""
    parts, base, idx, i = path.split("."), [], [], 0
    while i < len(parts):
        base.append(parts[i])
        i += 1
        if ".".join(base) in stacks and i < len(parts) and parts[i].isdigit():
            idx.append(int(parts[i]))
            i += 1
    return ".".join(base), tuple(idx)


def _resolve(given: dict, inputs: list[str], stacks: Mapping, fn) -> dict[str, int]:
    found: dict[str, dict] = {k: {} for k in inputs}    # input -> {tree path: axis}
    for path, axis in given.items():
        base, idx = _parse(path, stacks)
        below = [k for k in inputs if k == base or k.startswith(base + ".")]
        if not below or any(i >= _length(stacks[n]) for n, i in _levels(base, idx, stacks)):
            shown = ", ".join(split_names(fn, inputs) if fn is not None else inputs)
            raise TypeError(f"in_axes: '{path}' is not an input (inputs: {shown})")
        for k in below:
            found[k][path] = axis
    out = {}
    for k, by_path in found.items():
        axes = set(by_path.values())
        if len(axes) > 1:
            shown = ", ".join(f"'{p}' is {a}" for p, a in by_path.items())
            raise TypeError(f"in_axes gives input '{k}' different axes ({shown}): the layers "
                            "of a stacked group are one array, batched alike")
        if axes and next(iter(axes)) is not None:
            out[k] = _shift(next(iter(axes)), k, stacks)
    return out


def _levels(base: str, idx: tuple, stacks: Mapping) -> list[tuple[str, int]]:
    """The stacked groups that `idx` indexes, outermost first, with each index."""
    mine = sorted((p for p in stacks if base.startswith(p + ".") or base == p), key=len)
    return list(zip(mine, idx))


def _length(n) -> int:
    """A stack's length where it is a number (a symbolic one bounds nothing here)."""
    return n if _axis(n) else 1 << 62


def prefix_leaves(axes: Any, value: Any, where: str) -> list:
    """An axis per leaf of the pytree `value`, from `axes`: a tree prefix of it, an int or
    None standing for the whole subtree below it (as ``jax.vmap``'s in_axes). A tree that
    does not match is an error naming the path where it differs."""
    from ..frontend.python import pytree
    if axes is None or _axis(axes):
        return [axes] * len(pytree.flatten(value)[0])
    if isinstance(axes, Mapping) and isinstance(value, Mapping):
        if set(axes) != set(value):
            extra, missing = sorted(map(str, set(axes) - set(value))), \
                sorted(map(str, set(value) - set(axes)))
            raise TypeError(f"in_axes{where} does not match the argument: " + "; ".join(
                ([f"keys {extra} are not in it"] if extra else []) +
                ([f"keys {missing} are missing"] if missing else [])))
        return [a for k in value for a in prefix_leaves(axes[k], value[k], f"{where}[{k!r}]")]
    if isinstance(axes, (list, tuple)) and isinstance(value, (list, tuple)) and \
            type(axes) is type(value):
        if len(axes) != len(value):
            raise TypeError(f"in_axes{where} has {len(axes)} entries, the argument "
                            f"{len(value)}")
        return [a for k, (ax, v) in enumerate(zip(axes, value))
                for a in prefix_leaves(ax, v, f"{where}[{k}]")]
    what = type(value).__name__ if isinstance(value, (Mapping, list, tuple)) else "an array"
    raise TypeError(f"in_axes{where} is {axes!r}, but the argument there is {what}: give an "
                    "int, None, or a tree of its structure")
