"""Row kernels for the CUDA backend: softmax, log_softmax, cross_entropy, layernorm and
rmsnorm, forward and adjoint, each one launch with one thread block per row.

CuPy's own path for these ops is several kernels per op (a max, a subtraction, an
exponential, a sum and a division for softmax: five launches and five trips through
memory). Here a block reduces its row with warp shuffles (``__shfl_xor_sync``, butterfly
order, every lane ends with the result) and one shared-memory step across the warps, reads
the row again for the next reduction (it is then in L1/L2) and writes the result once.

The source is one ``cupy.RawModule`` per storage type (``float``, ``double``); the sums
accumulate in the storage type, as NumPy's do for f32 and f64. Every element-wise step
is the NumPy kernel's formula in its order (``adc_runtime.kernels.nn``: softmax is
``exp(x - max) / sum``, log_softmax ``(x - max) - log(sum)``, layernorm
``(x - mean) / sqrt(var + eps) * gamma + beta``), so a row's results differ from NumPy's
only through the sums, which add in another order than NumPy's pairwise summation:
each sum is within ``(log2(threads) + n / threads) * eps`` relative of NumPy's. Maxima are
exact and propagate NaN (as ``numpy.max``). Divisions and square roots are IEEE-rounded
(NVRTC's defaults, ``-prec-div=true -prec-sqrt=true``); ``exp``/``log`` are CUDA's, within
2 ulps of glibc's.

rmsnorm is ``x * r * gamma`` with ``r = 1 / sqrt(mean(x * x) + eps)``, as the table kernel;
a row whose mean of squares is not finite (or, with eps 0, below the smallest normal) is
divided by its largest magnitude first, decided row by row where the table kernel decides
for the whole array (the same value in exact arithmetic). The adjoints of layernorm and
rmsnorm compute what their VJP rules' ops compute (the patterns of
`adc_runtime.row_patterns`; rmsnorm's row scaled by its largest magnitude) and may also
write the normalized x, which the rules' gamma gradients read (`adc_runtime.cuda_row_groups`
runs them in reverse programs).

The block size is a function of the row length alone (`threads`), so a row is reduced in the
same order by every kernel of this module: the softmax written by `cross_entropy`'s
``probs`` output is bit-identical to `softmax`'s.

Labels of cross_entropy outside ``[0, n)`` give a NaN loss (the kernel never reads out of
bounds); the runner's input checks reject such labels before a step runs.

Launchers take CuPy arrays (`cp` is the array module, the host stand-in in tests) whose
reduced axis is last and C-contiguous; `applies` says when that holds. CuPy is never
imported here.
"""
from __future__ import annotations

from typing import Any

from .cuda_rows_source import SIGNATURES, SOURCE, source  # noqa: F401  (the module's text)

ROW_DTYPES = {"float32": ("float", "f32"), "float64": ("double", "f64")}
MAX_THREADS = 1024
LABEL_CTYPES = {"int32": "int", "int64": "long long"}


def threads(n: int) -> int:
    """Threads per block for rows of `n` elements: a power of two from 32 to 1024, about
    four elements per thread."""
    t = 32
    while t < MAX_THREADS and t * 4 < n:
        t *= 2
    return t


_MODULES: dict[tuple, Any] = {}


def module(cp, dtype: str, label_dtype: str = "int64"):
    """The RawModule of `dtype` (and labels of `label_dtype`), built once per array module."""
    key = (id(cp), dtype, label_dtype)
    mod = _MODULES.get(key)
    if mod is None:
        ctype, _ = ROW_DTYPES[dtype]
        mod = _MODULES[key] = cp.RawModule(code=source(ctype, LABEL_CTYPES[label_dtype]),
                                           options=("--std=c++14",))
    return mod


def applies(x, axis: int) -> bool:
    """Whether the row kernels can run on `x` along `axis`: a float32/float64 array of rank
    >= 1, C-contiguous, reduced along its last axis."""
    return (x.ndim >= 1 and axis % x.ndim == x.ndim - 1 and x.dtype.name in ROW_DTYPES
            and x.flags.c_contiguous)


def _launch(cp, name: str, x, args: tuple, label_dtype: str = "int64") -> None:
    n = x.shape[-1] if x.ndim else 1
    rows = x.size // n if n else 0
    if rows == 0 or n == 0:
        return
    fn = module(cp, x.dtype.name, label_dtype).get_function(name)
    fn((rows,), (threads(n),), args)


def _scalar(x, v: float):
    return x.dtype.type(v)


def softmax(cp, x, out=None):
    out = cp.empty_like(x) if out is None else out
    _launch(cp, "adc_row_softmax", x, (x, out, cp.int64(x.shape[-1])))
    return out


def log_softmax(cp, x, out=None):
    out = cp.empty_like(x) if out is None else out
    _launch(cp, "adc_row_log_softmax", x, (x, out, cp.int64(x.shape[-1])))
    return out


def softmax_grad(cp, y, g, out=None):
    out = cp.empty_like(y) if out is None else out
    _launch(cp, "adc_row_softmax_grad", y, (y, g, out, cp.int64(y.shape[-1])))
    return out


def log_softmax_grad(cp, y, g, out=None):
    out = cp.empty_like(y) if out is None else out
    _launch(cp, "adc_row_log_softmax_grad", y, (y, g, out, cp.int64(y.shape[-1])))
    return out


def cross_entropy(cp, z, labels, out=None, probs=None):
    """Per-row losses of logits `z` and integer `labels` (C-contiguous); `probs`, when
    given, receives softmax(z) in the same launch."""
    out = cp.empty(z.shape[:-1], dtype=z.dtype) if out is None else out
    if z.size == 0 and out.size:
        out.fill(z.dtype.type("nan"))  # no class to pick: NumPy would reject the labels
        return out
    _launch(cp, "adc_row_cross_entropy", z,
            (z, labels, out, probs if probs is not None else _null(cp),
             cp.int64(z.shape[-1])), labels.dtype.name)
    return out


def cross_entropy_grad(cp, z, labels, ct, out=None):
    out = cp.empty_like(z) if out is None else out
    _launch(cp, "adc_row_cross_entropy_grad", z, (z, labels, ct, out, cp.int64(z.shape[-1])),
            labels.dtype.name)
    return out


def layernorm(cp, x, gamma, beta, eps, out=None):
    out = cp.empty_like(x) if out is None else out
    _launch(cp, "adc_row_layernorm", x,
            (x, gamma, beta, out, cp.int64(x.shape[-1]), _scalar(x, eps)))
    return out


def layernorm_grad(cp, x, gamma, ct, eps, out=None, xhat=None):
    """dx of layernorm from x, gamma and the cotangent `ct`; the normalized x also into
    `xhat` when given."""
    out = cp.empty_like(x) if out is None else out
    _launch(cp, "adc_row_layernorm_grad", x,
            (x, gamma, ct, out, _or_null(cp, xhat), cp.int64(x.shape[-1]), _scalar(x, eps)))
    return out


def rmsnorm(cp, x, gamma, eps, out=None):
    out = cp.empty_like(x) if out is None else out
    _launch(cp, "adc_row_rmsnorm", x, (x, gamma, out, cp.int64(x.shape[-1]), _scalar(x, eps)))
    return out


def rmsnorm_grad(cp, x, gamma, ct, eps, out=None, xhat=None, thr=1.0):
    """dx of rmsnorm (eps > 0) as its VJP rule computes it, the row scaled by its largest
    magnitude where above `thr`; the normalized x also into `xhat` when given."""
    out = cp.empty_like(x) if out is None else out
    _launch(cp, "adc_row_rmsnorm_grad", x,
            (x, gamma, ct, out, _or_null(cp, xhat), cp.int64(x.shape[-1]), _scalar(x, eps),
             _scalar(x, thr)))
    return out


def _or_null(cp, a):
    return a if a is not None else _null(cp)


def _null(cp):
    """A null pointer argument: an empty array (CuPy gives it no memory, so its data
    pointer is 0)."""
    return cp.empty(0, dtype="float32")


ROW_OPS = frozenset({"softmax", "log_softmax", "cross_entropy", "layernorm", "rmsnorm"})


def run_row_op(cp, name: str, args: list, attrs: dict, out=None):
    """`name` (one of `ROW_OPS`) on `args` by its row kernel, into `out` when given; None
    where the row kernels do not apply (the caller then runs the table kernel)."""
    x = args[0]
    axis = attrs.get("axis", -1)
    if not applies(x, axis):
        return None
    if name == "softmax":
        return softmax(cp, x, out)
    if name == "log_softmax":
        return log_softmax(cp, x, out)
    if name == "cross_entropy":
        labels = args[1]
        if labels.dtype.name not in LABEL_CTYPES or not labels.flags.c_contiguous:
            return None
        return cross_entropy(cp, x, labels, out)
    n = x.shape[-1]
    if n == 0 or any(p.shape != (n,) or p.dtype != x.dtype or not p.flags.c_contiguous
                     for p in args[1:]):
        return None   # (an empty row: the table kernel reports it)
    if name == "rmsnorm":
        return rmsnorm(cp, x, args[1], attrs.get("eps", 1e-6), out)
    return layernorm(cp, x, args[1], args[2], attrs.get("eps", 1e-5), out)
