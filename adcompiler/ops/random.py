"""Random ops: `uniform`, `normal`, `bernoulli` and `dropout`, and `rng_fold`, which derives
keys (tdsl.md section 9; the generator: `adc_runtime.random`, Philox4x32-10).

Every random op takes a key operand (``i64[2]``) and an option ``site``, a 32-bit number
naming the op in its program; its values are a pure function of the key, the site and the
element index. The TDSL front end supplies both: a function that draws gets a trailing
input ``rng_key``, a loop body draws from ``rng_fold(key, i)`` and a call passes
``rng_fold(key, 0)`` at the call's site, so an op in a loop draws anew at each iteration and
two calls of one function draw apart. Since a draw depends on nothing but its operands,
recomputing one (remat, the reverse of a loop) gives the very bits of the first time.

`dropout` is evaluation's identity unless its option ``training`` is set, which the
derivative passes and training steps do (`adcompiler.passes.train_mode`). Its VJP and JVP
apply the same op, key and site to the cotangent or tangent: the mask is drawn again from
its key rather than stored.
"""
from __future__ import annotations

import math
import zlib

from ..diagnostics import ShapeError
from ..ir.types import TensorType
from .batching import unsupported
from .registry import Option, register

KEY = TensorType("i64", (2,))
KEY_INPUT = "rng_key"          # the name of the key input (adc_runtime.random.KEY_INPUT)
IMPLICIT = ("key", "site", "training")   # what the front end supplies, never the program
SITE = Option("site", "int", 0)


def site_of(*parts) -> int:
    """A stable 32-bit site number for a place in a program (e.g. file-free function
    name, line, column): the same program gives the same numbers on every run."""
    return zlib.crc32(":".join(map(str, parts)).encode())


def key_input(fn):
    """The key input of function `fn`, or None when it draws nothing."""
    return next((a for a in fn.args if a.name == KEY_INPUT and a.type == KEY), None)


def _key(t: TensorType, op: str) -> None:
    if t != KEY:
        raise ShapeError(f"{op}: the key must be {KEY}, got {t}")


def _site(attrs, op: str) -> None:
    s = attrs.get("site", 0)
    if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 1 << 32:
        raise ShapeError(f"{op}: site must be an integer in [0, 2**32), got {s!r}")


def _float_dtype(attrs, op: str) -> str:
    d = attrs["dtype"]
    if d not in ("f16", "f32", "f64"):
        raise ShapeError(f"{op} draws floats: dtype must be f16, f32 or f64, got {d}")
    return d


def _draw(op: str):
    def infer(types, attrs):
        _key(types[0], op)
        _site(attrs, op)
        return TensorType(_float_dtype(attrs, op), tuple(attrs["shape"]))
    return infer


def _probability(p, op: str, upper: str) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or \
            p < 0 or (p >= 1 if upper == ")" else p > 1):
        raise ShapeError(f"{op}: p must be a probability in [0, 1{upper}, got {p!r}")
    return float(p)


def _bernoulli(types, attrs):
    _probability(attrs["p"], "bernoulli", "]")
    return _draw("bernoulli")(types, attrs)


def _draw_batch(b, op, args, batched, n):
    """A draw with a shared key gives every example the same values (as JAX's vmap of a
    random function with an unbatched key); a key per example is refused."""
    if batched[0]:
        unsupported(op, "with a key per example (a batched key) is not supported")
    return [b.emit(op.name, args[0], **op.attrs)]


def _draw_flops(op, elements):
    return 40 * elements(op.results[0].type.shape)   # ten Philox rounds per four words


DRAW = dict(operands=("key",), traits=("no_grad",), batch=_draw_batch, flops=_draw_flops,
            fresh=True)
SHAPE = (Option("shape", "shape"), Option("dtype", "dtype", "f32"), SITE)

register("uniform", _draw("uniform"), options=SHAPE, positional=("shape", "dtype"),
         doc="uniform([d, ...], dtype=f32): draws from [0, 1) (24 random bits for f16 and "
             "f32, 53 for f64)", **DRAW)
register("normal", _draw("normal"), options=SHAPE, positional=("shape", "dtype"),
         doc="normal([d, ...], dtype=f32): draws from N(0, 1) (Box-Muller in f64)", **DRAW)
register("bernoulli", _bernoulli, options=(Option("p", "float"),) + SHAPE,
         positional=("p", "shape", "dtype"),
         doc="bernoulli(p, [d, ...], dtype=f32): 1 with probability p, else 0", **DRAW)


def _fold(types, attrs):
    _key(types[0], "rng_fold")
    _site(attrs, "rng_fold")
    if types[1] != TensorType("i64", ()):
        raise ShapeError(f"rng_fold folds an i64 scalar into a key, got {types[1]}")
    return KEY


register("rng_fold", _fold, operands=("key", "data"), options=(SITE,), traits=("no_grad",),
         batch=lambda b, op, args, batched, n: unsupported(op, "of a batched key"),
         flops=lambda op, elements: 40, fresh=True,
         doc="the key derived from a key and an i64 scalar at a site (the front end's "
             "keys of loop iterations and calls)")


# ---- dropout ----------------------------------------------------------------------------

def _dropout(types, attrs):
    x, key = types
    if not x.is_float:
        raise ShapeError(f"dropout expects a float tensor, got {x}")
    _key(key, "dropout")
    _site(attrs, "dropout")
    _probability(attrs["p"], "dropout", ")")
    return x


def _dropout_again(b, op, v):
    return b.emit("dropout", v, op.operands[1], **op.attrs)


def _dropout_batch(b, op, args, batched, n):
    """The mask of one example, shared by all (what vmap of one call draws)."""
    x, key = args
    if batched[1]:
        unsupported(op, "with a key per example (a batched key) is not supported")
    if not op.attrs.get("training"):
        return [x]
    one = b.emit("ones", shape=op.operands[0].type.shape, dtype=x.type.dtype)
    return [b.emit("mul", x, b.emit("dropout", one, key, **op.attrs))]


register("dropout", _dropout, operands=("x", "key"),
         options=(Option("p", "float"), SITE, Option("training", "bool", False)),
         positional=("x", "p"), traits=("linear",),
         vjp=lambda b, op, cts: [_dropout_again(b, op, cts[0]), None],
         jvp=lambda b, op, ts: [None if ts[0] is None else _dropout_again(b, op, ts[0])],
         batch=_dropout_batch, flops=lambda op, elements: 42 * elements(
             op.results[0].type.shape), fresh=lambda op: bool(op.attrs.get("training")),
         doc="dropout(x, p): in training, x / (1 - p) where a Bernoulli(1 - p) mask keeps "
             "it, else 0; in evaluation, x")
