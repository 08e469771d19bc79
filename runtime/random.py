"""The counter-based generator of the random ops: Philox4x32-10 (Salmon et al., "Parallel
random numbers: as easy as 1, 2, 3", SC 2011; the generator of cuRAND and of Random123),
written with unsigned integer array arithmetic so that NumPy and CuPy compute the same bits.

A draw is a pure function of a key and an element index, never of a hidden state:

* a **key** is two 32-bit words, held as an ``i64[2]`` array (each word in [0, 2**32)). The
  key of a run is made from its seed (`seed_key`); `fold` derives a new key from a key, a
  64-bit number (a training step, a loop's iteration index, a call site) and a 32-bit site,
  so that a step, an iteration and a call each draw from keys of their own;
* an op draws from the key ``philox((site, 0, 0, DRAW), key)[:2]`` (its site: a 32-bit
  number naming the op in the program) and gives element ``e`` of its result the words of
  counter ``(e // L, 0, 0, 0)``, ``L`` elements per block of four words.

Bits to floats: f32 and f16 take one word per element (``w >> 8`` times 2**-24, or ``w >>
21`` times 2**-11 for f16: exact, below 1); f64 takes two (53 bits, as NumPy's
``random_sample``). `normal` is Box-Muller in f64 on two 53-bit uniforms per pair of
elements. Integer arithmetic gives the same bits on every device; `normal`'s log, sqrt,
cos and sin are the device's, so it may differ in the last bit of f64 between them.
"""
from __future__ import annotations

import math

M32 = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57          # the round multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85          # the key schedule's increments (Weyl sequence)
ROUNDS = 10
FOLD, DRAW = 0x666F6C64, 0x64726177        # counter words that keep folds and draws apart
KEY_INPUT = "rng_key"                      # the input that carries a program's key


def philox(c0, c1, c2, c3, k0: int, k1: int, xp):
    """Philox4x32-10 of the counters ``(c0, c1, c2, c3)`` (uint64 arrays of one shape, each
    value below 2**32) under the key ``(k0, k1)``: four uint64 arrays of 32-bit words."""
    u64 = xp.uint64
    m32, m0, m1 = u64(M32), u64(_M0), u64(_M1)
    s32 = u64(32)
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + _W0) & M32, (k1 + _W1) & M32
        p0, p1 = c0 * m0, c2 * m1        # 32 x 32 -> 64 bits: exact in uint64
        c0, c1, c2, c3 = ((p1 >> s32) ^ c1 ^ u64(k0), p1 & m32,
                          (p0 >> s32) ^ c3 ^ u64(k1), p0 & m32)
    return c0, c1, c2, c3


def seed_key(seed: int) -> list[int]:
    """The key of a seed (an integer in [0, 2**64)): its two 32-bit halves."""
    seed = int(seed)
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"a seed must be an integer in [0, 2**64), got {seed}")
    return [seed & M32, seed >> 32]


def _words(key) -> tuple[int, int]:
    k = [int(v) for v in (key.tolist() if hasattr(key, "tolist") else key)]
    return k[0] & M32, k[1] & M32


def _block(xp, words, k0: int, k1: int):
    return philox(*(xp.asarray([w], dtype=xp.uint64) for w in words), k0, k1, xp)


def fold(xp, key, data, site: int):
    """The key derived from `key` by the 64-bit number `data` at `site` (an ``i64[2]``)."""
    k0, k1 = _words(key)
    d = int(data) & ((1 << 64) - 1)
    out = _block(xp, (d & M32, d >> 32, site & M32, FOLD), k0, k1)
    return xp.concatenate(out[:2]).astype(xp.int64)


def _op_key(xp, key, site: int) -> tuple[int, int]:
    w = _block(xp, (site & M32, 0, 0, DRAW), *_words(key))
    return int(w[0][0]), int(w[1][0])


def bits(xp, key, site: int, n: int, per_block: int):
    """The words of the first ``ceil(n / per_block)`` blocks of the op at `site`: a uint64
    array of shape [blocks, 4]."""
    k0, k1 = _op_key(xp, key, site)
    blocks = -(-n // per_block)
    j = xp.arange(blocks, dtype=xp.uint64)
    zero = xp.zeros(blocks, dtype=xp.uint64)
    return xp.stack(philox(j & xp.uint64(M32), j >> xp.uint64(32), zero, zero, k0, k1, xp),
                    axis=1)


def _u53(hi, lo, xp):
    """53-bit uniforms in [0, 1) from two words (NumPy's construction)."""
    return ((hi >> xp.uint64(5)).astype(xp.float64) * 67108864.0
            + (lo >> xp.uint64(6)).astype(xp.float64)) * (1.0 / 9007199254740992.0)


def _u24(xp, key, site: int, n: int):
    """n uniforms k * 2**-24 in [0, 1) in f64, one word each (exact)."""
    w = bits(xp, key, site, n, 4).reshape(-1)[:n]
    return (w >> xp.uint64(8)).astype(xp.float64) * (1.0 / 16777216.0)


def uniform(xp, key, site: int, shape, dtype: str):
    n = math.prod(shape)
    np_dtype = {"f16": xp.float16, "f32": xp.float32, "f64": xp.float64}[dtype]
    if dtype == "f64":
        w = bits(xp, key, site, n, 2)
        u = xp.stack([_u53(w[:, 0], w[:, 1], xp), _u53(w[:, 2], w[:, 3], xp)], axis=1)
        return u.reshape(-1)[:n].reshape(shape)
    w = bits(xp, key, site, n, 4).reshape(-1)[:n]
    shift, scale = (21, 2.0 ** -11) if dtype == "f16" else (8, 2.0 ** -24)
    u = (w >> xp.uint64(shift)).astype(xp.float64) * scale   # exact in the target dtype
    return u.astype(np_dtype).reshape(shape)


def normal(xp, key, site: int, shape, dtype: str):
    n = math.prod(shape)
    w = bits(xp, key, site, n, 2)
    u1 = 1.0 - _u53(w[:, 0], w[:, 1], xp)          # (0, 1]: its log is finite
    u2 = _u53(w[:, 2], w[:, 3], xp)
    r = xp.sqrt(-2.0 * xp.log(u1))
    t = (2.0 * math.pi) * u2
    z = xp.stack([r * xp.cos(t), r * xp.sin(t)], axis=1).reshape(-1)[:n]
    return z.astype({"f16": xp.float16, "f32": xp.float32, "f64": xp.float64}[dtype]) \
        .reshape(shape)


def bernoulli_mask(xp, key, site: int, shape, p: float):
    """A bool array: element e is ``u_e < p`` for the 24-bit uniform u_e of its word."""
    return (_u24(xp, key, site, math.prod(shape)) < float(p)).reshape(shape)
