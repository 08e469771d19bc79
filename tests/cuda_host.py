"""Host execution of the generated CUDA kernels: a CuPy whose kernels are the emitter's exact
source, compiled as C++ by g++ and run on NumPy arrays through ctypes.

CuPy turns a ``cupy.ElementwiseKernel``/``ReductionKernel`` into a CUDA C function around
the user's text: it binds each parameter through ``CArray``/``CIndexer`` (``const int &x0 =
_raw_x0[_ind.get()];``, outputs as references), and for a reduction defines ``REDUCE`` and
``POST_MAP`` from the reduce and post-map expressions, maps every input element with the map
expression into ``_type_reduce`` and reduces them in a fixed order: per output element, 512
threads (``_block_stride`` of them per output block) each fold a strided slice, then a tree
over shared memory halves the partial results; a one-input reduction over the axes last in
memory takes CuPy's default CUB path instead (`CUB`: tiles of four elements per thread, a
shuffle tree per warp, two passes for a whole array). This module writes those structures
as host loops (`ELEMENTWISE`, `REDUCTION`, `CUB`) with a prelude giving CuPy's type names, a
``float16`` with CuPy's conversions (round to nearest even from float, double and integers;
to float exactly) and the CUDA intrinsics the emitter uses, and runs it with CuPy's launch
rules: operands broadcast to the output shape (stride 0), axes permuted reduced-first,
``_block_stride`` chosen as CuPy's ``_get_block_specs`` does.

What differs from a GPU: g++ does not contract ``a * b + c`` into an FMA (NVRTC does by
default) and glibc's math functions are not CUDA's (both within a few ulps), and a float
converted to an integer out of range is undefined in C (x86 and CUDA differ). Arithmetic,
comparisons, in-range casts, float16 rounding, max and min therefore match a GPU bit for
bit; sums (accumulated in CuPy's order, but fed by possibly contracted maps) and
transcendental functions to rounding.

Kernels are compiled in batches (`HostKernels.build`), one shared library per batch, cached
by source hash in a directory that outlives the test session."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

GXX = shutil.which("g++")
CXXFLAGS = ["-std=c++17", "-O1", "-fwrapv", "-ffp-contract=off", "-fPIC", "-shared", "-w"]
BLOCK = 512  # CuPy's default reduction block size on CUDA

# CuPy's C names of the NumPy dtypes
C_TYPE = {"float16": "float16", "float32": "float", "float64": "double", "int32": "int",
          "int64": "long long", "bool": "bool"}

PRELUDE = r"""
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <math.h>
#define __device__
#define __global__
#define __forceinline__ inline
typedef int IndexT;

inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }

namespace adc_host {
// IEEE binary16 from a double, rounded once to nearest even (as cuda_fp16's conversions)
inline std::uint16_t to_half(double x) {
    std::uint64_t b; std::memcpy(&b, &x, 8);
    std::uint16_t sign = (std::uint16_t)((b >> 48) & 0x8000u);
    if (std::isnan(x)) return sign | 0x7e00u;
    double a = std::fabs(x);
    if (a >= 65520.0) return sign | 0x7c00u;
    if (a == 0.0) return sign;
    int e; std::frexp(a, &e);
    int E = e - 1 < -14 ? -14 : e - 1;               // exponent of the binade (subnormals: -14)
    double r = std::nearbyint(std::ldexp(a, 10 - E)); // significand in ulps, ties to even
    if (r >= 2048.0) { r /= 2.0; E += 1; }           // rounded up into the next binade
    if (r < 1024.0) return sign | (std::uint16_t)r;  // subnormal (E == -14)
    return sign | (std::uint16_t)((E + 15) << 10) | (std::uint16_t)(r - 1024.0);
}
inline float from_half(std::uint16_t h) {
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float s = (h & 0x8000u) ? -1.0f : 1.0f;
    if (exp == 0x1f) return man ? NAN : s * INFINITY;
    if (exp == 0) return s * std::ldexp((float)man, -24);
    return s * std::ldexp((float)(man + 1024), exp - 25);
}
template <typename T> struct Array {           // CArray: data, strides in bytes
    char *data; const long long *strides; int ndim;
    T &operator[](const std::ptrdiff_t *idx) const {
        char *p = data;
        for (int k = 0; k < ndim; ++k) p += idx[k] * strides[k];
        return *reinterpret_cast<T *>(p);
    }
};
struct Indexer {                               // CIndexer: C-order multi-index of i
    int ndim; const long long *shape; std::ptrdiff_t size_, index_[32];
    Indexer(int n, const long long *s) : ndim(n), shape(s), size_(1) {
        for (int k = 0; k < n; ++k) size_ *= s[k];
    }
    std::ptrdiff_t size() const { return size_; }
    void set(std::ptrdiff_t i) {
        for (int k = ndim - 1; k >= 0; --k) { index_[k] = i % shape[k]; i /= shape[k]; }
    }
    const std::ptrdiff_t *get() const { return index_; }
};
}  // namespace adc_host

// CuPy's float16: implicit from float, explicit from the other types, implicit to float
class float16 {
    std::uint16_t bits_;
public:
    float16() {}
    float16(float v) : bits_(adc_host::to_half(v)) {}
    explicit float16(bool v) : bits_(adc_host::to_half(v ? 1.0 : 0.0)) {}
    explicit float16(double v) : bits_(adc_host::to_half(v)) {}
    explicit float16(int v) : bits_(adc_host::to_half(v)) {}
    explicit float16(unsigned int v) : bits_(adc_host::to_half(v)) {}
    explicit float16(long long v) : bits_(adc_host::to_half((double)v)) {}
    explicit float16(unsigned long long v) : bits_(adc_host::to_half((double)v)) {}
    operator float() const { return adc_host::from_half(bits_); }
    float16 &operator=(const float16 &) = default;
    template <typename T> float16 &operator=(const T &rhs) {
        *this = static_cast<float16>(rhs);
        return *this;
    }
};
"""

ELEMENTWISE = """
namespace k_{key} {{
{preamble}
extern "C" void adc_host_{key}(char **data, const long long *strides, int ndim,
                                const long long *shape) {{
    adc_host::Indexer _ind(ndim, shape);
{arrays}
    for (std::ptrdiff_t i = 0; i < _ind.size(); ++i) {{
        _ind.set(i);
{bind}
{operation};
    }}
}}
}}
"""

REDUCTION = """
namespace k_{key} {{
{preamble}
#define REDUCE(a, b) ({reduce_expr})
#define POST_MAP(a) ({post_map_expr})
typedef {reduce_type} _type_reduce;
extern "C" void adc_host_{key}(char **data, const long long *strides, int ndim,
                                const long long *shape, int out_ndim,
                                const long long *out_shape, long long _block_stride) {{
    adc_host::Indexer _in_ind(ndim, shape), _out_ind(out_ndim, out_shape);
{arrays}
    _type_reduce _sdata[{block}];
    int _log_stride = 0;
    while ((1LL << _log_stride) < _block_stride) ++_log_stride;
    const std::ptrdiff_t _j_stride = (std::ptrdiff_t)({block} >> _log_stride) * _out_ind.size();
    for (std::ptrdiff_t _i_base = 0; _i_base < _out_ind.size(); _i_base += _block_stride) {{
        for (unsigned int _tid = 0; _tid < {block}; ++_tid) {{   // each thread's slice
            _type_reduce _s = _type_reduce({identity});
            std::ptrdiff_t _i = _i_base + (_tid & (_block_stride - 1));
            IndexT _J = _tid >> _log_stride;
            if (_i < _out_ind.size()) {{
                for (std::ptrdiff_t _j = _i + (std::ptrdiff_t)_J * _out_ind.size();
                     _j < _in_ind.size(); _j += _j_stride, _J += {block} >> _log_stride) {{
                    _in_ind.set(_j);
{bind}
                    _type_reduce _a = static_cast<_type_reduce>({map_expr});
                    _s = REDUCE(_s, _a);
                }}
            }}
            _sdata[_tid] = _s;
        }}
        for (unsigned int _block = {block} / 2; _block >= _block_stride; _block >>= 1) {{
            for (unsigned int _tid = 0; _tid < _block; ++_tid) {{   // the shared-memory tree
                _type_reduce _a = _sdata[_tid], _b = _sdata[_tid + _block];
                _sdata[_tid] = REDUCE(_a, _b);
            }}
        }}
        for (unsigned int _tid = 0; _tid < _block_stride; ++_tid) {{
            std::ptrdiff_t _i = _i_base + _tid;
            if (_i < _out_ind.size()) {{
                _out_ind.set(_i);
                {out_type} &{out_name} = _raw_{out_name}[_out_ind.get()];
                _type_reduce _s = _sdata[_tid];
                POST_MAP(_s);
            }}
        }}
    }}
}}
{cub}#undef REDUCE
#undef POST_MAP
}}
"""

CUB = """// CuPy's CUB path (one input, contiguous, the reduced axes last in memory): per segment,
// tiles of BLOCK * 4 elements, 4 per thread folded in order, a shuffle-down tree per warp of
// 32, warps folded in order, tiles folded into the aggregate; a whole-array reduction runs
// twice (blocks of one tile each, then one block over their results).
static _type_reduce cub_tile(_type_reduce *v, int block) {{
    for (int t = 0; t < block; ++t) {{
        _type_reduce a = v[4 * t];
        for (int j = 1; j < 4; ++j) {{ _type_reduce b = v[4 * t + j]; a = REDUCE(a, b); }}
        v[t] = a;
    }}
    for (int w = 0; w < block; w += 32)
        for (int off = 1; off < 32; off <<= 1)
            for (int l = w; l + off < w + 32; ++l) {{
                _type_reduce a = v[l], b = v[l + off]; v[l] = REDUCE(a, b);
            }}
    _type_reduce a = v[0];
    for (int w = 32; w < block; w += 32) {{ _type_reduce b = v[w]; a = REDUCE(a, b); }}
    return a;
}}
template <typename T, typename Map>
static _type_reduce cub_segment(const T *in, long long n, int block, Map map) {{
    static _type_reduce v[{block} * 4];
    _type_reduce aggregate = _type_reduce({identity});
    for (long long i = 0; i < n; i += block * 4) {{
        long long tile = n - i < block * 4 ? n - i : block * 4;
        for (long long e = 0; e < block * 4; ++e)
            v[e] = e < tile ? static_cast<_type_reduce>(map(in[i + e])) : _type_reduce({identity});
        _type_reduce b = cub_tile(v, block);
        aggregate = REDUCE(aggregate, b);
    }}
    return aggregate;
}}
struct Count {{ long long n; long long size() const {{ return n; }} }};
extern "C" void adc_host_cub_{key}(char **data, const long long *out_offsets,
                                    long long segment, long long segments, int block,
                                    int two_pass) {{
    typedef {in_type} T;
    const T *base = reinterpret_cast<const T *>(data[0]);
    auto map = [](const T {in_name}) {{ return {map_expr}; }};
    if (!two_pass) {{
        for (long long s = 0; s < segments; ++s) {{
            _type_reduce _s = cub_segment(base + s * segment, segment, block, map);
            Count _in_ind{{segment}}, _out_ind{{1}};  // CuPy's _segment_size and 1.0
            {out_type} &{out_name} = *reinterpret_cast<{out_type} *>(data[1] + out_offsets[s]);
            POST_MAP(_s);
        }}
        return;
    }}
    long long share = segment < block * 4 ? segment : block * 4;
    long long parts = (segment + share - 1) / share;
    _type_reduce *partial = new _type_reduce[parts];
    for (long long b = 0; b < parts; ++b) {{
        long long n = segment - b * share < share ? segment - b * share : share;
        partial[b] = cub_segment(base + b * share, n, block, map);
    }}
    auto same = [](const _type_reduce a) {{ return a; }};
    _type_reduce _s = cub_segment(partial, parts, block, same);
    delete[] partial;
    Count _in_ind{{segment}}, _out_ind{{1}};  // CuPy's _array_size and 1.0
    {out_type} &{out_name} = *reinterpret_cast<{out_type} *>(data[1] + out_offsets[0]);
    POST_MAP(_s);
}}
"""


def _params(text: str) -> list[tuple[np.dtype, str]]:
    """(dtype, name) of each parameter of CuPy's ``"float32 x0, int32 x1"``."""
    out = []
    for p in text.split(","):
        dtype, name = p.split()
        out.append((np.dtype(dtype), name))
    return out


def _arrays(params, first_stride: str = "0") -> str:
    lines = []
    for k, (dtype, name) in enumerate(params):
        lines.append(f"    adc_host::Array<{C_TYPE[dtype.name]}> _raw_{name} = "
                     f"{{data[{k}], strides + {k} * ndim, ndim}};")
    return "\n".join(lines)


class HostKernel:
    """One kernel's host source and, once built, its entry point."""

    def __init__(self, kind: str, ins, outs, fields: dict):
        self.kind, self.ins, self.outs = kind, ins, outs
        text = repr((kind, sorted(fields.items())))
        self.key = hashlib.sha1(text.encode()).hexdigest()[:20]
        if kind == "elementwise":
            bind = [f"        const {C_TYPE[d.name]} &{n} = _raw_{n}[_ind.get()];" for d, n in ins]
            bind += [f"        {C_TYPE[d.name]} &{n} = _raw_{n}[_ind.get()];" for d, n in outs]
            self.source = ELEMENTWISE.format(key=self.key, preamble=fields["preamble"],
                                             arrays=_arrays(ins + outs), bind="\n".join(bind),
                                             operation=fields["operation"])
        else:
            (out_dtype, out_name), = outs
            arrays = _arrays(ins) + (
                f"\n    adc_host::Array<{C_TYPE[out_dtype.name]}> _raw_{out_name} = "
                f"{{data[{len(ins)}], strides + {len(ins)} * ndim, out_ndim}};")
            bind = "\n".join(f"                    const {C_TYPE[d.name]} {n} = "
                             f"_raw_{n}[_in_ind.get()];" for d, n in ins)
            cub = "" if len(ins) != 1 else CUB.format(
                key=self.key, block=BLOCK, identity=fields["identity"],
                map_expr=fields["map_expr"], out_type=C_TYPE[out_dtype.name],
                out_name=out_name, in_type=C_TYPE[ins[0][0].name], in_name=ins[0][1])
            self.source = REDUCTION.format(
                cub=cub, key=self.key, preamble=fields["preamble"], reduce_expr=fields["reduce_expr"],
                post_map_expr=fields["post_map_expr"], reduce_type=fields["reduce_type"],
                identity=fields["identity"], map_expr=fields["map_expr"], arrays=arrays,
                bind=bind, block=BLOCK, out_type=C_TYPE[out_dtype.name], out_name=out_name)
        self.fn = self.cub = None


class HostKernels:
    """Host kernels by source, compiled in batches into shared libraries kept in `cache`."""

    def __init__(self, cache: Path):
        self.cache = Path(cache)
        self.cache.mkdir(parents=True, exist_ok=True)
        self.kernels: dict[str, HostKernel] = {}
        self.libraries: list = []
        self.compiles = 0  # g++ runs (not cache hits)

    def kernel(self, kind, ins, outs, fields) -> HostKernel:
        k = HostKernel(kind, ins, outs, fields)
        return self.kernels.setdefault(k.key, k)

    def build(self, kernels=None) -> None:
        """Compile every kernel not yet loaded (or those of `kernels`) into one library."""
        todo = [k for k in (kernels if kernels is not None else self.kernels.values())
                if k.fn is None]
        todo = list({k.key: k for k in todo}.values())
        if not todo:
            return
        source = PRELUDE + "".join(k.source for k in sorted(todo, key=lambda k: k.key))
        digest = hashlib.sha1((source + " ".join(CXXFLAGS)).encode()).hexdigest()[:24]
        lib = self.cache / f"kernels_{digest}.so"
        if not lib.exists():
            fd, cpp = tempfile.mkstemp(suffix=".cpp", dir=self.cache)
            with os.fdopen(fd, "w") as f:
                f.write(source)
            tmp = f"{cpp[:-4]}.so"
            try:
                done = subprocess.run([GXX, *CXXFLAGS, "-o", tmp, cpp], capture_output=True,
                                      text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"g++ failed on the generated kernels:\n"
                                       f"{done.stderr[:4000]}")
                os.replace(tmp, lib)
                self.compiles += 1
            finally:
                for p in (cpp, tmp):
                    if os.path.exists(p):
                        os.unlink(p)
        handle = ctypes.CDLL(str(lib))
        self.libraries.append(handle)
        for k in todo:
            k.fn = getattr(handle, f"adc_host_{k.key}")
            k.fn.restype = None
            if k.kind == "reduction" and len(k.ins) == 1:
                k.cub = getattr(handle, f"adc_host_cub_{k.key}")
                k.cub.restype = None


# ---- CuPy's launch rules on NumPy arrays ---------------------------------------------

def _ll(values):
    values = [int(v) for v in values]
    return (ctypes.c_longlong * max(1, len(values)))(*values)


def _pointers(arrays):
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])


def _block_stride(ins, out_shape, in_size: int, out_size: int) -> int:
    """CuPy's ``_get_block_specs`` with ``_get_contiguous_size`` (inputs already permuted
    reduced axes first)."""
    contiguous = 1
    out_ndim = len(out_shape)
    for a in ins:
        size = 1
        for j in range(out_ndim):
            if a.strides[a.ndim - j - 1] != size * a.itemsize:
                break
            size *= out_shape[out_ndim - j - 1]
        contiguous = max(contiguous, size)
    reduce_block = max(1, in_size // max(1, out_size))
    stride = max(min(contiguous, 32), BLOCK // reduce_block)
    return 1 << (stride.bit_length() - 1)  # clp2(stride // 2 + 1): a power of two <= stride


def cub_layout(a: np.ndarray, reduce_axis: tuple):
    """Where CuPy's ``_can_use_cub_block_reduction`` takes the CUB path for the one input
    `a`: (order of the segments, elements per segment), else None."""
    ndim = a.ndim
    out_axis = tuple(d for d in range(ndim) if d not in reduce_axis)
    size = int(np.prod([a.shape[d] for d in reduce_axis]))
    if size == 0:
        return None
    if a.flags.f_contiguous:  # CuPy asks F first: the reduced axes must lead
        order, perm = "F", tuple(reduce_axis) + out_axis
    elif a.flags.c_contiguous:
        order, perm = "C", out_axis + tuple(reduce_axis)
    else:
        return None
    return (order, size) if perm == tuple(range(ndim)) else None


def cub_block(size: int) -> int:
    """CuPy's ``_get_cub_block_specs``: threads per block for segments of `size`."""
    threads = 1 << max(0, ((size + 3) // 4 - 1).bit_length())  # clp2
    return min(max(threads, 32), BLOCK)


def host_kernel(kernels: HostKernels, kern, build: bool = True) -> HostKernel:
    """The host kernel of the stand-in kernel `kern`'s exact source (kept on it), built
    unless `build` is false (`HostKernels.build` then compiles it with others)."""
    host = getattr(kern, "_host", None)
    if host is None:
        ins = [(p.dtype, p.name) for p in kern.in_params]
        outs = [(p.dtype, p.name) for p in kern.out_params]
        if hasattr(kern, "operation"):
            host = kernels.kernel("elementwise", ins, outs, {
                "preamble": kern.preamble, "operation": kern.operation,
                "params": repr((ins, outs))})
        else:
            host = kernels.kernel("reduction", ins, outs, {
                "preamble": kern.preamble, "map_expr": kern.map_expr,
                "reduce_expr": kern.reduce_expr, "post_map_expr": kern.post_map_expr,
                "identity": kern.identity, "reduce_type": kern.reduce_type,
                "params": repr((ins, outs))})
        kern._host = host
    if build:
        kernels.build([host])
    return host


def host_cupy(kernels: HostKernels, launches: list | None = None, cub_paths: bool = True):
    """The CuPy stand-in (tests/cupy_standin.py: CuPy's kernel signatures and argument
    checks) whose kernels run the host build of their exact source; `launches` collects
    (kernel name, kind) per launch. One-input reductions take CuPy's CUB path where CuPy
    would (its default accelerator), unless `cub_paths` is false."""
    from cupy_standin import fake_cupy
    launches = [] if launches is None else launches

    def elementwise(kern, ins, outs):
        host = host_kernel(kernels, kern)
        shape = outs[0].shape
        views = [np.broadcast_to(np.asarray(a), shape) for a in ins] + list(outs)
        launches.append((kern.name, "elementwise"))
        host.fn(_pointers(views), _ll(s for v in views for s in v.strides), len(shape),
                _ll(shape))

    def reduction(kern, ins, out, reduce_axis, keepdims):
        host = host_kernel(kernels, kern)
        ins = [np.asarray(a) for a in ins]
        shape = np.broadcast_shapes(*(a.shape for a in ins))
        out_axis = tuple(d for d in range(len(shape)) if d not in reduce_axis)
        cub = cub_layout(ins[0], tuple(reduce_axis)) if len(ins) == 1 and cub_paths else None
        if cub is not None:
            order, size = cub
            kept = tuple(shape[d] for d in out_axis)
            segments = int(np.prod(kept))
            out_view = out.reshape(kept)
            assert np.shares_memory(out_view, out) or out.size == 1
            offsets = [0]  # segment k's output: the k-th element in the segments' order
            if kept:
                index = np.unravel_index(np.arange(segments), kept, order=order)
                offsets = sum(i * st for i, st in zip(index, out_view.strides))
            launches.append((kern.name, "reduction, CUB"))
            host.cub(_pointers([ins[0], out_view]), _ll(np.atleast_1d(offsets)),
                     ctypes.c_longlong(size), ctypes.c_longlong(segments),
                     ctypes.c_int(cub_block(size)), ctypes.c_int(not out_axis))
            return
        views = [np.broadcast_to(a, shape) for a in ins]
        if len(ins) == 1 and len(out_axis) <= 1 and not ins[0].flags.c_contiguous:
            strides = views[0].strides  # CuPy's _sort_axis
            reduce_axis = tuple(sorted(reduce_axis, key=lambda d: -abs(strides[d])))
            out_axis = tuple(sorted(out_axis, key=lambda d: -abs(strides[d])))
        views = [v.transpose(tuple(reduce_axis) + out_axis) for v in views]
        kept = tuple(shape[d] for d in out_axis)
        in_shape = tuple(shape[d] for d in reduce_axis) + kept
        in_size, out_size = int(np.prod(in_shape)), int(np.prod(kept))
        out_view = out.reshape(kept)  # the output over the kept axes (keepdims' ones gone)
        assert np.shares_memory(out_view, out)
        strides = [s for v in views for s in v.strides]
        strides += list(out_view.strides) + [0] * (len(in_shape) - len(kept))
        launches.append((kern.name, "reduction"))
        host.fn(_pointers(views + [out_view]), _ll(strides), len(in_shape), _ll(in_shape),
                len(kept), _ll(kept),
                ctypes.c_longlong(_block_stride(views, kept, in_size, out_size)))

    return fake_cupy({}, [], compute=(elementwise, reduction))
