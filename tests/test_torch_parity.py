"""Parity with PyTorch, op by op, through ``adc run`` (the CLI path users take).

Each case applies one TDSL op (with broadcasting, options and values at its kinks) and is
checked four ways against PyTorch:

* ``rev64`` / ``rev32``: ``--mode reverse`` of ``sum(EXPR * w)`` (a random weighting, so the
  whole Jacobian is covered) declared in f64 / f32: the value and every gradient against
  autograd in the same dtype (f32 results must stay f32);
* ``jvp``: ``--mode jvp`` of ``EXPR`` itself in f64: the values elementwise and the tangent
  against ``torch.func.jvp``;
* ``hvp``: ``--mode hvp`` of the weighted sum in f64: the gradient and the Hessian-vector
  product against double backward.

Ops with a non-float result (comparisons, ``arange``, integer casts) are compared by value
with ``--mode forward``. Where the spec fixes a convention that PyTorch does not share, the
reference follows the spec and says so next to the case.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch_ref import (NP_DTYPES, adc_run, assert_close, strict_dtypes,  # noqa: E402,F401
                       to_torch, torch_hvp, torch_jvp, torch_value_and_grad)

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning",  # inside torch.func.jvp
    "ignore:invalid value encountered:RuntimeWarning")               # NaN cases (pow)
torch.set_num_threads(1)  # tiny tensors: thread start-up costs more than it saves


# ---- inputs ---------------------------------------------------------------------------

def _gen(kind, shape, rng):
    """Input data in float64 (or int64/bool) of one of the kinds the cases name."""
    n = int(np.prod(shape))
    if isinstance(kind, np.ndarray):
        return kind.reshape(shape)
    if kind == "n":                     # standard normal
        return rng.standard_normal(shape)
    if kind == "pos":                   # away from 0 and from the singular points of log etc.
        return rng.uniform(0.5, 2.0, shape)
    if kind == "unit":                  # probabilities away from 0 and 1
        return rng.uniform(0.05, 0.95, shape)
    if kind == "nz":                    # either sign, away from 0
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)
    if kind == "kink":                  # normal with exact zeros (kinks of relu, abs, sign)
        x = rng.standard_normal(n)
        x[::3] = 0.0
        return x.reshape(shape)
    if kind == "ties":                  # few distinct values, exact in f32: ties and zeros
        return rng.integers(-2, 3, shape) * 0.5
    if kind == "wide":                  # gelu, softplus, sigmoid over a wide range
        return rng.uniform(-15.0, 15.0, shape)
    if kind == "huge":                  # magnitudes up to 1e4 (spec §5) mixed with small ones
        x = rng.choice([-1.0, 1.0], shape) * rng.uniform(1e3, 1e4, shape)
        x.flat[::2] = rng.standard_normal(x.size)[::2]
        return x
    if kind == "simplex":               # probability rows along the last axis
        p = rng.uniform(0.1, 1.0, shape)
        return p / p.sum(axis=-1, keepdims=True)
    if kind == "bool":
        return rng.random(shape) < 0.5
    if kind.startswith("int:"):         # class indices in [0, K)
        return rng.integers(0, int(kind[4:]), shape).astype(np.int64)
    raise ValueError(kind)


@dataclass
class Case:
    """``EXPR`` over named inputs (``{T}`` stands for the float dtype) and its torch
    reference, a function of a dict of tensors. `params`: the differentiated inputs
    (default: every float input); `modes`: which checks run."""

    id: str
    expr: str
    inputs: dict
    ref: Callable
    params: tuple | None = None
    modes: tuple = ("rev64", "rev32", "jvp", "hvp")
    _data: dict = field(default_factory=dict, repr=False)

    def data(self) -> dict:
        if not self._data:
            rng = np.random.default_rng(sum(map(ord, self.id)))
            self._data.update({k: _gen(kind, shape, rng)
                               for k, (shape, kind) in self.inputs.items()})
        return self._data

    def float_inputs(self) -> list[str]:
        return [k for k, v in self.data().items() if v.dtype.kind == "f"]

    def wrt(self) -> list[str]:
        return list(self.params) if self.params is not None else self.float_inputs()


def _shape(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _tdsl_dtype(a: np.ndarray, T: str) -> str:
    return {"f": T, "b": "bool", "i": "i64" if a.dtype.itemsize == 8 else "i32"}[a.dtype.kind]


def inputs_as(case: Case, T: str) -> dict:
    return {k: v.astype(NP_DTYPES[T]) if v.dtype.kind == "f" else v
            for k, v in case.data().items()}


def reference_out(case: Case, T: str):
    with torch.no_grad():
        return case.ref(to_torch(inputs_as(case, T)))


def program(case: Case, T: str, weighted: bool) -> str:
    """``def f(...) -> ... { return EXPR }`` or, `weighted`, ``sum((EXPR) * w)``."""
    wrt = case.wrt()
    args = [f"{'param ' if k in wrt else ''}{k}: {_tdsl_dtype(v, T)}{_shape(v.shape)}"
            for k, v in case.data().items()]
    out = reference_out(case, T)
    expr = case.expr.replace("{T}", T)
    if weighted:
        args.append(f"w: {T}{_shape(out.shape)}")
        return f"def f({', '.join(args)}) -> {T} {{\n    return sum(({expr}) * w)\n}}\n"
    rdt = {torch.bool: "bool", torch.int64: "i64", torch.int32: "i32"}.get(out.dtype, T)
    return f"def f({', '.join(args)}) -> {rdt}{_shape(out.shape)} {{\n    return {expr}\n}}\n"


def weighted_ref(case: Case):
    return lambda t: (case.ref(t) * t["w"]).sum()


def _with_weight(case: Case, T: str) -> dict:
    out = reference_out(case, T)
    w = np.random.default_rng(7).standard_normal(tuple(out.shape))
    return {**inputs_as(case, T), "w": w.astype(NP_DTYPES[T])}


def _tangents(case: Case, T: str = "f64") -> dict:
    rng = np.random.default_rng(99)
    return {k: rng.standard_normal(case.data()[k].shape).astype(NP_DTYPES[T])
            for k in case.wrt()}


# ---- references that torch spells differently -----------------------------------------

def np_index(t, key):
    """``t[key]`` with NumPy basic-indexing semantics, negative steps included (torch has
    no negative-step slices: those axes go through index_select)."""
    axis = 0
    for e in key:
        if isinstance(e, int):
            t = t.select(axis, e)
        else:
            picks = list(range(t.shape[axis]))[e]
            t = t.index_select(axis, torch.tensor(picks, dtype=torch.int64))
            axis += 1
    return t


def take_ref(table, idx, axis=0):
    axis %= table.dim()
    return table[(slice(None),) * axis + (idx,)]


def ce_ref(z, y, axis=-1):
    """cross_entropy(reduction='none') with the class axis `axis` (torch wants it at 1)."""
    axis %= z.dim()
    if z.dim() == 1:
        return F.cross_entropy(z, y, reduction="none")
    z = z.movedim(axis, 1)
    if y.is_floating_point():
        y = y.movedim(axis, 1)
    return F.cross_entropy(z, y, reduction="none")


def ln_ref(x, g, b, axis=-1, eps=1e-5):
    """layernorm over `axis`, with 1-D gamma/beta laid along that axis."""
    x = x.movedim(axis, -1)
    return F.layer_norm(x, (x.shape[-1],), g, b, eps=eps).movedim(-1, axis)


HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.3, 0.7, 0.0])
A23 = {"a": ((2, 3), "n")}


def unary(name, expr, ref, kind="n", shape=(2, 3), **kw):
    return Case(name, expr, {"a": (shape, kind)}, lambda t: ref(t["a"]), **kw)


def binary(name, expr, ref, sa, sb, ka="n", kb="n", **kw):
    return Case(name, expr, {"a": (sa, ka), "b": (sb, kb)}, lambda t: ref(t["a"], t["b"]), **kw)


def gelu_ref(x):
    return F.gelu(x)   # PyTorch's default, approximate="none" (erf), as adc's


def gelu_tanh_ref(x):
    return F.gelu(x, approximate="tanh")


CASES = [
    # ---- elementwise, unary
    unary("neg", "-a", torch.neg),
    unary("exp", "exp(a)", torch.exp),
    unary("log", "log(a)", torch.log, "pos"),
    unary("log1p", "log1p(a)", torch.log1p, "pos"),
    unary("expm1", "expm1(a)", torch.expm1),
    unary("sqrt", "sqrt(a)", torch.sqrt, "pos"),
    unary("rsqrt", "rsqrt(a)", torch.rsqrt, "pos"),
    unary("abs", "abs(a)", torch.abs, "kink"),        # abs'(0) = 0 (spec; torch agrees)
    unary("sign", "sign(a)", torch.sign, "kink"),
    unary("sin", "sin(a)", torch.sin),
    unary("cos", "cos(a)", torch.cos),
    unary("tanh", "tanh(a)", torch.tanh),
    unary("sigmoid", "sigmoid(a)", torch.sigmoid, "wide"),
    unary("relu", "relu(a)", torch.relu, "kink"),     # relu'(0) = 0
    unary("gelu", "gelu(a)", gelu_ref, "n"),
    unary("gelu_wide", "gelu(a)", gelu_ref, "wide"),
    unary("gelu_tanh", 'gelu(a, approximate="tanh")', gelu_tanh_ref, "n"),
    unary("gelu_tanh_wide", 'gelu(a, "tanh")', gelu_tanh_ref, "wide"),
    unary("erf", "erf(a)", torch.erf, "n"),
    # torch's softplus returns x itself above threshold=20; |x| <= 15 here (see report)
    unary("softplus", "softplus(a)", F.softplus, "wide"),
    unary("square", "square(a)", torch.square),
    unary("reciprocal", "reciprocal(a)", torch.reciprocal, "nz"),
    unary("round", "round(a)", torch.round, HALVES, (9,)),   # half to even
    unary("floor", "floor(a)", torch.floor, HALVES, (9,)),
    unary("ceil", "ceil(a)", torch.ceil, HALVES, (9,)),
    unary("leaky_relu", "leaky_relu(a)", F.leaky_relu, "kink"),   # slope at 0, as torch
    unary("leaky_relu_slope", "leaky_relu(a, slope=0.2)", lambda x: F.leaky_relu(x, 0.2),
          "kink"),
    unary("leaky_relu_pos", "leaky_relu(a, 0.3)", lambda x: F.leaky_relu(x, 0.3), "kink"),
    unary("scalar_input", "tanh(a) * 3", lambda x: torch.tanh(x) * 3, "n", ()),
    # ---- clip: gradient to x where lo <= x <= hi (torch.clamp with tensor bounds agrees)
    Case("clip_tensor", "clip(x, lo, hi)",
         {"x": ((2, 3), "ties"), "lo": ((3,), np.array([-0.5, 0.0, -1.0])),
          "hi": ((), np.array(0.5))},
         lambda t: torch.clamp(t["x"], t["lo"], t["hi"])),
    # lo > hi: the result is hi, which gets the whole gradient (torch.clamp agrees)
    Case("clip_crossed", "clip(x, lo, hi)",
         {"x": ((2, 3), "ties"), "lo": ((3,), np.array([0.5, 0.0, 1.0])),
          "hi": ((3,), np.array([-0.5, 0.5, 0.0]))},
         lambda t: torch.clamp(t["x"], t["lo"], t["hi"])),
    Case("clip_literal", "clip(x, -0.5, 0.5)", {"x": ((3, 4), "ties")},
         lambda t: torch.clamp(t["x"], -0.5, 0.5)),
    # ---- binary, broadcasting
    binary("add", "a + b", torch.add, (2, 3), (3,)),
    binary("sub", "a - b", torch.sub, (2, 1), (1, 3)),
    binary("mul", "a * b", torch.mul, (2, 3), ()),
    binary("div", "a / b", torch.div, (2, 3), (2, 1), kb="nz"),
    binary("literal_arith", "2 * a - b / 4 + 1", lambda a, b: 2 * a - b / 4 + 1, (2, 3), (3,)),
    binary("rsub_literal", "1 - a * b", lambda a, b: 1 - a * b, (3,), (2, 3)),
    binary("pow", "a ** b", torch.pow, (2, 3), (3,), ka="pos"),
    binary("pow_scalar_base", "a ** b", torch.pow, (), (2, 3), ka="pos"),
    # a negative base with integer-valued exponents: values and d/da are finite; d/db is
    # NaN where a < 0 (log of a negative number) in both
    Case("pow_negative_base", "a ** b", {"a": ((2, 3), "nz"),
                                         "b": ((3,), np.array([2.0, 3.0, -1.0]))},
         lambda t: t["a"] ** t["b"], params=("a",)),
    Case("pow_negative_base_db", "a ** b", {"a": ((2, 3), "nz"),
                                            "b": ((3,), np.array([2.0, 3.0, -1.0]))},
         lambda t: t["a"] ** t["b"], modes=("rev64", "rev32", "jvp")),
    Case("pow_int_exponent", "a ** n", {"a": ((2, 3), "nz"), "n": ((3,), np.array([0, 2, 3]))},
         lambda t: t["a"] ** t["n"]),
    Case("pow_int_base", "n ** a", {"n": ((3,), np.array([2, 3, 1])), "a": ((2, 3), "n")},
         lambda t: t["n"] ** t["a"]),
    unary("pow_literal_2", "a ** 2", lambda x: x ** 2, "kink"),
    unary("pow_literal_3", "a ** 3", lambda x: x ** 3, "n"),
    unary("pow_literal_half", "a ** 0.5", lambda x: x ** 0.5, "pos"),
    unary("pow_literal_0", "a ** 0", lambda x: x ** 0, "kink"),   # d/da = 0, also at a = 0
    unary("pow_literal_base", "2 ** a", lambda x: 2 ** x, "n"),
    # 0 ** 0 = 1 with d/da = 0 (torch and JAX) and d/db = 0 (log(0) read as 0). Torch's
    # double backward is NaN wherever a == 0 (its masked log(0)); see test_pow_hvp_at_zero
    Case("pow_zero_zero", "a ** b", {"a": ((4,), np.array([0.0, 0.0, 1.5, 0.0])),
                                     "b": ((4,), np.array([0.0, 2.0, 0.0, 1.0]))},
         lambda t: t["a"] ** t["b"], modes=("rev64", "rev32", "jvp")),
    # a zero exponent: torch's Hessian loses d2/dbda there (test_pow_hvp_zero_exponent),
    # so its hvp is compared with respect to a alone
    Case("pow_zero_exponent", "a ** b", {"a": ((2, 3), "pos"),
                                         "b": ((3,), np.array([0.0, 1.0, 0.0]))},
         lambda t: t["a"] ** t["b"], modes=("rev64", "rev32", "jvp")),
    Case("pow_zero_exponent_wrt_a", "a ** b", {"a": ((2, 3), "pos"),
                                               "b": ((3,), np.array([0.0, 1.0, 0.0]))},
         lambda t: t["a"] ** t["b"], params=("a",), modes=("hvp",)),
    binary("maximum", "maximum(a, b)", torch.maximum, (3, 4), (3, 4), "ties", "ties"),
    binary("minimum", "minimum(a, b)", torch.minimum, (3, 4), (3, 4), "ties", "ties"),
    binary("maximum_bcast", "maximum(a, b)", torch.maximum, (3, 4), (4,), "ties", "ties"),
    binary("minimum_bcast", "minimum(a, b)", torch.minimum, (3, 1), (1, 4), "ties", "ties"),
    unary("maximum_literal", "maximum(a, 0.0)",
          lambda x: torch.maximum(x, torch.zeros((), dtype=x.dtype)), "kink"),
    Case("where", "where(c, a, b)", {"c": ((2, 3), "bool"), "a": ((2, 3), "n"),
                                     "b": ((3,), "n")},
         lambda t: torch.where(t["c"], t["a"], t["b"])),
    Case("where_bcast_cond", "where(a > b, a * 2, b)", {"a": ((2, 3), "ties"),
                                                        "b": ((2, 1), "ties")},
         lambda t: torch.where(t["a"] > t["b"], t["a"] * 2, t["b"])),
    Case("where_bcast_all", "where(c, a, b)", {"c": ((3,), "bool"), "a": ((2, 1), "n"),
                                               "b": ((), "n")},
         lambda t: torch.where(t["c"], t["a"], t["b"])),
    Case("where_literal", "where(a < 0.0, 0.0, a)", A23,
         lambda t: torch.where(t["a"] < 0, 0.0, t["a"])),
    # ---- comparisons (no grad): values only
    *[binary(f"cmp_{n}", f"a {op} b", fn, (3, 4), (4,), "ties", "ties", modes=("fwd",))
      for n, op, fn in [("lt", "<", torch.lt), ("le", "<=", torch.le), ("gt", ">", torch.gt),
                        ("ge", ">=", torch.ge), ("eq", "==", torch.eq),
                        ("ne", "!=", torch.ne)]],
    unary("count_true", "sum(a > 0.0)", lambda x: (x > 0).sum(), "kink", modes=("fwd",)),
    # ---- reductions
    *[Case(f"{n}_{tag}", f"{n}(x{opt})", {"x": ((2, 3, 4), kind)},
           (lambda fn, kw: lambda t: fn(t["x"], **kw))(fn, kw))
      for n, fn, kind in [("sum", torch.sum, "n"), ("mean", torch.mean, "n"),
                          ("max", torch.amax, "ties"), ("min", torch.amin, "ties"),
                          ("logsumexp", torch.logsumexp, "n")]
      for tag, opt, kw in [("all", "", dict(dim=(0, 1, 2))),
                           ("ax1", ", axis=1", dict(dim=1)),
                           ("axneg", ", axis=-1", dict(dim=-1)),
                           ("ax02k", ", axis=[0, 2], keepdims=true",
                            dict(dim=(0, 2), keepdim=True)),
                           ("ax1k", ", 1, true", dict(dim=1, keepdim=True))]],
    Case("sum_axes_neg", "sum(x, axis=[-1, 0])", {"x": ((2, 3, 4), "n")},
         lambda t: t["x"].sum(dim=(-1, 0))),
    Case("max_all_keep", "max(x, keepdims=true)", {"x": ((2, 3, 4), "ties")},
         lambda t: torch.amax(t["x"], dim=(0, 1, 2), keepdim=True)),
    # var is the population variance: torch's correction=0
    *[Case(f"var_{tag}", f"var(x{opt})", {"x": ((2, 3, 4), "n")},
           (lambda kw: lambda t: torch.var(t["x"], correction=0, **kw))(kw))
      for tag, opt, kw in [("all", "", dict()), ("ax1", ", axis=1", dict(dim=1)),
                           ("ax02k", ", axis=[0, 2], keepdims=true",
                            dict(dim=(0, 2), keepdim=True))]],
    # max/min over all-tied rows: the gradient is split among the ties (torch.amax too)
    Case("max_all_tied", "max(x, axis=1)", {"x": ((2, 4), np.array([1.0] * 4 + [0, 2, 2, 1]))},
         lambda t: torch.amax(t["x"], dim=1)),
    # ---- linear algebra
    binary("matmul_2d", "a @ b", torch.matmul, (2, 3), (3, 4)),
    binary("matmul_1d_2d", "a @ b", torch.matmul, (3,), (3, 4)),
    binary("matmul_2d_1d", "a @ b", torch.matmul, (2, 3), (3,)),
    binary("matmul_1d_1d", "a @ b", torch.matmul, (3,), (3,)),
    binary("matmul_batched", "a @ b", torch.matmul, (2, 3, 4), (4, 5)),
    binary("matmul_bcast_batch", "a @ b", torch.matmul, (2, 1, 3, 4), (5, 4, 2)),
    binary("matmul_1d_3d", "a @ b", torch.matmul, (4,), (2, 4, 3)),
    binary("matmul_3d_1d", "a @ b", torch.matmul, (2, 3, 4), (4,)),
    unary("transpose", "transpose(a)", lambda x: x.permute(2, 1, 0), "n", (2, 3, 4)),
    unary("transpose_perm", "transpose(a, [1, 0, 2])", lambda x: x.permute(1, 0, 2), "n",
          (2, 3, 4)),
    unary("transpose_neg_perm", "transpose(a, [-1, 0, 1])", lambda x: x.permute(2, 0, 1),
          "n", (2, 3, 4)),
    unary("transpose_2d", "transpose(a)", lambda x: x.T, "n", (2, 3)),
    *[Case(f"einsum_{i}", f'einsum("{spec}", {", ".join(names)})',
           {n: (s, "n") for n, s in zip(names, shapes)},
           (lambda spec, names: lambda t: torch.einsum(spec, *(t[n] for n in names)))(
               spec, names))
      for i, (spec, names, shapes) in enumerate([
          ("ij,jk->ik", "ab", [(2, 3), (3, 4)]),
          ("bij,bjk->bik", "ab", [(2, 3, 4), (2, 4, 2)]),
          ("i,i->", "ab", [(3,), (3,)]),
          ("ij->ji", "a", [(2, 3)]),
          ("ij->j", "a", [(2, 3)]),
          ("ij,k->ijk", "ab", [(2, 3), (4,)]),
          ("ijk,ik->j", "ab", [(2, 3, 4), (2, 4)]),
          ("ij,jk,kl->il", "abc", [(2, 3), (3, 4), (4, 2)]),
          ("ij,jk->i", "ab", [(2, 3), (3, 4)]),
          ("ij,jk->ki", "ab", [(2, 3), (3, 4)]),
          ("bi,bi->b", "ab", [(3, 4), (3, 4)]),
      ])],
    # ---- shape
    unary("reshape", "reshape(a, [3, -1])", lambda x: x.reshape(3, -1), "n", (2, 3, 2)),
    unary("reshape_flat", "reshape(a, [-1])", lambda x: x.reshape(-1), "n", (2, 3)),
    unary("broadcast_to", "broadcast_to(a, [2, 4, 3])", lambda x: x.broadcast_to(2, 4, 3),
          "n", (4, 1)),
    unary("expand_dims", "expand_dims(a, 0)", lambda x: x.unsqueeze(0)),
    unary("expand_dims_neg", "expand_dims(a, -1)", lambda x: x.unsqueeze(-1)),
    unary("expand_dims_mid", "expand_dims(a, axis=1)", lambda x: x.unsqueeze(1)),
    unary("squeeze", "squeeze(a, 1)", lambda x: x.squeeze(1), "n", (2, 1, 3)),
    unary("squeeze_all", "squeeze(a)", lambda x: x.squeeze(), "n", (1, 2, 1, 3)),
    unary("squeeze_list", "squeeze(a, axis=[0, -2])", lambda x: x.squeeze(0).squeeze(-2),
          "n", (1, 2, 1, 3)),
    binary("concat", "concat([a, b], axis=1)", lambda a, b: torch.cat([a, b], 1),
           (2, 3), (2, 2)),
    binary("concat_default", "concat([a, b, a])", lambda a, b: torch.cat([a, b, a]),
           (2, 3), (1, 3)),
    binary("concat_neg", "concat([a, b], axis=-1)", lambda a, b: torch.cat([a, b], -1),
           (2, 2, 3), (2, 2, 1)),
    binary("stack", "stack([a, b])", lambda a, b: torch.stack([a, b]), (2, 3), (2, 3)),
    binary("stack_ax1", "stack([a, b, a], axis=1)", lambda a, b: torch.stack([a, b, a], 1),
           (2, 3), (2, 3)),
    binary("stack_neg", "stack([a, b], axis=-1)", lambda a, b: torch.stack([a, b], -1),
           (2, 3), (2, 3)),
    *[unary(f"index_{i}", f"a[{text}]", (lambda key: lambda x: np_index(x, key))(key), "n",
            shape)
      for i, (text, key, shape) in enumerate([
          ("1", (1,), (3, 4)),
          ("-1", (-1,), (3, 4)),
          (":, 1:3", (slice(None), slice(1, 3)), (3, 4)),
          ("::-1", (slice(None, None, -1),), (3, 4)),
          (":, ::-2", (slice(None), slice(None, None, -2)), (3, 4)),
          ("1:, -1", (slice(1, None), -1), (3, 4)),
          ("::2, 1", (slice(None, None, 2), 1), (3, 4)),
          ("0, :, 1:3", (0, slice(None), slice(1, 3)), (2, 3, 4)),
          ("-2:", (slice(-2, None),), (3, 4)),
          ("3:0:-1, 2::-2", (slice(3, 0, -1), slice(2, None, -2)), (4, 4)),
          ("-1:-4:-2", (slice(-1, -4, -2),), (5,)),
          ("1, 2", (1, 2), (3, 4)),
      ])],
    # ---- neural nets
    unary("softmax", "softmax(a)", lambda x: torch.softmax(x, -1), "n", (3, 4)),
    unary("softmax_ax0", "softmax(a, axis=0)", lambda x: torch.softmax(x, 0), "n", (3, 4)),
    unary("softmax_ax1", "softmax(a, 1)", lambda x: torch.softmax(x, 1), "n", (2, 3, 4)),
    unary("log_softmax", "log_softmax(a)", lambda x: torch.log_softmax(x, -1), "n", (3, 4)),
    unary("log_softmax_ax0", "log_softmax(a, axis=0)", lambda x: torch.log_softmax(x, 0),
          "n", (3, 4)),
    unary("log_softmax_ax1", "log_softmax(a, axis=1)", lambda x: torch.log_softmax(x, 1),
          "n", (2, 3, 4)),
    Case("ce_int", "cross_entropy(z, y)", {"z": ((4, 5), "n"), "y": ((4,), "int:5")},
         lambda t: ce_ref(t["z"], t["y"])),
    Case("ce_int_1d", "cross_entropy(z, y)", {"z": ((5,), "n"), "y": ((), "int:5")},
         lambda t: ce_ref(t["z"], t["y"])),
    Case("ce_int_3d", "cross_entropy(z, y, axis=-1)",
         {"z": ((2, 3, 5), "n"), "y": ((2, 3), "int:5")}, lambda t: ce_ref(t["z"], t["y"])),
    Case("ce_int_ax1", "cross_entropy(z, y, axis=1)",
         {"z": ((2, 5, 3), "n"), "y": ((2, 3), "int:5")}, lambda t: ce_ref(t["z"], t["y"], 1)),
    Case("ce_int_ax0", "cross_entropy(z, y, 0)", {"z": ((5, 4), "n"), "y": ((4,), "int:5")},
         lambda t: ce_ref(t["z"], t["y"], 0)),
    Case("ce_prob", "cross_entropy(z, p)", {"z": ((4, 5), "n"), "p": ((4, 5), "simplex")},
         lambda t: ce_ref(t["z"], t["p"])),
    Case("ce_prob_unnormalized", "cross_entropy(z, p)",
         {"z": ((4, 5), "n"), "p": ((4, 5), "unit")}, lambda t: ce_ref(t["z"], t["p"])),
    Case("ce_prob_ax0", "cross_entropy(z, p, axis=0)",
         {"z": ((5, 4), "n"), "p": ((5, 4), "unit")}, lambda t: ce_ref(t["z"], t["p"], 0)),
    Case("ce_mean", "mean(cross_entropy(z, y))", {"z": ((4, 5), "n"), "y": ((4,), "int:5")},
         lambda t: F.cross_entropy(t["z"], t["y"])),
    # torch's binary_cross_entropy clamps log at -100; p stays inside (0.05, 0.95) here
    Case("bce", "bce(a, b)", {"a": ((2, 3), "unit"), "b": ((2, 3), "unit")},
         lambda t: F.binary_cross_entropy(t["a"], t["b"], reduction="none")),
    Case("bce_bcast", "bce(a, b)", {"a": ((2, 3), "unit"), "b": ((3,), "unit")},
         lambda t: F.binary_cross_entropy(t["a"], t["b"].expand(2, 3), reduction="none")),
    Case("bce_hard_labels", "bce(a, b)",
         {"a": ((2, 3), "unit"), "b": ((2, 3), np.array([0.0, 1, 1, 0, 1, 0]))},
         lambda t: F.binary_cross_entropy(t["a"], t["b"], reduction="none"), params=("a",)),
    Case("bce_with_logits", "bce_with_logits(z, y)", {"z": ((2, 3), "wide"),
                                                      "y": ((2, 3), "unit")},
         lambda t: F.binary_cross_entropy_with_logits(t["z"], t["y"], reduction="none")),
    Case("bce_with_logits_bcast", "bce_with_logits(z, y)", {"z": ((2, 3), "n"),
                                                            "y": ((3,), "unit")},
         lambda t: F.binary_cross_entropy_with_logits(t["z"], t["y"].expand(2, 3),
                                                      reduction="none")),
    binary("mse", "mse(a, b)", F.mse_loss, (2, 3), (2, 3)),
    binary("mse_bcast", "mse(a, b)", lambda a, b: ((a - b) ** 2).mean(), (2, 3), (3,)),
    Case("layernorm", "layernorm(x, g, b)", {"x": ((2, 3, 4), "n"), "g": ((4,), "n"),
                                             "b": ((4,), "n")},
         lambda t: F.layer_norm(t["x"], (4,), t["g"], t["b"])),
    Case("layernorm_1d", "layernorm(x, g, b)", {"x": ((5,), "n"), "g": ((5,), "n"),
                                                "b": ((5,), "n")},
         lambda t: F.layer_norm(t["x"], (5,), t["g"], t["b"])),
    Case("layernorm_eps", "layernorm(x, g, b, eps=0.001)",
         {"x": ((3, 4), "n"), "g": ((4,), "n"), "b": ((4,), "n")},
         lambda t: F.layer_norm(t["x"], (4,), t["g"], t["b"], eps=1e-3)),
    Case("layernorm_ax1", "layernorm(x, g, b, axis=1)",
         {"x": ((2, 3, 4), "n"), "g": ((3,), "n"), "b": ((3,), "n")},
         lambda t: ln_ref(t["x"], t["g"], t["b"], axis=1)),
    Case("layernorm_bcast_gamma", "layernorm(x, g, b)",
         {"x": ((2, 3, 4), "n"), "g": ((3, 4), "n"), "b": ((1, 4), "n")},
         lambda t: F.layer_norm(t["x"], (4,)) * t["g"] + t["b"]),
    Case("take", "take(tab, idx)", {"tab": ((5, 3), "n"),
                                    "idx": ((4,), np.array([1, 3, 1, 4]))},
         lambda t: torch.index_select(t["tab"], 0, t["idx"])),
    Case("take_2d_idx_ax1", "take(tab, idx, axis=1)",
         {"tab": ((3, 5), "n"), "idx": ((2, 2), np.array([[0, 4], [4, 2]]))},
         lambda t: take_ref(t["tab"], t["idx"], 1)),
    Case("take_ax_neg", "take(tab, idx, -1)",
         {"tab": ((2, 3, 4), "n"), "idx": ((3,), np.array([3, 0, 3]))},
         lambda t: take_ref(t["tab"], t["idx"], -1)),
    Case("take_negative_idx", "take(tab, idx)",       # NumPy's take wraps negatives
         {"tab": ((5, 3), "n"), "idx": ((3,), np.array([-1, 0, -1]))},
         lambda t: take_ref(t["tab"], t["idx"])),
    Case("take_scalar_idx", "take(tab, idx)", {"tab": ((5, 3), "n"), "idx": ((), "int:5")},
         lambda t: take_ref(t["tab"], t["idx"])),
    Case("one_hot", "one_hot(idx, 4, dtype={T}) * a",
         {"idx": ((3,), np.array([0, 3, 3])), "a": ((3, 4), "n")},
         lambda t: F.one_hot(t["idx"], 4).to(t["a"].dtype) * t["a"]),
    Case("one_hot_i64", "one_hot(idx, 4, dtype=i64)", {"idx": ((2, 3), "int:4")},
         lambda t: F.one_hot(t["idx"], 4), modes=("fwd",)),
    # ---- finite values and derivatives at magnitudes up to 1e4 (spec §5), f32 included
    unary("huge_sigmoid", "sigmoid(a)", torch.sigmoid, "huge", (3, 4)),
    unary("huge_softplus", "softplus(a)", F.softplus, "huge", (3, 4)),
    unary("huge_logsumexp", "logsumexp(a, axis=1)", lambda x: torch.logsumexp(x, 1),
          "huge", (3, 4)),
    unary("huge_softmax", "softmax(a)", lambda x: torch.softmax(x, -1), "huge", (3, 4)),
    unary("huge_log_softmax", "log_softmax(a, axis=0)", lambda x: torch.log_softmax(x, 0),
          "huge", (3, 4)),
    Case("huge_ce", "cross_entropy(z, y)", {"z": ((3, 4), "huge"), "y": ((3,), "int:4")},
         lambda t: ce_ref(t["z"], t["y"])),
    Case("huge_ce_prob", "cross_entropy(z, p)", {"z": ((3, 4), "huge"),
                                                 "p": ((3, 4), "simplex")},
         lambda t: ce_ref(t["z"], t["p"])),
    Case("huge_bce_with_logits", "bce_with_logits(z, y)", {"z": ((3, 4), "huge"),
                                                           "y": ((3, 4), "unit")},
         lambda t: F.binary_cross_entropy_with_logits(t["z"], t["y"], reduction="none")),
    unary("huge_gelu", "gelu(a)", gelu_ref, "huge", (3, 4)),
    unary("huge_gelu_tanh", 'gelu(a, approximate="tanh")', gelu_tanh_ref, "huge", (3, 4)),
    # ---- derivatives, dtype
    binary("stop_gradient", "stop_gradient(a) * b + a * stop_gradient(a)",
           lambda a, b: a.detach() * b + a * a.detach(), (2, 3), (3,)),
    unary("cast_f16", "cast(cast(a, f16), {T}) * a", lambda x: x.half().to(x.dtype) * x),
    # f32 programs may compute in f64 in between; in f64 the casts are identities
    unary("cast_f64_inside", "cast(cast(a, f64) * cast(a, f64), {T}) + a",
          lambda x: (x.double() * x.double()).to(x.dtype) + x),
    unary("cast_i64", "cast(a * 3.0, i64)", lambda x: (x * 3).to(torch.int64),
          modes=("fwd",)),
    unary("cast_int_back", "cast(cast(a * 3.0, i32), {T}) * a",
          lambda x: (x * 3).to(torch.int32).to(x.dtype) * x),
    # ---- constructors
    unary("full", "a * full([2, 3], 2.5, dtype={T})",
          lambda x: x * torch.full((2, 3), 2.5, dtype=x.dtype)),
    unary("zeros_ones", "a + zeros([3], dtype={T}) + ones([2, 3], dtype={T}) * a",
          lambda x: x + 1 * x),
    unary("like", "a * zeros_like(a) + ones_like(a) * exp(a)",
          lambda x: x * torch.zeros_like(x) + torch.ones_like(x) * torch.exp(x)),
    unary("arange_cast", "a * cast(arange(3), {T})",
          lambda x: x * torch.arange(3).to(x.dtype)),
    unary("arange_mix_int", "a + arange(3)", lambda x: x + torch.arange(3)),
    Case("arange", "arange(4)", {"a": ((1,), "n")}, lambda t: torch.arange(4), modes=("fwd",)),
    Case("full_int", "full([2], 3, dtype=i64)", {"a": ((1,), "n")},
         lambda t: torch.full((2,), 3, dtype=torch.int64), modes=("fwd",)),
]

MODES = ("rev64", "rev32", "jvp", "hvp", "fwd")
PARAMS = [pytest.param(c, m, id=f"{c.id}-{m}") for c in CASES for m in MODES if m in c.modes]


def test_case_ids_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case,mode", PARAMS)
def test_op_parity(case: Case, mode: str, tmp_path, strict_dtypes):
    if mode == "fwd":
        for T in ("f64", "f32"):
            got = adc_run(tmp_path, program(case, T, False), "forward", inputs_as(case, T))
            assert_close(got["out"], reference_out(case, T).numpy(), T, f"{case.id} {T} value")
        return
    if mode in ("rev64", "rev32"):
        T = "f64" if mode == "rev64" else "f32"
        inputs = _with_weight(case, T)
        got = adc_run(tmp_path, program(case, T, True), "reverse", inputs)
        (value,), grads = torch_value_and_grad(weighted_ref(case), inputs, case.wrt())
        assert_close(got["out"], value, T, f"{case.id} {T} value")
        for w in case.wrt():
            assert_close(got[f"grad_{w}"], grads[w], T, f"{case.id} {T} grad_{w}")
        assert set(got) == {"out"} | {f"grad_{w}" for w in case.wrt()}
        return
    # jvp and hvp run the f32 program with --dtype f64 (as rev64 runs one declared in f64),
    # unless the expression casts to a fixed float width, which --dtype would rewrite
    src_dtype, flag = ("f64", None) if "cast(" in case.expr and ", f" in case.expr \
        else ("f32", "f64")
    if mode == "jvp":
        inputs, tans = inputs_as(case, "f64"), _tangents(case)
        got = adc_run(tmp_path, program(case, src_dtype, False), "jvp", inputs, tangents=tans,
                      dtype=flag)
        (value,), (tangent,) = torch_jvp(case.ref, inputs, case.wrt(), tans)
        assert_close(got["out"], value, "f64", f"{case.id} value")
        assert_close(got["tangent_out"], tangent, "f64", f"{case.id} tangent_out")
        return
    inputs, tans = _with_weight(case, "f64"), _tangents(case)
    got = adc_run(tmp_path, program(case, src_dtype, True), "hvp", inputs, tangents=tans,
                  dtype=flag)
    grads, hvps = torch_hvp(weighted_ref(case), inputs, case.wrt(), tans)
    for w in case.wrt():
        assert_close(got[f"grad_{w}"], grads[w], "f64", f"{case.id} grad_{w}")
        assert_close(got[f"hvp_{w}"], hvps[w], "f64", f"{case.id} hvp_{w}")


def test_pow_hvp_at_zero_base(tmp_path):
    """At a == 0 torch's double backward of a ** b is NaN (the log(0) it masks leaks through
    the mask); adc reads log(0) as 0 there as JAX does, so f = sum(w * a**b) at a = 0, b = 2
    has the finite Hessian of w * a**2: d2/da2 = 2w, d2/dadb = d2/db2 = 0."""
    src = "def f(param a: f64[2], param b: f64[2], w: f64[2]) -> f64 { return sum(a ** b * w) }"
    a, b, w = np.array([0.0, 0.0]), np.array([2.0, 2.0]), np.array([0.5, -1.5])
    va, vb = np.array([1.0, -2.0]), np.array([0.25, 3.0])
    got = adc_run(tmp_path, src, "hvp", {"a": a, "b": b, "w": w}, tangents={"a": va, "b": vb})
    np.testing.assert_array_equal(got["hvp_a"], 2 * w * va)
    np.testing.assert_array_equal(got["hvp_b"], 0 * w)
    _, hvps = torch_hvp(lambda t: (t["a"] ** t["b"] * t["w"]).sum(),
                        {"a": a, "b": b, "w": w}, ["a", "b"], {"a": va, "b": vb})
    assert np.isnan(hvps["a"]).all()   # the documented difference


def test_pow_hvp_zero_exponent(tmp_path):
    """d2(a**b)/dadb = a**(b-1) (1 + b log a) is 1/a at b == 0. Torch's rule for d/da is
    masked to 0 where b == 0, so its double backward drops this term from hvp_b (its Hessian
    is not symmetric there); adc keeps it, as JAX's forward-over-reverse does."""
    src = "def f(param a: f64[2], param b: f64[2], w: f64[2]) -> f64 { return sum(a ** b * w) }"
    a, b, w = np.array([1.5, 2.0]), np.array([0.0, 0.0]), np.array([0.5, -1.5])
    va, vb = np.array([1.0, -2.0]), np.array([0.0, 0.0])
    got = adc_run(tmp_path, src, "hvp", {"a": a, "b": b, "w": w}, tangents={"a": va, "b": vb})
    np.testing.assert_allclose(got["hvp_b"], w * va / a, rtol=1e-15)
    np.testing.assert_array_equal(got["hvp_a"], 0 * w)
    _, hvps = torch_hvp(lambda t: (t["a"] ** t["b"] * t["w"]).sum(),
                        {"a": a, "b": b, "w": w}, ["a", "b"], {"a": va, "b": vb})
    np.testing.assert_array_equal(hvps["b"], 0 * w)   # the documented difference


def test_softplus_above_torch_threshold(tmp_path):
    """Torch's softplus (threshold=20) returns x, with derivative 1, above 20; adc computes
    log(1 + e^x) and its derivative sigmoid(x) without a threshold (as JAX's logaddexp). The
    two differ by e^-x: at most ~2e-9 for x > 20 in f64, nothing in f32."""
    src = "def f(param x: {T}[5]) -> {T} { return sum(softplus(x)) }"
    x = np.array([20.5, 25.0, 30.0, 36.0, 1e4])
    got = adc_run(tmp_path, src.replace("{T}", "f64"), "reverse", {"x": x})
    np.testing.assert_allclose(got["grad_x"], 1 / (1 + np.exp(-x)), rtol=1e-15)
    (_,), grads = torch_value_and_grad(lambda t: F.softplus(t["x"]).sum(), {"x": x}, ["x"])
    assert np.abs(got["grad_x"] - grads["x"]).max() < 2e-9
    assert not np.array_equal(got["grad_x"], grads["x"])
    x32 = x.astype(np.float32)
    got = adc_run(tmp_path, src.replace("{T}", "f32"), "reverse", {"x": x32})
    (value,), grads = torch_value_and_grad(lambda t: F.softplus(t["x"]).sum(), {"x": x32}, ["x"])
    np.testing.assert_array_equal(got["grad_x"], grads["x"])
    assert_close(got["out"], value, "f32", "softplus f32 value")
