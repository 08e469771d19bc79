"""Functions written with NumPy, in the style of tangent's test corpus, each with the
arguments it is checked at. `CASES` lists (function, argument makers, argnums).

An argument maker is a shape tuple (a float64 array of that shape), `S(v)` (a value known
at compile time), or a dict/list/tuple of makers (a pytree). The functions read `np` as a
module global, so the tests can run the same source with another NumPy-like module
(jax.numpy, autograd.numpy) as an independent reference.
"""
import math

import numpy as np

import adcompiler as adc

CASES = []
EPS = 1e-3
SCALE = 2.5
NO_REFERENCE = set()    # functions only adc can run (they call adc.ops)


class S:
    """A compile-time argument."""

    def __init__(self, value):
        self.value = value


def case(*makers, argnums=0):
    def deco(f):
        CASES.append((f, makers, argnums))
        return f
    return deco


# ---- arithmetic and ufuncs ------------------------------------------------------------

@case((4,))
def poly(x):
    return np.sum(3.0 * x ** 3 - 2.0 * x ** 2 + x - 1.0)


@case((3,), (3,), argnums=(0, 1))
def binary_ops(a, b):
    return np.sum(a * b + a / (b * b + 1.0) - (a - b) ** 2)


@case((5,))
def unary_chain(x):
    return np.sum(np.exp(np.sin(x)) + np.cos(x) * np.tanh(x))


@case((2, 3))
def logs(x):
    return np.sum(np.log(x * x + 1.0) + np.log1p(x ** 2) + np.expm1(0.1 * x))


@case((4,))
def sqrt_abs(x):
    return np.sum(np.sqrt(x ** 2 + 1.0) + np.abs(x) * 0.5)


@case((4,))
def square_reciprocal(x):
    return np.sum(np.square(x) + np.reciprocal(x * x + 2.0))


@case((3,))
def negatives(x):
    return -np.sum(-x * -x) + np.sum(np.negative(x))


@case((3,))
def power_ops(x):
    return np.sum(np.power(x * x + 1.0, 1.5) + (x * x + 2.0) ** 0.5)


@case((2, 2))
def log2_log10(x):
    y = x * x + 1.0
    return np.sum(np.log2(y) + np.log10(y))


@case((3,))
def trig_comp(x):
    return np.sum(np.tan(0.3 * x) + np.sinh(0.5 * x) + np.cosh(0.2 * x))


@case((3,), (3,), argnums=(0, 1))
def logaddexp_fn(a, b):
    return np.sum(np.logaddexp(a, b))


@case((4,))
def sigmoid_written(x):
    return np.sum(1.0 / (1.0 + np.exp(-x)))


@case((4,))
def module_constants(x):
    return np.sum(x * SCALE + EPS) + math.pi * np.sum(x)


@case((4,), S(3.0))
def static_float_arg(x, c):
    return np.sum(x * c)


@case((3,))
def numpy_constant_folding(x):
    return np.sum(x * np.sqrt(2.0) + np.exp(1.0))


# ---- selection --------------------------------------------------------------------------

@case((6,))
def where_relu(x):
    return np.sum(np.where(x > 0, x, 0.1 * x))


@case((5,), (5,), argnums=(0, 1))
def maximum_minimum(a, b):
    return np.sum(np.maximum(a, b) * 2.0 + np.minimum(a, 0.3 * b))


@case((6,))
def clip_fn(x):
    return np.sum(np.clip(x, -0.5, 0.5) * x)


@case((6,))
def clip_one_side(x):
    return np.sum(np.clip(x, 0.0, None) + np.clip(x, None, 0.2))


@case((4,))
def comparison_mask(x):
    mask = x > 0.1
    return np.sum(np.where(mask, x * x, np.zeros_like(x)))


# ---- reductions -------------------------------------------------------------------------

@case((3, 4))
def sum_axis(x):
    return np.sum(np.sum(x, axis=0) ** 2) + np.sum(np.sum(x, axis=1) ** 3)


@case((2, 3, 4))
def sum_axis_tuple(x):
    return np.sum(np.sum(x, axis=(0, 2)) ** 2)


@case((3, 4))
def mean_keepdims(x):
    return np.sum((x - np.mean(x, axis=1, keepdims=True)) ** 2)


@case((3, 4))
def max_reduction(x):
    return np.sum(np.max(x, axis=1)) + np.min(x)


@case((3, 4))
def var_std(x):
    return np.sum(np.var(x, axis=0)) + np.std(x)


@case((4, 3))
def methods_reduce(x):
    return x.sum() + x.mean(axis=0).sum() + (x.max(axis=1) ** 2).sum()


@case((2, 3, 2))
def negative_axis(x):
    return np.sum(np.mean(x, axis=-1) ** 2)


@case((5,))
def var_ddof(x):
    return np.var(x, ddof=1)


# ---- linear algebra -----------------------------------------------------------------------

@case((3, 4), (4,), argnums=(0, 1))
def matvec(A, v):
    return np.sum(np.tanh(A @ v))


@case((2, 3), (3, 4), argnums=(0, 1))
def matmul_fn(a, b):
    return np.sum(np.matmul(a, b) ** 2)


@case((3,), (3,), argnums=(0, 1))
def dot_vectors(a, b):
    return np.dot(a, b) ** 2


@case((2, 3), (3, 2), argnums=(0, 1))
def dot_matrices(a, b):
    return np.sum(np.dot(a, b))


@case((2, 3), (3, 4), argnums=(0, 1))
def einsum_matmul(a, b):
    return np.sum(np.einsum("ij,jk->ik", a, b) ** 2)


@case((3, 3))
def einsum_contract_all(a):
    return np.einsum("ij,ij->", a, np.sin(a)) ** 2


@case((2, 3, 4), (2, 4, 3), argnums=(0, 1))
def batched_matmul(a, b):
    return np.sum(np.tanh(a @ b))


@case((3,), (4,), argnums=(0, 1))
def outer_fn(a, b):
    return np.sum(np.sin(np.outer(a, b)))


@case((3, 3))
def trace_fn(a):
    return np.trace(a @ a)


@case((4,))
def norm_fn(x):
    return np.linalg.norm(x)


@case((2, 3))
def transpose_forms(x):
    return np.sum(x.T @ x) + np.sum(np.transpose(x) * 2.0)


# ---- shapes -------------------------------------------------------------------------------

@case((2, 6))
def reshape_fn(x):
    y = np.reshape(x, (3, 4))
    z = x.reshape(4, 3)
    return np.sum(y[0] * 2.0) + np.sum(z[:, 1] ** 2)


@case((3,), (3,), argnums=(0, 1))
def concatenate_fn(a, b):
    c = np.concatenate([a, b * 2.0])
    return np.sum(c ** 2 * np.arange(6))


@case((3,), (3,), argnums=(0, 1))
def stack_fn(a, b):
    m = np.stack([a, b], axis=1)
    return np.sum(m[:, 0] * m[:, 1])


@case((2, 3))
def expand_squeeze(x):
    y = np.expand_dims(x, 0)
    return np.sum(np.squeeze(y, axis=0) ** 2) + np.sum(x[:, None] * x[None, :])


@case((3, 2))
def ravel_fn(x):
    return np.sum(np.ravel(x) * np.arange(6.0))


@case((3,))
def broadcast_fn(x):
    return np.sum(np.broadcast_to(x, (2, 3)) ** 2)


@case((2, 3, 4))
def swap_axes(x):
    return np.sum(np.swapaxes(x, 0, 2)[0] ** 2)


# ---- slicing -------------------------------------------------------------------------------

@case((8,))
def slice_steps(x):
    return np.sum(x[::2] * x[1::2]) + np.sum(x[6:1:-2] ** 2)


@case((4, 5))
def slice_2d(x):
    return np.sum(x[1:3, ::2] ** 2) + np.sum(x[-1, 1:])


@case((3, 4))
def ellipsis_index(x):
    return np.sum(x[..., 1] ** 2) + np.sum(x[0, ...])


@case((5,))
def negative_index(x):
    return x[-1] * x[0] + x[-2] ** 2


# ---- constructors ---------------------------------------------------------------------------

@case((3,))
def constructors(x):
    z = np.zeros(3) + np.ones((3,)) * 2.0 + np.full((3,), 0.5)
    return np.sum(x * z) + np.sum(np.ones_like(x) * x ** 2)


@case((2, 2))
def eye_fn(x):
    return np.sum((x + np.eye(2)) ** 2)


@case((3,))
def array_literal(x):
    w = np.array([1.0, -2.0, 0.5])
    return np.sum(w * x ** 2)


# ---- static control flow --------------------------------------------------------------------

@case((4,), S(True))
def static_branch(x, flag):
    if flag:
        y = np.sin(x)
    else:
        y = np.cos(x)
    return np.sum(y * x)


@case((4,), S(False))
def static_branch_else(x, flag):
    if flag:
        y = np.sin(x)
    else:
        y = np.cos(x)
    return np.sum(y * x)


@case((3, 4))
def shape_branch(x):
    if x.shape[0] > 2:
        return np.sum(x[:2] ** 2)
    return np.sum(x)


@case((4,), S(3))
def static_int_arg(x, n):
    y = x
    for _ in range(n):
        y = np.sin(y)
    return np.sum(y)


@case((4,), S(2))
def early_return(x, mode):
    if mode == 1:
        return np.sum(x)
    elif mode == 2:
        return np.sum(x ** 2)
    return np.sum(x ** 3)


@case((3,))
def ternary(x):
    scale = 2.0 if x.ndim == 1 else 3.0
    return np.sum(x * scale)


@case((3,), S(4))
def while_static(x, n):
    k = n
    y = x
    while k > 1:
        y = y * 0.5 + np.sin(y)
        k = k // 2
    return np.sum(y)


# ---- loops kept as loops ----------------------------------------------------------------------

@case((5,))
def loop_accumulator(x):
    acc = 0.0
    for i in range(x.shape[0]):
        acc = acc + x[i] * x[i]
    return acc


@case((3,), (3, 3), argnums=(0, 1))
def loop_rnn(h, W):
    for t in range(4):
        h = np.tanh(W @ h + 0.1)
    return np.sum(h)


@case((4, 3))
def loop_rows(x):
    s = np.zeros(3)
    for i in range(4):
        s = s + np.sin(x[i]) * (i + 1)
    return np.sum(s ** 2)


@case((6,))
def loop_range_step(x):
    acc = 0.0
    for i in range(1, 6, 2):
        acc = acc + x[i] ** 2
    return acc


@case((3,))
def loop_two_carries(x):
    a = x
    b = x * 2.0
    for _ in range(3):
        a, b = b * 0.5, np.sin(a)
    return np.sum(a * b)


@case((3,))
def loop_zero_trip(x):
    acc = np.sum(x)
    for i in range(0):
        acc = acc * 2.0
    return acc


@case((2, 3))
def nested_loops(x):
    acc = 0.0
    for i in range(2):
        for j in range(3):
            acc = acc + x[i, j] * (i + j + 1.0)
    return acc ** 2


@case((3,))
def loop_over_list(x):
    total = 0.0
    for c in [1.0, 2.0, 3.0]:
        total = total + np.sum(x ** 2) * c
    return total


# ---- calls -----------------------------------------------------------------------------------

def _square_sum(v):
    return np.sum(v * v)


def _affine(x, W, b):
    return x @ W + b


def _two(x):
    return np.sin(x), np.cos(x)


def _scaled(x, k=2):
    return x * k


@case((3,))
def nested_call(x):
    return _square_sum(np.sin(x)) + _square_sum(x)


@case((2, 3), (3, 4), (4,), argnums=(0, 1, 2))
def call_affine(x, W, b):
    return np.sum(np.tanh(_affine(x, W, b)))


@case((3,))
def call_tuple_result(x):
    s, c = _two(x)
    pair = _two(x * 2.0)
    return np.sum(s * c) + np.sum(pair[0])


@case((3,))
def call_keywords(x):
    return np.sum(_scaled(x) + _scaled(x, k=3))


@case((3,))
def call_in_loop(x):
    acc = 0.0
    for i in range(3):
        acc = acc + _square_sum(x * x[i])
    return acc


@case((3,))
def call_lambda_global(x):
    return np.sum(_ACT(x))


_ACT = lambda v: np.tanh(v) * 2.0  # noqa: E731


# ---- machine learning -----------------------------------------------------------------------

@case((4, 5))
def softmax_cross_entropy(logits):
    z = logits - np.max(logits, axis=1, keepdims=True)
    p = np.exp(z) / np.sum(np.exp(z), axis=1, keepdims=True)
    labels = np.eye(4, 5)
    return -np.mean(np.sum(labels * np.log(p), axis=1))


@case((4, 3))
def logsumexp_written(x):
    m = np.max(x, axis=1, keepdims=True)
    return np.sum(m[:, 0] + np.log(np.sum(np.exp(x - m), axis=1)))


@case({"W1": (3, 4), "b1": (4,), "W2": (4, 2), "b2": (2,)}, (5, 3))
def mlp_dict(params, x):
    h = np.tanh(x @ params["W1"] + params["b1"])
    out = h @ params["W2"] + params["b2"]
    return np.mean(out ** 2)


@case([{"W": (3, 3), "b": (3,)}, {"W": (3, 2), "b": (2,)}], (4, 3))
def mlp_layers(layers, x):
    for layer in layers:
        x = np.tanh(x @ layer["W"] + layer["b"])
    return np.sum(x ** 2)


@case(((2, 3), (3,)), (4, 2))
def tuple_params(params, x):
    W, b = params
    return np.sum((x @ W + b) ** 2)


@case((5,))
def layernorm_written(x):
    mu = np.mean(x)
    var = np.mean((x - mu) ** 2)
    return np.sum(((x - mu) / np.sqrt(var + 1e-5)) * np.arange(5.0))


@case((6,))
def huber(x):
    a = np.abs(x)
    return np.sum(np.where(a < 0.5, 0.5 * x ** 2, 0.5 * (a - 0.25)))


@case((3, 4))
def adc_ops_softmax(x):
    return np.sum(adc.ops.softmax(x, axis=-1) * np.arange(4.0))


@case((3, 4))
def adc_ops_logsumexp(x):
    return np.sum(adc.ops.logsumexp(x, axis=1) ** 2)


def _softmax_reference(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return np.sum(e / np.sum(e, axis=-1, keepdims=True) * np.arange(4.0))


def _logsumexp_reference(x):
    m = np.max(x, axis=1)
    return np.sum((m + np.log(np.sum(np.exp(x - m[:, None]), axis=1))) ** 2)


NO_REFERENCE.update({adc_ops_softmax, adc_ops_logsumexp})
# what NumPy runs in place of a function that calls adc.ops
NUMPY_VERSION = {adc_ops_softmax: _softmax_reference, adc_ops_logsumexp: _logsumexp_reference}
