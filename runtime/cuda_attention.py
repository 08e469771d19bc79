"""`attention` as one CUDA kernel: ``softmax(q @ k^T * s + mask) @ v`` with no ``Tq x Tk``
array in memory (FlashAttention's online softmax).

One warp computes one query row: for each key it forms the score (the lanes split the key
size, a butterfly of shuffles sums their parts), updates the row's running maximum ``m``
and sum ``l`` and rescales its accumulated ``sum_j exp(s_j - m) v_j`` (each lane holds
``dv / 32`` columns of it), and writes ``acc / l`` once. The block's warps (`WARPS` query
rows) share tiles of keys and values in shared memory, so each key is read from global
memory once per block. With ``causal``, a row stops at its own position and a block
reads only the keys its rows see.

q is scaled before the product, as the table kernel does (``q * s`` rounded to the storage
type); the scores add in another order than a GEMM and the exponentials are taken against
the running maximum, so results agree with the table kernel within rounding (a few ulps
times the key size and the number of keys), not bitwise. A NaN score makes its row NaN, an
infinite one too (``inf - inf``), as in the table kernel.

The derivative rules of ``attention`` recompute the probabilities from q and k (see
``adcompiler.ops.sdpa``), so the reverse sweep keeps q, k, v and the result, never a
``Tq x Tk`` matrix; this kernel removes the one the forward pass made.

`run` declines (returns None, and the caller runs the table kernel) where the batch axes of
q, k and v differ, an operand is not C-contiguous, the dtype is not f32/f64, ``dv`` is
above ``32 * MAX_COLUMNS`` or a tile of one key does not fit the shared memory. CuPy is
never imported here.
"""
from __future__ import annotations

import math
from typing import Any

WARPS = 8                 # query rows per block
MAX_COLUMNS = 8           # value columns per lane: dv <= 256
SHARED_BYTES = 48 * 1024  # static shared memory of a block
MAX_TILE = 32             # keys per tile
CTYPES = {"float32": "float", "float64": "double"}

SIGNATURES = {"adc_attention_fwd": ("const T*", "const T*", "const T*", "T*", "long long",
                                    "long long", "long long", "long long", "long long", "T",
                                    "int")}

SOURCE = r"""
#define ADC_INF ((T)__longlong_as_double(0x7ff0000000000000LL))
__device__ __forceinline__ T adc_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// o[b, i, :] = sum_j softmax_j(s * q[b, i] . k[b, j]) v[b, j, :] over the keys j the row sees
extern "C" __global__ void adc_attention_fwd(const T *q, const T *k, const T *v, T *o,
                                              long long tq, long long tk, long long d,
                                              long long dv, long long tile, T scale,
                                              int causal) {
    __shared__ T shared[ADC_SHARED / sizeof(T)];
    T *ks = shared, *vs = shared + tile * d;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const long long blocks_per_batch = (tq + warps - 1) / warps;
    const long long b = blockIdx.x / blocks_per_batch;
    const long long first = (blockIdx.x % blocks_per_batch) * warps;
    const long long i = first + warp;
    const bool live = i < tq;
    const T *qi = q + (b * tq + (live ? i : 0)) * d;
    k += b * tk * d;
    v += b * tk * dv;
    T acc[ADC_COLUMNS];
    for (int c = 0; c < ADC_COLUMNS; ++c) acc[c] = 0;
    T m = -ADC_INF, l = 0;
    // the keys the block's rows see (with causal, up to its last row)
    const long long last_row = first + warps < tq ? first + warps : tq;
    const long long keys = causal ? (last_row < tk ? last_row : tk) : tk;
    for (long long j0 = 0; j0 < keys; j0 += tile) {
        const long long n = keys - j0 < tile ? keys - j0 : tile;
        __syncthreads();                   // the previous tile is no longer read
        for (long long e = threadIdx.x; e < n * d; e += blockDim.x) ks[e] = k[j0 * d + e];
        for (long long e = threadIdx.x; e < n * dv; e += blockDim.x) vs[e] = v[j0 * dv + e];
        __syncthreads();
        for (long long jj = 0; jj < n; ++jj) {
            T part = 0;
            for (long long c = lane; c < d; c += 32) part += (qi[c] * scale) * ks[jj * d + c];
            const T score = adc_warp_sum(part);   // every lane of every warp shuffles
            const long long j = j0 + jj;
            if (live && (!causal || j <= i)) {
                const T mn = score > m ? score : m;
                const T corr = exp(m - mn), p = exp(score - mn);
                l = l * corr + p;
                for (int c = 0; c < ADC_COLUMNS; ++c) {
                    const long long col = c * 32 + lane;
                    if (col < dv) acc[c] = acc[c] * corr + p * vs[jj * dv + col];
                }
                m = mn;
            }
        }
    }
    if (live) {
        T *oi = o + (b * tq + i) * dv;
        for (int c = 0; c < ADC_COLUMNS; ++c) {
            const long long col = c * 32 + lane;
            if (col < dv) oi[col] = acc[c] / l;
        }
    }
}
"""


def source(ctype: str) -> str:
    return (f"typedef {ctype} T;\n#define ADC_SHARED {SHARED_BYTES}\n"
            f"#define ADC_COLUMNS {MAX_COLUMNS}\n{SOURCE}")


_MODULES: dict = {}


def module(cp, dtype: str):
    key = (id(cp), dtype)
    mod = _MODULES.get(key)
    if mod is None:
        mod = _MODULES[key] = cp.RawModule(code=source(CTYPES[dtype]),
                                           options=("--std=c++14",))
    return mod


def tile_size(d: int, dv: int, itemsize: int) -> int:
    """Keys per shared-memory tile: up to `MAX_TILE`, as many as fit; 0 if none does."""
    per_key = max(1, (d + dv) * itemsize)
    return min(MAX_TILE, SHARED_BYTES // per_key)


def run(cp, q, k, v, causal: bool = False, scale: float = 0.0, out=None) -> Any:
    """``attention(q, k, v)`` by the fused kernel into `out` (or a new array); None where
    the kernel does not apply (module doc)."""
    if q.ndim < 2 or not (q.dtype == k.dtype == v.dtype) or q.dtype.name not in CTYPES:
        return None
    batch = q.shape[:-2]
    if k.shape[:-2] != batch or v.shape[:-2] != batch or k.ndim != q.ndim or v.ndim != q.ndim:
        return None
    if not (q.flags.c_contiguous and k.flags.c_contiguous and v.flags.c_contiguous):
        return None
    tq, d = q.shape[-2:]
    tk, dv = v.shape[-2:]
    tile = tile_size(d, dv, q.dtype.itemsize)
    if dv > 32 * MAX_COLUMNS or tile == 0 or k.shape[-1] != d or tk == 0:
        return None
    shape = batch + (tq, dv)
    if out is None or tuple(out.shape) != shape or not out.flags.c_contiguous:
        out = cp.empty(shape, dtype=q.dtype)
    s = scale if scale else 1.0 / math.sqrt(d)
    rows = math.prod(batch) * -(-tq // WARPS)
    if rows == 0 or dv == 0:
        return out
    fn = module(cp, q.dtype.name).get_function("adc_attention_fwd")
    fn((rows,), (32 * WARPS,),
       (q, k, v, out, cp.int64(tq), cp.int64(tk), cp.int64(d), cp.int64(dv), cp.int64(tile),
        q.dtype.type(s), cp.int32(1 if causal else 0)))
    return out
