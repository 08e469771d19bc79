"""The torch.export lowering table: one entry per core ATen overload (its name as
``str(node.target)``, e.g. ``aten.addmm.default``), each a function of a `TNode`.

An entry reads the arguments it handles through the node; the node refuses an argument
the entry did not read unless it has its default value, so no option is dropped.
"""
from __future__ import annotations

from typing import Callable

TABLE: dict[str, Callable] = {}


def lowers(*targets: str):
    def deco(fn):
        for t in targets:
            if t in TABLE:
                raise ValueError(f"{t} is lowered twice")
            TABLE[t] = fn
        return fn
    return deco


def supported() -> list[str]:
    return sorted(TABLE)


# torch dtypes (as ``str(dtype)``) by their TDSL names
TDSL_OF = {"torch.float32": "f32", "torch.float64": "f64", "torch.float16": "f16",
           "torch.int64": "i64", "torch.int32": "i32", "torch.bool": "bool"}
