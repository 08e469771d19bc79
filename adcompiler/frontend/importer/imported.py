"""`Imported`: what an importer returns, and how it is saved beside its parameters."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ...ir.core import Module


def _array(v) -> np.ndarray:
    if hasattr(v, "detach"):     # a torch tensor
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def params_path(path: str) -> str:
    """``model.params.npz`` for ``model.tdsl`` (the stem, without the last suffix)."""
    root, _ = os.path.splitext(os.fspath(path))
    return root + ".params.npz"


@dataclass
class Imported:
    """An imported model: the TDSL `source`, the forward function's name `fn`, its data
    `inputs` in the model's order, the initial `params` by ``param`` input name (a grouped
    one by its path, ``layer1._0.conv1.weight``), the model's `outputs` (their names in the
    model), and `module`, the compiled source; `constants` names the params the model only
    reads (running statistics of an evaluation-mode export, masks: never trained), `state`
    the starting value of each ``state`` input (the buffers a training step updates),
    `sources` the name in the model of each param and state."""

    source: str
    fn: str
    inputs: list[str]
    params: dict[str, np.ndarray]
    outputs: list[str]
    module: Module = field(repr=False, default=None)
    constants: list[str] = field(default_factory=list)   # params read but never trained
    sources: dict[str, str] = field(default_factory=dict)  # param name -> name in the model
    state: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def trained(self) -> list[str]:
        """The params a training step updates (every one but the constants)."""
        return [k for k in self.params if k not in self.constants]

    @property
    def paths(self) -> dict[str, str]:
        """The name in the model of each param and state -> its name here."""
        return {src: name for name, src in self.sources.items()}

    def load_state_dict(self, state_dict) -> tuple[dict, dict]:
        """``(params, state)`` by name here from a PyTorch ``state_dict()`` (or any mapping
        of the model's names to arrays or tensors): every trained param and state must be
        given; a constant it does not give (one the import computed) keeps its value, and
        names the import does not read (an evaluation-mode export's batch counters) are
        left out."""
        from ...diagnostics import AdcError
        paths = self.paths
        missing = [src for src, name in paths.items()
                   if src not in state_dict and name not in self.constants]
        if missing:
            raise AdcError(f"state_dict: missing {', '.join(map(repr, missing))}")
        params, state = {}, {}
        for src, name in paths.items():
            want = self.params[name] if name in self.params else self.state[name]
            a = _array(state_dict[src]) if src in state_dict else want
            if a.shape != want.shape:
                raise AdcError(f"state_dict: '{src}' is {a.shape}, the model's is "
                               f"{want.shape}")
            (params if name in self.params else state)[name] = a.astype(want.dtype)
        return params, state

    def to_state_dict(self, arrays) -> dict:
        """Arrays by name here (params, gradients, state) -> by the model's names."""
        from ...diagnostics import AdcError
        unknown = [k for k in arrays if k not in self.sources]
        if unknown:
            raise AdcError(f"to_state_dict: {', '.join(map(repr, unknown))} is no param or "
                           "state of this import")
        return {self.sources[k]: v for k, v in arrays.items()}

    def save(self, path) -> tuple[str, str]:
        """Write the TDSL at `path` and the parameters at ``<stem>.params.npz`` (each
        atomically: a file it replaces is whole before and after). Returns both paths."""
        from ...files.write import check_output, save_npz, save_text
        path = os.fspath(path)
        npz = params_path(path)
        check_output(path, "output")
        check_output(npz, "output")
        save_npz(npz, {**self.params, **self.state})
        save_text(path, self.source)
        return path, npz
