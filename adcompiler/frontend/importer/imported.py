"""`Imported`: what an importer returns, and how it is saved beside its parameters."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ...ir.core import Module


def params_path(path: str) -> str:
    """``model.params.npz`` for ``model.tdsl`` (the stem, without the last suffix)."""
    root, _ = os.path.splitext(os.fspath(path))
    return root + ".params.npz"


@dataclass
class Imported:
    """An imported model: the TDSL `source`, the forward function's name `fn`, its data
    `inputs` in the model's order, the initial `params` by ``param`` input name, the model's
    `outputs` (their names in the model), and `module`, the compiled source; `constants` names
    the params the model only reads (running statistics, masks: never trained), `sources`
    each param's name in the model."""

    source: str
    fn: str
    inputs: list[str]
    params: dict[str, np.ndarray]
    outputs: list[str]
    module: Module = field(repr=False, default=None)
    constants: list[str] = field(default_factory=list)   # params read but never trained
    sources: dict[str, str] = field(default_factory=dict)  # param name -> name in the model

    def save(self, path) -> tuple[str, str]:
        """Write the TDSL at `path` and the parameters at ``<stem>.params.npz`` (each
        atomically: a file it replaces is whole before and after). Returns both paths."""
        from ...files.write import check_output, save_npz, save_text
        path = os.fspath(path)
        npz = params_path(path)
        check_output(path, "output")
        check_output(npz, "output")
        save_npz(npz, self.params)
        save_text(path, self.source)
        return path, npz
