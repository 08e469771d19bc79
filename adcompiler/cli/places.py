"""The files a command reads and writes, checked before any work: every output can be
written (its folder exists, it is not a folder, the user may write it), and none is one of
the inputs, however named (links followed), nor another output: a mistake such as
``adc train --data train.npz --save train.npz`` or ``adc compile x.tdsl -o x.tdsl`` would
otherwise destroy what the command reads, at its end."""
from __future__ import annotations

import os

from ..files.write import check_not_inputs, check_writable

# attribute -> the option (or argument) that names it
INPUTS = {"file": "program", "inputs": "--inputs", "tangents": "--tangents",
          "data": "--data", "val": "--val", "init": "--init", "resume": "--resume"}
OUTPUTS = {"out": "--out", "output": "--output", "stats_json": "--stats-json",
           "json": "--json", "save": "--save", "checkpoint": "--checkpoint", "log": "--log",
           "plot": "--plot"}
# a resumed run may write its checkpoint where it read it (after reading it)
ALLOWED = (("--checkpoint", "--resume"),)


def _log_folder(path: str) -> bool:
    """``--log DIR/``: TensorBoard event files in a folder (`training.logs`)."""
    return os.path.isdir(path) or path.endswith(("/", os.sep))


def check_places(args) -> None:
    """The checks of the module docstring for the parsed command line `args`."""
    outputs = {option: getattr(args, attr, None) for attr, option in OUTPUTS.items()}
    for option, path in outputs.items():
        if path and not (option == "--log" and _log_folder(path)):
            check_writable(path, option)
    inputs = {option: getattr(args, attr, None) for attr, option in INPUTS.items()}
    inputs["--plugin"] = [p for entry in getattr(args, "plugin", None) or ()
                          for p in entry.split(",") if p.strip().endswith(".py")]
    check_not_inputs(outputs, inputs, ALLOWED)
