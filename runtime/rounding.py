"""Running an f32 program at a lower storage precision: `RoundingExecutor` rounds every float
result of every op to a narrower format (bfloat16, from ml_dtypes) before the next op reads
it, as hardware that stores bf16 tensors does; inside an op (a matrix product's sums, a
reduction) the arithmetic stays f32, as bf16 units accumulate in f32. NumPy has no bf16
kernels, so this is how ``adc train --precision bf16`` runs the program.
"""
from __future__ import annotations

from .executor import Executor


def bfloat16():
    """ml_dtypes' bfloat16 (an ImportError names the package when it is missing)."""
    try:
        import ml_dtypes
    except ImportError:
        raise ImportError("bf16 needs the ml_dtypes package (pip install ml_dtypes)") from None
    return ml_dtypes.bfloat16


class RoundingExecutor(Executor):
    """An `Executor` whose op results are rounded to `narrow` (default bfloat16), kept in
    their f32 arrays. Results are new arrays, so buffers are not planned."""

    def __init__(self, module, xp=None, dims=None, plan_buffers: bool = False, narrow=None):
        super().__init__(module, *(() if xp is None else (xp,)), dims=dims, plan_buffers=False)
        self.narrow = narrow or bfloat16()

    def call(self, fn, arrays: list, borrowed: frozenset = frozenset()) -> list:
        return super().call(fn, [self._round(a) for a in arrays], borrowed)

    def run_op(self, op, env) -> list:
        outs = super().run_op(op, env)
        if op.name in ("for", "repeat", "fused", "call"):
            return outs  # their inner ops rounded their own results
        return [self._round(r) for r in outs]

    def _round(self, a):
        if getattr(a, "dtype", None) is None or a.dtype.kind != "f" or a.dtype.itemsize < 4:
            return a
        return a.astype(self.narrow).astype(a.dtype)
