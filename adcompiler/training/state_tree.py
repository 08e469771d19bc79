"""The optimizer state as a tree that mirrors the parameters', as optax keeps it::

    {"step": 0-d int64,
     "exp_avg": {"m": {"blocks": [{"W": ...}, ...]}},     # one slot: the params' tree
     "exp_avg_sq": {...},
     "model": {"bn": {"running_mean": ...}}}              # the program's state inputs

The compiled step runs on a flat state keyed by input name (``exp_avg_m.blocks.W``, the
step's own inputs); `to_tree` and `from_tree` convert between the two. A slot's tree is
what the library returns for the parameters (`files.paths`: each layer of a stacked group
its own leaf), so a parameter's state is found by the parameter's path in every slot.
Checkpoints hold the tree, keyed ``state/exp_avg/m/blocks/0/W``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ..diagnostics import AdcError

__all__ = ["Layout", "layout", "to_tree", "from_tree", "is_tree"]

MODEL = "model"   # the subtree of the program's state inputs


class Layout:
    """Where each array of a step's flat state goes in the tree: the counter's name, each
    (slot, parameter, name) and the program's state inputs."""

    def __init__(self, slots: tuple, params: list[str], state_names: list[str],
                 model_state: list[str]):
        self.counter = state_names[0]
        names = iter(state_names[1:])
        self.slots = tuple(slots)
        self.entries = [(s, p, next(names)) for s in self.slots for p in params]
        self.model_state = list(model_state)
        self.params = list(params)
        self.flat_names = list(state_names)

    @property
    def keys(self) -> set:
        return {"step", *self.slots} | ({MODEL} if self.model_state else set())


def layout(step) -> Layout:
    """The state layout of a compiled step (`CompiledStep`, or a step wrapping one as
    ``apply``, the mixed-precision step)."""
    core = getattr(step, "apply", step)
    return Layout(core.optimizer.slots, core.params, core.state_names,
                  getattr(core, "model_state", []))


def is_tree(state: Any, lay: Layout) -> bool:
    """Whether `state` is in the tree form (else it is keyed by the step's input names)."""
    return isinstance(state, Mapping) and set(state) == lay.keys and \
        set(state) != set(lay.flat_names)


def to_tree(flat: Mapping[str, Any], lay: Layout, regroup: Callable[[dict], Any]) -> dict:
    """The flat state -> the tree; `regroup` makes arrays by input name a params' tree."""
    tree: dict = {"step": flat[lay.counter]}
    for slot in lay.slots:
        tree[slot] = regroup({p: flat[n] for s, p, n in lay.entries if s == slot})
    if lay.model_state:
        tree[MODEL] = regroup({n: flat[n] for n in lay.model_state})
    return tree


def from_tree(tree: Mapping[str, Any], lay: Layout,
              ungroup: Callable[[Any, str, list], dict]) -> dict:
    """The tree -> the flat state; `ungroup(subtree, what, names)` gives arrays by input
    name (and names what does not fit)."""
    _same(tree, sorted(lay.keys), "optimizer state")
    for key in lay.keys - {"step"}:
        if not isinstance(tree[key], Mapping):
            raise AdcError(f"optimizer state '{key}' must be a tree of dicts (and lists) "
                           f"like the params', got {type(tree[key]).__name__}")
    flat = {lay.counter: tree["step"]}
    for slot in lay.slots:
        got = ungroup(tree[slot], f"optimizer state '{slot}'", lay.params)
        _same(got, lay.params, f"optimizer state '{slot}'")
        flat.update({n: got[p] for s, p, n in lay.entries if s == slot})
    if lay.model_state:
        got = ungroup(tree[MODEL], f"optimizer state '{MODEL}'", lay.model_state)
        _same(got, lay.model_state, f"optimizer state '{MODEL}'")
        flat.update({n: got[n] for n in lay.model_state})
    return {n: flat[n] for n in lay.flat_names}


def _same(got: Mapping, names: list[str], what: str) -> None:
    missing = [n for n in names if n not in got]
    extra = [n for n in got if n not in names]
    if missing or extra:
        raise AdcError(f"{what}: " + "; ".join(
            ([f"missing {', '.join(map(repr, missing))}"] if missing else []) +
            ([f"unknown {', '.join(map(repr, extra))}"] if extra else [])) +
            f" (expected: {', '.join(names)})")
