"""Folding a node whose inputs are all known when importing, by ONNX's reference
implementation (`onnx.reference`), so that a folded value is what the standard says."""
from __future__ import annotations

import numpy as np


def fold(model, proto, values: list, opset: int) -> list | None:
    """The node's outputs for input arrays `values` (None for an absent input), or None
    when the reference implementation cannot evaluate it."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    names = [f"in{k}" if v is not None else "" for k, v in enumerate(values)]
    outs = [f"out{k}" if o else "" for k, o in enumerate(proto.output)]
    node = helper.make_node(proto.op_type, names, outs)
    node.attribute.extend(proto.attribute)
    inputs = []
    for n, v in zip(names, values):
        if n:
            try:
                et = helper.np_dtype_to_tensor_dtype(v.dtype)
            except Exception:
                return None
            inputs.append(helper.make_tensor_value_info(n, et, v.shape))
    outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in outs if o]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          ir_version=model.ir_version or 8)
    try:
        ref = ReferenceEvaluator(m)
        got = ref.run(None, {n: v for n, v in zip(names, values) if n})
    except Exception:
        return None
    res, it = [], iter(got)
    for o in outs:
        res.append(np.asarray(next(it)) if o else None)
    return res
