"""Programs, inputs and reference values shared by the CUDA kernel tests on the host
stand-in and on a GPU (test_cuda_row_groups.py, test_cuda_attention.py,
test_cuda_gpu_kernels.py)."""
from __future__ import annotations

import numpy as np

from adcompiler.cli.compile import compile_program

PROGRAM = """
def f(param x: {t}[B, 40], w: {t}[40, 40], param g1: {t}[40], param b1: {t}[40],
      param g2: {t}[40]) -> {t} {{
    h = layernorm(x, g1, b1)
    p = softmax(h @ w, axis=-1)
    r = rmsnorm(p + x, g2, eps=1e-5)
    return sum(r * r)
}}
"""


def compiled(tmp_path, dtype):
    """`PROGRAM` in `dtype` (f32, f64), compiled in reverse mode."""
    path = tmp_path / f"rows_{dtype}.tdsl"
    path.write_text(PROGRAM.format(t=dtype))
    return compile_program(str(path), "reverse")


def inputs(dtype, rows=3, seed=0):
    """Inputs of `PROGRAM` with `rows` rows."""
    rng = np.random.default_rng(seed)
    t = np.float32 if dtype == "f32" else np.float64
    return {"x": rng.standard_normal((rows, 40)).astype(t),
            "w": rng.standard_normal((40, 40)).astype(t),
            **{k: rng.standard_normal(40).astype(t) for k in ("g1", "b1", "g2")}}


EPS = {np.float32: 2.0 ** -23, np.float64: 2.0 ** -52}
# batch, queries, keys, key size, value size, causal
CASES = [((2, 3), 5, 7, 4, 6, False), ((1,), 9, 9, 70, 40, True), ((2,), 11, 40, 8, 8, True),
         ((2,), 11, 40, 8, 8, False), ((), 3, 1, 2, 33, False), ((1,), 0, 4, 4, 4, False),
         ((1,), 70, 70, 16, 16, True)]


def exact_attention(q, k, v, causal):
    """The attention in float64, and the sum of |terms| bounding each output's rounding."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v, p @ np.abs(v)


def attention_inputs(case, dtype):
    """q, k, v of an attention `case` (batch, queries, keys, key size, value size, causal)."""
    batch, tq, tk, d, dv, _ = case
    rng = np.random.default_rng(tq + tk)
    return (rng.standard_normal(batch + (tq, d)).astype(dtype),
            rng.standard_normal(batch + (tk, d)).astype(dtype),
            rng.standard_normal(batch + (tk, dv)).astype(dtype))


def attention_within_bound(got, q, k, v, causal, ulps: float = 1.0) -> bool:
    """Whether `got` is within the kernel's bound of the float64 attention: each score sums
    d products and each output tk terms, and the exponentials carry the scores' error (about
    |s| ulps); `ulps` scales it (2 on a GPU, whose exp is within 2 ulps)."""
    want, scale = exact_attention(q, k, v, causal)
    d, tk = q.shape[-1], k.shape[-2]
    size = np.abs(q).max(initial=0) * np.abs(k).max(initial=0) * max(d, 1)
    bound = ulps * (4 * d + 2 * tk + 8 * size + 16) * EPS[q.dtype.type]
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= bound * scale + 1e-300))
