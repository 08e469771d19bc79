"""Parameter paths: how a function's inputs are named in files and in the library.

A TDSL parameter group lowers to one input per leaf named by its dotted path (``m.attn.Wq``);
a stacked group (``blocks: Block[L]``) to one input per leaf with the layers on a leading
axis (``m.blocks.W: f32[L, D, D]``), recorded in the function's ``stacked`` attribute
(``{"m.blocks": "L"}``). Outside the compiler each layer is a leaf of its own, with its
index in the path, as JAX's and PyTorch's state dicts name them: ``m.blocks.3.W``.

    split(stacks, {"m.blocks.W": a})           # {"m.blocks.0.W": a[0], "m.blocks.1.W": ...}
    join(fn, {"m.blocks.0.W": a0, ...}, what)  # {"m.blocks.W": stack([a0, ...])}
    nest({"m.blocks.0.W": a0, "m.E": e})       # {"m": {"blocks": [{"W": a0}], "E": e}}
    flat_paths(tree)                           # the inverse of `nest`

`join` also takes a stacked leaf whole under its input name (``m.blocks.W``), and refuses a
key that matches no path, layers of different shapes, and a missing layer, naming the path.
"""
from __future__ import annotations

import difflib
from typing import Any, Mapping

import numpy as np

from ..diagnostics import AdcError
from ..frontend.python import pytree


def stacks_of(fn) -> dict:
    """The stacked groups of `fn` (path -> length), empty for a function without any."""
    return dict(fn.attrs.get("stacked", {})) if fn is not None else {}


def _outer(name: str, stacks: Mapping) -> str | None:
    """The outermost stacked group that input `name` lies in, or None."""
    best = None
    for p in stacks:
        if name.startswith(p + ".") and (best is None or len(p) < len(best)):
            best = p
    return best


def _inner(stacks: Mapping, prefix: str) -> dict:
    """The stacked groups below `prefix`, their paths relative to it."""
    return {q[len(prefix) + 1:]: d for q, d in stacks.items() if q.startswith(prefix + ".")}


def split(stacks: Mapping, arrays: Mapping[str, Any], prefix: str = "") -> dict:
    """Arrays by input name -> by leaf path, each stacked leaf split into its layers
    (`prefix` is put before each name, e.g. ``grad_``)."""
    if not stacks:
        return {prefix + k: v for k, v in arrays.items()} if prefix else dict(arrays)
    out = {}
    for name, a in arrays.items():
        _split_one(name, a, stacks, prefix, out)
    return out


def _split_one(name: str, a, stacks: Mapping, prefix: str, out: dict) -> None:
    p = _outer(name, stacks)
    if p is None:
        out[prefix + name] = a
        return
    rest, inner = name[len(p) + 1:], _inner(stacks, p)
    for k in range(a.shape[0]):
        _split_one(rest, a[k], inner, f"{prefix}{p}.{k}.", out)


def _locate(key: str, names: set, stacks: Mapping) -> tuple[str, tuple] | None:
    """The input a leaf path `key` belongs to and the layer indices it names, or None."""
    if key in names:
        return key, ()
    parts, idx, i = key.split("."), [], 0
    built: list[str] = []
    while i < len(parts):
        built.append(parts[i])
        i += 1
        if ".".join(built) in stacks:
            if i >= len(parts) or not parts[i].isdigit():
                return None
            idx.append(int(parts[i]))
            i += 1
    name = ".".join(built)
    return (name, tuple(idx)) if name in names and idx else None


def join(fn, arrays: Mapping[str, Any], what: str, names=None) -> dict:
    """Arrays keyed by leaf path (``m.blocks.3.W``), or by input name for a stacked leaf
    whole, -> arrays by input name of `fn` (among `names`, default every input). A key that
    matches no path is an error naming it and what was expected."""
    stacks = stacks_of(fn)
    names = set(fn.arg_names if names is None else names)
    if not stacks and not any("." in k for k in arrays):
        return dict(arrays)
    whole, layers = {}, {}
    for key, a in arrays.items():
        found = _locate(key, names, stacks) if stacks or key in names else None
        if found is None and "." not in key:
            whole[key] = a          # no path: the caller's checks name it
            continue
        if found is None:
            raise AdcError(f"{what}: '{key}' matches no parameter path of '{_primal(fn)}'"
                           f"{_expected(key, fn, names, stacks)}")
        name, idx = found
        if not idx:
            whole[name] = a
        else:
            layers.setdefault(name, {})[idx] = (key, a)
    for name, parts in layers.items():
        if name in whole:
            raise AdcError(f"{what}: '{name}' is given whole and by layer "
                           f"('{next(iter(parts.values()))[0]}'): give one or the other")
    _same_layers(layers, stacks, what)
    for name, parts in layers.items():
        whole[name] = _stack(name, parts, what)
    return whole


def _same_layers(layers: dict, stacks: Mapping, what: str) -> None:
    """Every leaf of a stacked group given by layer has the same layers: a leaf missing in
    one layer is an error naming that layer's path."""
    by_group: dict[str, dict] = {}
    for name, parts in layers.items():
        by_group.setdefault(_outer(name, stacks), {})[name] = parts
    for group, leaves in by_group.items():
        seen = {i[0] for parts in leaves.values() for i in parts}
        n = stacks.get(group)
        if isinstance(n, int) and max(seen) + 1 < n:   # the last layers left out everywhere
            example = next(iter(next(iter(leaves.values())).values()))[0]
            raise AdcError(f"{what}: missing '{_layer_path(example, (max(seen) + 1,))}': "
                           f"stacked group '{group}' has {n} layers")
        for name, parts in leaves.items():
            mine = {i[0] for i in parts}
            if mine != seen:
                k = min(seen - mine)
                example = next(iter(parts.values()))[0]
                raise AdcError(f"{what}: missing '{_layer_path(example, (k,))}': stacked "
                               f"group '{group}' has layer {k} in other leaves")


def _primal(fn) -> str:
    for key in ("adjoint_of", "tangent_program_of", "hvp_of", "train_step_of"):
        if key in fn.attrs:
            return fn.attrs[key]
    return fn.name


def _stack(name: str, parts: dict, what: str):
    """One stacked array from the layers of a leaf, keyed by their index tuples."""
    depth = len(next(iter(parts)))
    counts = [max(i[k] for i in parts) + 1 for k in range(depth)]
    first_key, first = next(iter(parts.values()))
    shape = np.shape(first)
    for idx in np.ndindex(*counts):
        if idx not in parts:
            raise AdcError(f"{what}: missing '{_layer_path(first_key, idx)}': the layers "
                           f"of '{name}' go from 0 to {counts} - 1 with none left out")
        key, a = parts[idx]
        if np.shape(a) != shape:
            raise AdcError(f"{what}: the layers of the stacked group must have one shape: "
                           f"'{key}' is {np.shape(a)}, '{first_key}' is {shape}")
    out = np.stack([np.asarray(parts[i][1]) for i in np.ndindex(*counts)])
    return out.reshape(tuple(counts) + out.shape[1:])


def _layer_path(example: str, idx: tuple) -> str:
    """`example` (a leaf path with layer indices) with its indices replaced by `idx`."""
    parts, k = example.split("."), 0
    for i, p in enumerate(parts):
        if p.isdigit() and k < len(idx):
            parts[i] = str(idx[k])
            k += 1
    return ".".join(parts)


def _expected(key: str, fn, names: set, stacks: Mapping) -> str:
    shown = sorted(_shown(n, stacks) for n in names)
    close = difflib.get_close_matches(key, shown, 1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f" (paths: {', '.join(shown)}){hint}"


def _shown(name: str, stacks: Mapping) -> str:
    """How an input's leaf paths read in a message: ``m.blocks.<i>.W`` for a stacked one."""
    p = _outer(name, stacks)
    if p is None:
        return name
    rest = _shown(name[len(p) + 1:], _inner(stacks, p))
    return f"{p}.<i>.{rest}"


def join_loaded(fn, data: Mapping[str, tuple], what: str) -> dict:
    """`join` of arrays loaded with a "came from JSON" flag (`files.inputs.load_data`)."""
    if not stacks_of(fn) and not any("." in k for k in data):
        return dict(data)
    arrays = join(fn, {k: v[0] for k, v in data.items()}, what)
    flags = {}
    for k, (_, js) in data.items():
        found = _locate(k, set(fn.arg_names), stacks_of(fn))
        flags[found[0] if found else k] = js
    return {k: (a, flags.get(k, False)) for k, a in arrays.items()}


def expand_wrt(fn, wrt: list[str]) -> list[str]:
    """`wrt` with each name of a group (``blocks.attn``) replaced by the inputs below it, in
    input order; a name that is an input, or below none, is kept as it is."""
    out: list[str] = []
    stacks = stacks_of(fn)
    for w in wrt:
        below = [a for a in fn.arg_names if a.startswith(w + ".")]
        if w in fn.arg_names or not below:
            if w not in fn.arg_names and stacks and _locate(w, set(fn.arg_names), stacks):
                raise AdcError(f"'{w}' is one layer of a stacked group: a stacked group is "
                               "differentiated whole (name it without the layer, and take "
                               "the layer's rows of the gradient)")
            out.append(w)
        else:
            out += [a for a in below if a not in out]
    return out


def split_names(fn, names) -> list[str]:
    """How inputs read in a message: a stacked one as ``m.blocks.<i>.W``."""
    stacks = stacks_of(fn)
    return [_shown(n, stacks) for n in names]


def split_outputs(fn, named: list) -> list:
    """``(key, array)`` outputs of a run of `fn`, each ``grad_<leaf>`` or ``hvp_<leaf>`` of
    a stacked leaf split into one per layer, layer by layer as a state dict lists them:
    ``grad_m.blocks.0.W``, ``grad_m.blocks.0.c``, ..., then ``grad_m.blocks.1.W``."""
    stacks = stacks_of(fn)
    if not stacks:
        return named
    out: list = []
    groups: dict = {}   # (kind, stacked group) -> its rows: (layer, leaf, row in leaf, ...)
    for seq, (key, a) in enumerate(named):
        kind, _, name = key.partition("_")
        p = _outer(name, stacks) if kind in ("grad", "hvp") else None
        if p is None:
            out.append((None, (key, a)))
            continue
        if (kind, p) not in groups:
            groups[kind, p] = []
            out.append(((kind, p), None))   # the group's rows go where its first leaf was
        for j, (k, v) in enumerate(split(stacks, {name: a}, kind + "_").items()):
            layer = int(k[len(kind) + len(p) + 2:].split(".", 1)[0])
            groups[kind, p].append((layer, seq, j, k, v))
    rows = []
    for group, row in out:
        if group is None:
            rows.append(row)
        else:
            rows += [(k, v) for *_, k, v in sorted(groups[group], key=lambda r: r[:3])]
    return rows


def nest(flat: Mapping[str, Any]) -> dict:
    """Arrays by dotted path -> nested dicts, a run of layers ``0, 1, ...`` as a list."""
    root: dict = {}
    for path, a in flat.items():
        node, parts = root, path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise AdcError(f"'{path}': '{p}' is both a leaf and a group")
        node[parts[-1]] = a
    return _lists(root)


def _lists(node):
    if not isinstance(node, dict):
        return node
    out = {k: _lists(v) for k, v in node.items()}
    if out and all(k.isdigit() for k in out) and \
            sorted(map(int, out)) == list(range(len(out))):
        return [out[str(i)] for i in range(len(out))]
    return out


def flat_paths(tree: Mapping) -> dict:
    """Nested dicts and lists of arrays -> arrays by dotted path (the inverse of `nest`);
    a flat dict is returned as it is. A list of numbers (nested or not) is one array."""
    if not is_nested(tree):
        return dict(tree)
    leaves, td = pytree.flatten(_arrays(dict(tree)))
    return {".".join(map(str, p)): a for p, a in zip(pytree.leaf_paths(td), leaves)}


def _container(v) -> bool:
    """A dict, or a list or tuple holding one (a stack of groups), rather than an array
    written as nested lists of numbers."""
    if isinstance(v, Mapping):
        return True
    return isinstance(v, (list, tuple)) and any(_container(x) for x in v)


def _arrays(tree):
    """`tree` with each list of numbers made an array, so that it flattens as one leaf."""
    if isinstance(tree, Mapping):
        return {k: _arrays(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_arrays(v) for v in tree] if _container(tree) else np.asarray(tree)
    return tree


def is_nested(tree) -> bool:
    """Whether a mapping of arrays holds a nested dict, or a list of them."""
    return isinstance(tree, Mapping) and any(_container(v) for v in tree.values())
