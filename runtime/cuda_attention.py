"""`attention` as one CUDA kernel: ``softmax(q @ k^T * s + mask) @ v`` with no ``Tq x Tk``
array in memory (FlashAttention's online softmax).

One warp computes one query row, 32 keys at a time: each lane scores one key of the tile
(the dot product over the key size, in order), the warp takes the tile's maximum and the
sum of its exponentials with a butterfly of shuffles each, updates the row's running
maximum ``m`` and sum ``l``, and each lane rescales its ``dv / 32`` columns of the
accumulated ``sum_j exp(s_j - m) v_j`` and adds the tile's 32 terms; the row is written
once, as ``acc / l``. The block's warps (`WARPS` query rows) share each tile of keys and
values in shared memory (key rows padded by one element, so the lanes' reads fall in
different banks), so a key is read from global memory once per block. With ``causal``, a
key after the row scores ``-inf`` (probability 0), and a block reads only the keys its
rows see; key 0 is in every row's first tile, so the running maximum is finite from it on.

q is scaled before the product, as the table kernel does (``q * s`` rounded to the storage
type); the scores add in another order than a GEMM and the exponentials are taken against
the running maximum, so results agree with the table kernel within rounding (a few ulps
times the key size and the number of keys), not bitwise. A NaN score makes its row NaN, an
infinite one too (``inf - inf``), as in the table kernel.

The derivative rules of ``attention`` recompute the probabilities from q and k (see
``adcompiler.ops.sdpa``), so the reverse sweep keeps q, k, v and the result, never a
``Tq x Tk`` matrix; this kernel removes the one the forward pass made.

Operands that are not C-contiguous (einsum's results often are transposed views) are copied
into row order first. `run` declines (returns None, and the caller runs the table kernel)
where the batch axes of q, k and v differ, the dtype is not f32/f64, ``dv`` is
above ``32 * MAX_COLUMNS`` or the tiles do not fit the shared memory (`shared_elements`). CuPy is
never imported here.
"""
from __future__ import annotations

import math
from typing import Any

WARPS = 8                 # query rows per block
MAX_COLUMNS = 8           # value columns per lane: dv <= 256
SHARED_BYTES = 48 * 1024  # static shared memory of a block
TILE = 32                 # keys per tile: one per lane
CTYPES = {"float32": "float", "float64": "double"}

SIGNATURES = {"adc_attention_fwd": ("const T*", "const T*", "const T*", "T*", "long long",
                                    "long long", "long long", "long long", "T", "int")}

SOURCE = r"""
#define ADC_INF ((T)__longlong_as_double(0x7ff0000000000000LL))
__device__ __forceinline__ T adc_nanmax(T a, T b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ T adc_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ T adc_warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) v = adc_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// o[b, i, :] = sum_j softmax_j(s * q[b, i] . k[b, j]) v[b, j, :] over the keys j the row sees
extern "C" __global__ void adc_attention_fwd(const T *q, const T *k, const T *v, T *o,
                                              long long tq, long long tk, long long d,
                                              long long dv, T scale, int causal) {
    __shared__ T shared[ADC_SHARED / sizeof(T)];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    T *ks = shared;                        // 32 keys, rows padded to d + 1 (no bank conflicts)
    T *vs = ks + 32 * (d + 1);             // 32 values
    T *qs = vs + 32 * dv + warp * d;       // this warp's query row, scaled
    T *ps = vs + 32 * dv + warps * d + warp * 32;   // this warp's probabilities of a tile
    const long long blocks_per_batch = (tq + warps - 1) / warps;
    const long long b = blockIdx.x / blocks_per_batch;
    const long long first = (blockIdx.x % blocks_per_batch) * warps;
    const long long i = first + warp;
    const bool live = i < tq;
    for (long long c = lane; c < d; c += 32) qs[c] = live ? q[(b * tq + i) * d + c] * scale : 0;
    k += b * tk * d;
    v += b * tk * dv;
    T acc[ADC_COLUMNS];
    for (int c = 0; c < ADC_COLUMNS; ++c) acc[c] = 0;
    T m = -ADC_INF, l = 0;
    // the keys the block's rows see (with causal, up to its last row)
    const long long last_row = first + warps < tq ? first + warps : tq;
    const long long keys = causal ? (last_row < tk ? last_row : tk) : tk;
    for (long long j0 = 0; j0 < keys; j0 += 32) {
        const long long n = keys - j0 < 32 ? keys - j0 : 32;
        __syncthreads();                   // the previous tile is no longer read
        for (long long e = threadIdx.x; e < n * d; e += blockDim.x)
            ks[(e / d) * (d + 1) + e % d] = k[j0 * d + e];
        for (long long e = threadIdx.x; e < n * dv; e += blockDim.x) vs[e] = v[j0 * dv + e];
        __syncthreads();
        // lane j scores key j0 + j; a key the row does not see scores -inf
        const long long j = j0 + lane;
        T score = -ADC_INF;
        if (lane < n && (!causal || j <= i)) {
            T dot = 0;
            for (long long c = 0; c < d; ++c) dot += qs[c] * ks[lane * (d + 1) + c];
            score = dot;
        }
        const T mn = adc_nanmax(m, adc_warp_max(score));
        const T corr = exp(m - mn), p = exp(score - mn);
        l = l * corr + adc_warp_sum(p);
        ps[lane] = p;
        __syncthreads();                   // the warp's probabilities are written
        for (int c = 0; c < ADC_COLUMNS; ++c) {
            const long long col = c * 32 + lane;
            if (col < dv) {
                T a = acc[c] * corr;
                for (long long jj = 0; jj < n; ++jj) a += ps[jj] * vs[jj * dv + col];
                acc[c] = a;
            }
        }
        m = mn;
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


def shared_elements(d: int, dv: int) -> int:
    """Elements of shared memory a block uses: a tile of keys (rows padded to d + 1) and of
    values, each warp's scaled query row and its probabilities of a tile."""
    return TILE * (d + 1) + TILE * dv + WARPS * d + WARPS * TILE


def run(cp, q, k, v, causal: bool = False, scale: float = 0.0, out=None) -> Any:
    """``attention(q, k, v)`` by the fused kernel into `out` (or a new array); None where
    the kernel does not apply (module doc)."""
    if q.ndim < 2 or not (q.dtype == k.dtype == v.dtype) or q.dtype.name not in CTYPES:
        return None
    batch = q.shape[:-2]
    if k.shape[:-2] != batch or v.shape[:-2] != batch or k.ndim != q.ndim or v.ndim != q.ndim:
        return None
    # operands made by einsum are often transposed views: copied into row order (three
    # arrays of the inputs' size, where the library path makes Tq x Tk ones)
    q, k, v = (a if a.flags.c_contiguous else cp.ascontiguousarray(a) for a in (q, k, v))
    tq, d = q.shape[-2:]
    tk, dv = v.shape[-2:]
    if dv > 32 * MAX_COLUMNS or shared_elements(d, dv) * q.dtype.itemsize > SHARED_BYTES \
            or k.shape[-1] != d or tk == 0:
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
       (q, k, v, out, cp.int64(tq), cp.int64(tk), cp.int64(d), cp.int64(dv), q.dtype.type(s),
        cp.int32(1 if causal else 0)))
    return out
