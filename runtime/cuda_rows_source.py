"""The CUDA source of the row kernels (`adc_runtime.cuda_rows`, whose docstring gives the
scheme and the bounds): one ``cupy.RawModule`` text per storage type ``T`` and label type
``L``, and each kernel's parameters."""
from __future__ import annotations

# the kernel names, each with its parameters in launch order (C types with T the storage
# type and L the label type); `tests/cuda_host.py` builds its host launchers from these
SIGNATURES = {
    "adc_row_softmax": ("const T*", "T*", "long long"),
    "adc_row_log_softmax": ("const T*", "T*", "long long"),
    "adc_row_softmax_grad": ("const T*", "const T*", "T*", "long long"),
    "adc_row_log_softmax_grad": ("const T*", "const T*", "T*", "long long"),
    "adc_row_cross_entropy": ("const T*", "const L*", "T*", "T*", "long long"),
    "adc_row_cross_entropy_grad": ("const T*", "const L*", "const T*", "T*", "long long"),
    "adc_row_layernorm": ("const T*", "const T*", "const T*", "T*", "long long", "T"),
    "adc_row_layernorm_grad": ("const T*", "const T*", "const T*", "T*", "T*", "long long",
                               "T"),
    "adc_row_rmsnorm": ("const T*", "const T*", "T*", "long long", "T"),
    "adc_row_rmsnorm_grad": ("const T*", "const T*", "const T*", "T*", "T*", "long long", "T",
                             "T"),
}

SOURCE = r"""
// infinity and a quiet NaN without the host headers' macros
#define ADC_INF ((T)__longlong_as_double(0x7ff0000000000000LL))
#define ADC_NAN ((T)__longlong_as_double(0x7ff8000000000000LL))
// the smallest normal number of T
#define ADC_TINY ((T)(sizeof(T) == 4 ? 1.1754943508222875e-38 : 2.2250738585072014e-308))
// block-wide reductions: butterfly shuffles in each warp, then every warp folds the warps'
// partial results in the same order, so all threads hold the same value
__device__ __forceinline__ T adc_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ T adc_nanmax(T a, T b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ T adc_warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) v = adc_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ T adc_block_sum(T v, T *part) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = adc_warp_sum(v);
    __syncthreads();                       // `part` may still be read by an earlier call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : (T)0;
    return adc_warp_sum(v);
}
__device__ __forceinline__ T adc_block_max(T v, T *part) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = adc_warp_max(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : -ADC_INF;
    return adc_warp_max(v);
}
// the row's maximum and sum(exp(x - max))
__device__ __forceinline__ void adc_row_max_sum(const T *x, long long n, T *part, T *m, T *s) {
    T v = -ADC_INF;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) v = adc_nanmax(v, x[j]);
    const T mx = adc_block_max(v, part);
    T e = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) e += exp(x[j] - mx);
    *m = mx;
    *s = adc_block_sum(e, part);
}

extern "C" __global__ void adc_row_softmax(const T *x, T *y, long long n) {
    __shared__ T part[32];
    x += blockIdx.x * n; y += blockIdx.x * n;
    T m, s;
    adc_row_max_sum(x, n, part, &m, &s);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) y[j] = exp(x[j] - m) / s;
}

extern "C" __global__ void adc_row_log_softmax(const T *x, T *y, long long n) {
    __shared__ T part[32];
    x += blockIdx.x * n; y += blockIdx.x * n;
    T m, s;
    adc_row_max_sum(x, n, part, &m, &s);
    const T ls = log(s);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) y[j] = (x[j] - m) - ls;
}

// dx = y * (g - sum(g * y)): softmax's adjoint from its output y and the cotangent g
extern "C" __global__ void adc_row_softmax_grad(const T *y, const T *g, T *dx, long long n) {
    __shared__ T part[32];
    const long long o = blockIdx.x * n;
    y += o; g += o; dx += o;
    T v = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) v += g[j] * y[j];
    const T d = adc_block_sum(v, part);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) dx[j] = y[j] * (g[j] - d);
}

// dx = g - exp(y) * sum(g): log_softmax's adjoint from its output y
extern "C" __global__ void adc_row_log_softmax_grad(const T *y, const T *g, T *dx,
                                                     long long n) {
    __shared__ T part[32];
    const long long o = blockIdx.x * n;
    y += o; g += o; dx += o;
    T v = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) v += g[j];
    const T s = adc_block_sum(v, part);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) dx[j] = g[j] - exp(y[j]) * s;
}

// loss = -((z[label] - max) - log(sum)); probs (may be null) = softmax(z)
extern "C" __global__ void adc_row_cross_entropy(const T *z, const L *labels, T *loss,
                                                  T *probs, long long n) {
    __shared__ T part[32];
    z += blockIdx.x * n;
    T m, s;
    adc_row_max_sum(z, n, part, &m, &s);
    if (threadIdx.x == 0) {
        const long long k = (long long)labels[blockIdx.x];
        loss[blockIdx.x] = (k >= 0 && k < n) ? -((z[k] - m) - log(s)) : ADC_NAN;
    }
    if (probs != 0) {
        probs += blockIdx.x * n;
        for (long long j = threadIdx.x; j < n; j += blockDim.x) probs[j] = exp(z[j] - m) / s;
    }
}

// dz = ct * (softmax(z) - one_hot(label)), ct one cotangent per row
extern "C" __global__ void adc_row_cross_entropy_grad(const T *z, const L *labels,
                                                       const T *ct, T *dz, long long n) {
    __shared__ T part[32];
    z += blockIdx.x * n; dz += blockIdx.x * n;
    T m, s;
    adc_row_max_sum(z, n, part, &m, &s);
    const long long k = (long long)labels[blockIdx.x];
    const T c = ct[blockIdx.x];
    for (long long j = threadIdx.x; j < n; j += blockDim.x)
        dz[j] = c * (exp(z[j] - m) / s - (j == k ? (T)1 : (T)0));
}

// the row's mean and biased variance (two passes: the centred squares)
__device__ __forceinline__ void adc_row_moments(const T *x, long long n, T *part, T *mean,
                                                T *var) {
    T v = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) v += x[j];
    const T mu = adc_block_sum(v, part) / (T)n;
    T q = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const T c = x[j] - mu;
        q += c * c;
    }
    *mean = mu;
    *var = adc_block_sum(q, part) / (T)n;
}

extern "C" __global__ void adc_row_layernorm(const T *x, const T *gamma, const T *beta,
                                              T *y, long long n, T eps) {
    __shared__ T part[32];
    x += blockIdx.x * n; y += blockIdx.x * n;
    T mu, var;
    adc_row_moments(x, n, part, &mu, &var);
    const T sd = sqrt(var + eps);
    for (long long j = threadIdx.x; j < n; j += blockDim.x)
        y[j] = (x[j] - mu) / sd * gamma[j] + beta[j];
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = ct * gamma, xhat = (x - mean) * rstd;
// xhat (may be null) also written. Every loop gives a thread the same elements and the last
// reads an element's operands before writing its results, so an output may be an operand.
extern "C" __global__ void adc_row_layernorm_grad(const T *x, const T *gamma, const T *ct,
                                                   T *dx, T *xhat, long long n, T eps) {
    __shared__ T part[32];
    const long long o = blockIdx.x * n;
    x += o; ct += o; dx += o;
    T mu, var;
    adc_row_moments(x, n, part, &mu, &var);
    const T rstd = (T)1 / sqrt(var + eps);
    T a = 0, b = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const T g = ct[j] * gamma[j];
        a += g;
        b += g * ((x[j] - mu) * rstd);
    }
    const T mg = adc_block_sum(a, part) / (T)n;
    const T mgx = adc_block_sum(b, part) / (T)n;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const T g = ct[j] * gamma[j], h = (x[j] - mu) * rstd;
        dx[j] = rstd * ((g - mg) - h * mgx);
        if (xhat != 0) xhat[o + j] = h;
    }
}

// 1 / sqrt(mean(x * x) + eps) from u = x / s, s = max|x| where above 1 (above 0 for eps 0):
// (1 / s) / sqrt(mean(u * u) + eps / s^2), for rows whose sum of squares overflows
__device__ __forceinline__ T adc_rms_scaled(const T *x, long long n, T *part, T eps) {
    T hi = -ADC_INF, lo = -ADC_INF;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        hi = adc_nanmax(hi, x[j]);
        lo = adc_nanmax(lo, -x[j]);
    }
    const T big = adc_nanmax(adc_block_max(hi, part), adc_block_max(lo, part));
    const T inv = (T)1 / (big > (eps > 0 ? (T)1 : (T)0) ? big : (T)1);
    T q = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const T u = x[j] * inv;
        q += u * u;
    }
    T ms = adc_block_sum(q, part) / (T)n;
    if (eps > 0) ms += eps * (inv * inv);
    return inv / sqrt(ms);
}

// y = x * r * gamma, r = 1 / sqrt(mean(x * x) + eps); a row whose mean of squares is not
// finite (or, with eps 0, below the smallest normal) is scaled first, as the table kernel does
extern "C" __global__ void adc_row_rmsnorm(const T *x, const T *gamma, T *y, long long n,
                                            T eps) {
    __shared__ T part[32];
    x += blockIdx.x * n; y += blockIdx.x * n;
    T q = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) q += x[j] * x[j];
    const T ms = adc_block_sum(q, part) / (T)n;
    const T r = (ms - ms == 0 && (eps > 0 || ms >= ADC_TINY)) ? (T)1 / sqrt(ms + eps)
                                                              : adc_rms_scaled(x, n, part, eps);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) y[j] = x[j] * r * gamma[j];
}

// rmsnorm's adjoint as its VJP rule writes it (eps > 0): s = max|x| (NaN if a NaN),
// inv = 1 / (s > thr ? s : 1), u = x * inv, k = 1 / sqrt(mean(u * u) + eps * (inv * inv)),
// xhat = u * k, g = ct * gamma, dx = (k * inv) * (g - xhat * mean(g * xhat)); xhat (may be
// null) also written
extern "C" __global__ void adc_row_rmsnorm_grad(const T *x, const T *gamma, const T *ct,
                                                 T *dx, T *xhat, long long n, T eps, T thr) {
    __shared__ T part[32];
    const long long o = blockIdx.x * n;
    x += o; ct += o; dx += o;
    T m = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const T a = fabs(x[j]);
        if (a > m || a != a) m = a;
    }
    const T s = adc_block_max(m, part);
    const T inv = (T)1 / (s > thr ? s : (T)1);
    T q = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const T u = x[j] * inv;
        q += u * u;
    }
    const T k = (T)1 / sqrt(adc_block_sum(q, part) / (T)n + eps * (inv * inv));
    T b = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x)
        b += (ct[j] * gamma[j]) * ((x[j] * inv) * k);
    const T a = adc_block_sum(b, part) / (T)n;
    const T rinv = k * inv;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const T g = ct[j] * gamma[j], h = (x[j] * inv) * k;
        dx[j] = rinv * (g - h * a);
        if (xhat != 0) xhat[o + j] = h;
    }
}
"""


def source(ctype: str, label_ctype: str = "long long") -> str:
    """The module's CUDA source for storage type `ctype` and label type `label_ctype`."""
    return f"typedef {ctype} T;\ntypedef {label_ctype} L;\n{SOURCE}"
