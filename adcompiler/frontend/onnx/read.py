"""Reading an ONNX file without trusting it.

Each way a file can be unusable is its own error naming the file: not ONNX, truncated or
malformed, external data missing (or pointing outside the model's folder), an opset newer
than the lowering table knows, initializers larger than the memory limit.
"""
from __future__ import annotations

import os

import numpy as np

from ...diagnostics import AdcError

# The newest default-domain opset the lowering table was checked against; each entry also
# names the versions of its op that it handles.
MAX_OPSET = 28
ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4,
                 13: 8, 14: 8, 15: 16, 16: 2}


class ModelError(AdcError):
    """A model file or object that cannot be imported."""


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ModelError("importing ONNX models needs the onnx package "
                         "(pip install 'adcompiler[onnx]')") from None
    return onnx


def read_model(source, max_memory: int | None = None):
    """(ModelProto, label): `source` is a path or a ModelProto; the label names it in
    messages. External data is read from the model's folder."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        model, label, folder = source, "<model>", None
    else:
        label = os.fspath(source)
        try:
            with open(label, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ModelError(f"{label}: cannot read: {e.strerror or e}") from None
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except Exception:  # protobuf's DecodeError: not a model, or cut short
            what = "truncated or not an ONNX model" if data[:1] == b"\x08" else \
                "not an ONNX model"
            raise ModelError(f"{label}: {what} (the protobuf does not decode)") from None
        folder = os.path.dirname(os.path.abspath(label))
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise ModelError(f"{label}: not an ONNX model (no IR version or no graph)")
    _check_opsets(model, label)
    _check_memory(model, label, max_memory)
    _load_external(model, label, folder)
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"{label}: malformed or truncated ONNX model: {first}") from None
    return model, label


def default_opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


def _check_opsets(model, label: str) -> None:
    v = default_opset(model)
    if v > MAX_OPSET:
        raise ModelError(f"{label}: opset {v} is newer than the newest supported, "
                         f"{MAX_OPSET}; export the model with opset <= {MAX_OPSET}")


def tensor_bytes(t) -> int:
    return int(np.prod(t.dims, dtype=np.int64)) * ELEMENT_BYTES.get(t.data_type, 8)


def _check_memory(model, label: str, max_memory: int | None) -> None:
    if max_memory is None:
        return
    total = sum(tensor_bytes(t) for t in model.graph.initializer)
    if total > max_memory:
        raise ModelError(f"{label}: the initializers need {total} bytes, more than "
                         f"--max-memory ({max_memory} bytes)")


def _load_external(model, label: str, folder: str | None) -> None:
    """Read each external tensor's bytes from a file inside the model's folder."""
    for t in model.graph.initializer:
        if t.data_location != 1:  # TensorProto.EXTERNAL
            continue
        info = {e.key: e.value for e in t.external_data}
        where = info.get("location", "")
        if folder is None:
            raise ModelError(f"{label}: tensor '{t.name}' keeps its data in the external "
                             f"file '{where}'; load the model from its file")
        path = os.path.realpath(os.path.join(folder, where))
        if os.path.isabs(where) or not path.startswith(os.path.realpath(folder) + os.sep):
            raise ModelError(f"{label}: tensor '{t.name}': external data '{where}' lies "
                             "outside the model's folder")
        offset, length = int(info.get("offset", 0) or 0), info.get("length")
        need = tensor_bytes(t)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                raw = f.read(int(length) if length else need)
        except OSError as e:
            raise ModelError(f"{label}: missing external data of tensor '{t.name}': "
                             f"{where}: {e.strerror or e}") from None
        if len(raw) != need:
            raise ModelError(f"{label}: missing external data of tensor '{t.name}': "
                             f"{where} holds {len(raw)} of its {need} bytes")
        t.raw_data = raw
        del t.external_data[:]
        t.data_location = 0
