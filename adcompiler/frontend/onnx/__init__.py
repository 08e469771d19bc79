"""The ONNX importer: an ONNX model as a readable TDSL program (`from_onnx`).

`read` checks the file, `graph` walks the nodes, and `table` holds one lowering entry per
op type (filled by `ops_math`, `ops_nn`, `ops_norm` and `ops_shape`). The program is written as text and
compiled by the TDSL front end: nothing of the model is executed.
"""
from __future__ import annotations

from ...diagnostics import AdcError
from ..importer.imported import Imported


def from_onnx(model, *, loss: str | None = None, fn: str = "model",
              max_memory: int | None = None) -> Imported:
    """Import an ONNX model (a path or a ``ModelProto``). `loss` (``"cross_entropy"`` or
    ``"mse"``) adds a function ``loss`` over the model's output and a ``target`` input."""
    from ..tdsl import compile_source
    from .graph import GraphImporter
    from .read import read_model
    proto, label = read_model(model, max_memory)
    writer = GraphImporter(proto, label, fn).run()
    header = [f"imported from {label} (ONNX, opset {GraphImporter(proto, label).opset})"]
    source = writer.source(header, loss=loss)
    try:
        module = compile_source(source, label.rsplit(".", 1)[0] + ".tdsl")
    except AdcError as e:
        raise AdcError(f"{label}: the imported program does not compile: {e.message}") \
            from None
    return Imported(source, fn, [r.name for r in writer.inputs], writer.param_values(),
                    [n for _, n in writer.results], module,
                    [p.name for p in writer.params if not p.trainable],
                    {**{p.name: p.source for p in writer.params},
                     **{s.name: s.source for s in writer.states}}, writer.state_values())


__all__ = ["from_onnx"]
