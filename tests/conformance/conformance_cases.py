"""The conformance programs of programs/*.tdsl: inputs and a PyTorch reimplementation each."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as Fn

from conformance_harness import Case

f32 = np.float32


def N(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(f32)


def U(rng, lo, hi, *shape):
    return rng.uniform(lo, hi, shape).astype(f32)


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))   # PyTorch's default gelu


def softplus(x):
    return torch.logaddexp(x, torch.zeros_like(x))


def ce(z, lab, axis=-1):
    """Per-example cross-entropy: integer labels or probabilities."""
    lse = torch.logsumexp(z, axis)
    if lab.is_floating_point():
        return -(lab * torch.log_softmax(z, axis)).sum(axis)
    return lse - z.gather(axis, lab.long().unsqueeze(axis)).squeeze(axis)


def var(x, dim=None, keepdim=False):
    if dim is None:
        return torch.var(x, correction=0)
    return torch.var(x, dim, correction=0, keepdim=keepdim)


def layernorm(x, g, b, axis=-1, eps=1e-5):
    axis = axis % x.dim()
    shape = [1] * x.dim()
    shape[axis] = -1
    m = x.mean(axis, keepdim=True)
    v = var(x, axis, keepdim=True)
    return (x - m) / torch.sqrt(v + eps) * g.reshape(shape) + b.reshape(shape)


def bce_logits(z, y):
    return torch.relu(z) - z * y + torch.log1p(torch.exp(-torch.abs(z)))


def ste(x, fwd):
    """A value `fwd(x)` whose derivative is the identity (a straight-through estimator)."""
    return x + (fwd(x) - x).detach()


# ---- references -------------------------------------------------------------------------

def r_precedence(t, F):
    x, w = t["x"], t["w"]
    return -w ** 2 + 0.5 * w * (x - 1) + 2 ** w - w ** 3 / 3 + w + 2 * w + x


def r_multi_function(t, F):
    h = torch.tanh(t["x"] @ t["W"] + t["b"])
    m = h.mean(0)
    return ((h - m) ** 2).sum() + (m * m).sum()


def r_layout(t, F):
    a, b = t["a"], t["b"]
    z = torch.cat([a[0], b])
    return (a * b).sum() + (z ** 2).sum()


def r_where(t, F):
    x, w, mask = t["x"], t["w"], t["mask"]
    a = torch.where(x > 0, w * x, 0.1 * w)
    b = torch.where(x <= w, a, w ** 2)
    c = torch.where(mask, b, -b)
    d = torch.where(x == w, torch.ones_like(c), c)
    e = torch.where(w != 0, d, torch.zeros_like(d))
    k = (x >= 0.5).to(F("f32")) + (x < -0.5).to(F("f32"))
    return (e * (1 + k)).sum()


def r_elementwise_a(t, F):
    x, p = t["x"], t["p"]
    a = torch.exp(x) + torch.log(p) + torch.log1p(p) + torch.expm1(x)
    b = torch.sqrt(p) * torch.rsqrt(p + 1)
    c = torch.abs(x) * torch.sign(x) + torch.sin(x) * torch.cos(p)
    return a + b - c


def r_elementwise_b(t, F):
    x, q = t["x"], t["q"]
    a = torch.tanh(x) * torch.sigmoid(q) + torch.relu(x) + gelu(q)
    b = softplus(x) + q ** 2 + 1 / (q + 3) - x
    c = Fn.leaky_relu(x, 0.01) + Fn.leaky_relu(q, 0.2) + Fn.leaky_relu(x, 0.3)
    d = torch.clamp(x, -0.5, 0.5) + torch.clamp(q, -1, 1)
    return (a * b).sum() + c.sum() + (d * q).sum()


def r_rounding(t, F):
    x, w = t["x"], t["w"]
    return (torch.floor(x) * w + torch.round(w) * x + torch.ceil(w * x) + x * w).sum()


def r_maxmin(t, F):
    a, b = t["a"], t["b"]
    m = torch.maximum(a, b) * 3 + torch.minimum(a, b) * 5
    r = torch.amax(a, 1) * 2 + torch.amin(b, -1)
    return m.sum() + r.sum() + torch.amax(a * b)


def r_reductions(t, F):
    x = t["x"]
    c = torch.amax(x, -1, keepdim=True)
    d = torch.amin(x, (0, 2))
    e = torch.logsumexp(x, (-1, -3), keepdim=True)
    return (x.sum() + (x.mean(1) ** 2).sum() + (c * e).sum() + d.sum()
            + (var(x, 2) * x.mean(2)).sum() + var(x))


def r_matmul(t, F):
    v, M, A, B = t["v"], t["M"], t["A"], t["B"]
    u = M @ v
    return v @ v + u.sum() + ((u @ M) * v).sum() + ((A @ B) ** 2).sum() / 10 + (M @ B).sum()


def r_einsum(t, F):
    a, b, c, d = t["a"], t["b"], t["c"], t["d"]
    p = c.permute(1, 0, 2)
    q = c.permute(2, 0, 1)
    e2 = a @ b @ d
    e3 = torch.einsum("bij,jk->bik", p, d)
    e4 = (a[0] * a[1]).sum()
    e5 = c.permute(2, 1, 0)
    return ((a @ b) ** 2).sum() + e2.sum() + (e3 ** 2).sum() + e4 + (q * e5.permute(0, 2, 1)).sum()


def r_shapes(t, F):
    x, y = t["x"], t["y"]
    r = x.reshape(3, 4)
    s = x.reshape(12)
    b = y.expand(2, 3)
    q = 3 * y
    c = torch.cat([r, y[:, None], y[:, None]], 1)
    v = torch.cat([x, torch.cat([b, b * 2], -1)])
    st = torch.stack([y, q], 1)
    st0 = torch.stack([y, q, y])
    return (c @ x.T).sum() + (v ** 2).sum() + (s * s).sum() + (st * st).sum() + (st0 @ q).sum()


def r_indexing(t, F):
    x, v = t["x"], t["v"]
    a = x[:, 1:3]
    b = v.flip(0)
    d = x[1:3:2, ::2]
    e = v[[4, 2]]
    g = x[0, -2] + x[-1, 0]
    return ((a ** 2).sum() + (b * v).sum() + (x[-1] * x[0]).sum() + d.sum() + (e * e).sum() + g
            + (x[2][1:4] * v[-3:]).sum())


def r_rnn(t, F):
    h = torch.zeros(4, dtype=t["b"].dtype)
    loss = 0
    for i in range(t["xs"].shape[0]):
        h = torch.tanh(t["xs"][i] @ t["Wx"] + h @ t["Wh"] + t["b"])
        loss = loss + (h @ t["wo"] - t["ys"][i]) ** 2
    return loss / 2 + h.sum()


def r_nested(t, F):
    xs, W, c = t["xs"], t["W"], t["c"]
    s = torch.zeros(2, dtype=c.dtype)
    acc = 0 * c.sum()
    for k in range(3):
        for i in range(xs.shape[0]):
            s = torch.sin(s @ W[k] + xs[i] * c)
            acc = acc + s.sum()
        s = s * 0.5
    return acc + (s ** 2).sum()


def r_loop_index(t, F):
    P, q = t["P"], t["q"]
    a, v = 0, q
    for i in range(4):
        w = i + 1.0
        a = a + P[i, 0:2].sum() * w
        v = v * P[i] / w + q
    return a, v


def r_symb(t, F):
    y = (t["x"] + t["b"]) * t["s"] * t["k"]
    return (y ** 2).sum(1) / 3


def r_literals(t, F):
    x, p = t["x"], t["p"]
    a = x * 2 + 1 - p
    b = 2 ** x + x / 2 + 3 - x
    c = 0.5 * x + 1e-3 * p + 25 * x ** 2 + 1.5
    d = (1 - p) * p ** 0.5 / (2 - p)
    return (a * b + c + d).sum() + 7


def r_ce_int(t, F):
    lg = t["z"] @ t["W"]
    return (ce(lg, t["y"]).mean() + ce(t["W"][0:3] * 2, t["y2"][0:3]).sum()
            + ce(lg.T, t["y"], 0).sum())


def r_ce_probs(t, F):
    y = torch.softmax(t["t"], -1)
    return ce(t["z"], y) + ce(t["z"] * 2, y)


def r_take(t, F):
    tab, idx, idx2 = t["table"], t["idx"].long(), t["idx2"]
    rows = tab[idx]
    cols = tab[:, idx2]
    back = tab[idx2]
    return (rows ** 2).sum() + (cols * 3).sum() + torch.sin(back).sum()


def r_one_hot(t, F):
    z, y = t["z"], t["y"]
    oh = Fn.one_hot(y, 4).to(z.dtype)
    ls = torch.log_softmax(z, -1)
    return -(oh * ls).sum() / 2 - (oh * ls).sum() / 2, ce(z, y).sum()


def r_softmax(t, F):
    x, w = t["x"], t["w"]
    a = torch.softmax(x, -1)
    return ((a * w).sum() + (torch.softmax(x, 0) * x).sum()
            + torch.log_softmax(x * w, 0).sum() / 4 + (torch.log_softmax(x, -1) * a).sum())


def r_losses(t, F):
    z, y, tt = t["z"], t["y"], t["t"]
    p = torch.sigmoid(z)
    bce = -(y * torch.log(p) + (1 - y) * torch.log(1 - p))
    return (bce.sum() + bce_logits(2 * z, y).mean() + ((z - tt) ** 2).mean()
            + ((p - y) ** 2).mean())


def r_layernorm(t, F):
    x, g, b, g0 = t["x"], t["g"], t["b"], t["g0"]
    a = layernorm(x, g, b)
    c = layernorm(x, g0, g0 * 0, axis=0)
    d = layernorm(x, g, b, -1, 0.1)
    e = layernorm(x, g, b, eps=1e-3)
    return (a * x).sum() + (c ** 2).sum() + (d * e).sum()


def r_constructors(t, F):
    x = t["x"]
    r = torch.arange(3, dtype=x.dtype)
    return x * 2.5 + 2 * r + 3 * x + x


def r_stop(t, F):
    x, w = t["x"], t["w"]
    s = (x * w).detach()
    return (x * s).sum() + (w.detach() * w ** 2).sum() + s.sum()


def r_casts(t, F):
    x, y, h = t["x"], t["y"], t["h"]
    a = x.to(F("f64")) * y
    b = (x.to(F("f16")) * h).to(F("f32"))
    c = h.to(F("f64")) + y
    return a.sum() + (b * x).sum().to(F("f64")) + (c * c).sum()


def r_custom(t, F):
    x, w = t["x"], t["w"]
    q = ste(x * 4, torch.round) / 4
    p = q * w + (q - q.detach()) * w          # value q*w, d/dq = 2w, d/dw = q
    return (p ** 2).sum() + (ste(w, torch.round) * x).sum()


def r_grad_only(t, F):
    x = t["x"]
    return (ste(x, lambda v: torch.clamp(v, -1, 1)) * x).sum()


def r_force(t, F):
    return -t["k"] * t["x"]


def r_energy(t, F):
    return t["k"] * (t["x"] ** 2).sum() / 2


def r_wrt(t, F):
    y = t["x"] * t["a"] + t["b"] * t["b"]
    return torch.exp(y / 4).sum() + (t["n"].to(t["b"].dtype) * t["b"]).sum()


def r_half(t, F):
    x, w = t["x"], t["w"]
    return (torch.tanh(x * w) + x * 2).sum()


def r_large(t, F):
    z, y, tt = t["z"], t["y"], t["t"]
    a = (torch.logsumexp(z, 1).sum() + (torch.softmax(z, -1) * tt).sum()
         + (torch.log_softmax(z, -1) * tt).sum())
    b = ce(z, y).sum() + bce_logits(z, tt).sum()
    c = (softplus(z) * tt).sum() + (torch.sigmoid(z) * tt).sum()
    return (a + b + c) / 1e4


def r_attention(t, F):
    x = t["x"]
    h = layernorm(x, t["g"], t["b"])
    q, k, v = h @ t["Wq"], h @ t["Wk"], h @ t["Wv"]
    o = torch.softmax(q @ k.T / 2.0, -1) @ v + x
    return (o ** 2).mean()


def r_bool_int(t, F):
    x, mask, level = t["x"], t["mask"], t["level"]
    a = torch.where(mask, x ** 2, -x)
    b = torch.where(level > 1, a, 0 * a)
    both = torch.where(mask, level >= 2, level < 0)
    return b.sum() + torch.where(both, x, torch.zeros_like(x)).sum()


def r_kinks(t, F):
    x = t["x"]
    return (torch.relu(x) * 3 + torch.abs(x) * 5 + torch.clamp(x, -1, 1) * 7).sum()


def r_stacked(t, F):
    h, W, bs = t["x"], t["W"], t["bs"]
    for i in range(4):
        h = h + gelu(h @ W[i] + bs[i]) * 0.5
        h = h - h.mean(-1, keepdim=True)
    return (h ** 2).sum() + W[3][0][1:].sum()


def r_var_lse(t, F):
    x = t["x"]
    v = var(x, (0, 2), keepdim=True)
    z = (x - x.mean((0, 2), keepdim=True)) / torch.sqrt(v + 1e-5)
    return torch.logsumexp(z, (1, 2)).sum() + var(z, -1).sum() + torch.logsumexp(x, (0, 1, 2))


def r_call_postfix(t, F):
    x = t["x"]
    return (4 * x ** 2).sum() + x[2] ** 2 + (x ** 2).sum() ** 0.5


def r_scalars(t, F):
    a, b, x = t["a"], t["b"], t["x"]
    return ((a * x + b) ** 2).sum() + a * b - 1 / (a ** 2 + 1)


def r_rebinding(t, F):
    x = t["x"]
    return x + (2 * x + 1) ** 2, 2 * x


def r_mlp(t, F):
    h = torch.relu(t["x"] @ t["W1"] + t["b1"])
    return ce(h @ t["W2"] + t["b2"], t["labels"]).mean()


def r_multi_carry(t, F):
    x, m, s = t["x0"], t["M"], t["s0"]
    for _ in range(5):
        tt = m @ x
        x = x + 0.1 * torch.tanh(tt)
        s = s * 0.9 + (tt * x).sum() * 0.01
        m = m * 0.95
    return x * s, s


def r_bind(t, F):
    x = t["x"]
    return (x @ t["w"]) * t["c"] + x.mean(1)


def r_generic(t, F):
    a, b, k = t["a"], t["b"], t["k"]

    def smooth(x, k):
        return x.sum() * k + x
    return (smooth(a, k) ** 2).sum() + (smooth(b, k * 2) * b).sum() + smooth(a * 3, k).sum()


# ---- cases ------------------------------------------------------------------------------

def _ties(rng):
    return {"a": rng.integers(-2, 3, (2, 4)).astype(f32),
            "b": rng.integers(-2, 3, (2, 4)).astype(f32)}


CASES = [
    Case("precedence", lambda r: {"x": N(r, 4), "w": N(r, 4)}, r_precedence, ["w"],
         subprocess_=True),
    Case("multi_function", lambda r: {"x": N(r, 5, 3), "W": N(r, 3, 2), "b": N(r, 2)},
         r_multi_function, ["W", "b"]),
    Case("two_results", lambda r: {"x": N(r, 3, 2), "y": N(r, 2)},
         lambda t, F: ((t["x"] * t["y"]).sum(-1), (t["y"] ** 2).sum()), ["x", "y"],
         subprocess_=True),
    Case("layout", lambda r: {"a": N(r, 2, 3), "b": N(r, 3)}, r_layout, ["a"]),
    Case("where_compare", lambda r: {"x": N(r, 5), "w": N(r, 5),
                                     "mask": np.array([True, False, True, True, False])},
         r_where, ["w"]),
    Case("elementwise_a", lambda r: {"x": N(r, 2, 3), "p": U(r, 0.5, 2, 2, 3)},
         r_elementwise_a, ["x", "p"]),
    Case("elementwise_b",
         lambda r: {"x": np.array([-1.3, -0.7, -0.2, 0.3, 0.8, 1.6], f32),
                    "q": np.array([-1.4, -0.4, 0.2, 0.6, 1.2, 2.1], f32)},
         r_elementwise_b, ["x", "q"]),
    Case("rounding", lambda r: {"x": N(r, 5, scale=3), "w": N(r, 5, scale=3)}, r_rounding,
         ["x", "w"]),
    Case("max_min_ties", _ties, r_maxmin, ["a", "b"]),
    Case("reductions", lambda r: {"x": N(r, 2, 3, 4)}, r_reductions, ["x"]),
    Case("matmul_forms", lambda r: {"v": N(r, 4), "M": N(r, 3, 4), "A": N(r, 2, 1, 3, 4),
                                    "B": N(r, 5, 4, 2)}, r_matmul, ["v", "M", "A", "B"]),
    Case("transpose_einsum", lambda r: {"a": N(r, 2, 3), "b": N(r, 3, 4), "c": N(r, 2, 3, 4),
                                        "d": N(r, 4, 2)}, r_einsum, ["a", "b", "c", "d"]),
    Case("shapes", lambda r: {"x": N(r, 2, 6), "y": N(r, 3)}, r_shapes, ["x", "y"]),
    Case("indexing", lambda r: {"x": N(r, 4, 5), "v": N(r, 6)}, r_indexing, ["x", "v"]),
    Case("rnn_symbolic", lambda r: {"xs": N(r, 5, 3), "ys": N(r, 5), "Wx": N(r, 3, 4),
                                    "Wh": N(r, 4, 4, scale=0.5), "b": N(r, 4), "wo": N(r, 4)},
         r_rnn, ["Wx", "Wh", "b", "wo"], subprocess_=True),
    Case("nested_loops", lambda r: {"xs": N(r, 3, 2), "W": N(r, 3, 2, 2), "c": N(r, 2)},
         r_nested, ["W", "c"]),
    Case("loop_index_value", lambda r: {"P": N(r, 4, 3), "q": N(r, 3)}, r_loop_index,
         ["P", "q"]),
    Case("symbolic_broadcast", lambda r: {"x": N(r, 4, 3), "s": N(r, 4, 1), "b": N(r, 3),
                                          "k": np.array(0.7, f32)}, r_symb, ["b", "k"]),
    Case("literals", lambda r: {"x": N(r, 4), "p": U(r, 0.1, 0.9, 4)}, r_literals, ["x", "p"]),
    Case("cross_entropy_int", lambda r: {"z": N(r, 5, 4), "y": r.integers(0, 4, 5),
                                         "y2": r.integers(0, 4, 4).astype(np.int32),
                                         "W": N(r, 4, 4)}, r_ce_int, ["W"]),
    Case("cross_entropy_probs", lambda r: {"z": N(r, 3, 5), "t": N(r, 3, 5)}, r_ce_probs,
         ["z", "t"]),
    Case("take_gather", lambda r: {"table": N(r, 5, 3), "idx": np.array([1, 4, 1, 0], np.int32),
                                   "idx2": np.array([[2, 0], [2, 2]])}, r_take, ["table"]),
    Case("one_hot_nll", lambda r: {"z": N(r, 3, 4), "y": np.array([3, 0, 1])}, r_one_hot,
         ["z"]),
    Case("softmax_axes", lambda r: {"x": N(r, 3, 4), "w": N(r, 4)}, r_softmax, ["x", "w"]),
    Case("losses", lambda r: {"z": N(r, 6), "y": U(r, 0.05, 0.95, 6), "t": N(r, 6)},
         r_losses, ["z", "t"]),
    Case("layernorm", lambda r: {"x": N(r, 3, 4), "g": N(r, 4), "b": N(r, 4), "g0": N(r, 3)},
         r_layernorm, ["x", "g", "b", "g0"]),
    Case("constructors", lambda r: {"x": N(r, 2, 3)}, r_constructors, ["x"]),
    Case("stop_gradient", lambda r: {"x": N(r, 4), "w": N(r, 4)}, r_stop, ["x", "w"]),
    Case("casts", lambda r: {"x": N(r, 3), "y": N(r, 3).astype(np.float64),
                             "h": N(r, 3).astype(np.float16)}, r_casts, ["x", "y", "h"],
         rtol32=2e-2),
    Case("custom_rules", lambda r: {"x": N(r, 5), "w": N(r, 5)}, r_custom, ["x", "w"],
         modes=("reverse", "reverse32", "jvp")),
    Case("grad_only", lambda r: {"x": np.array([-2.0, 0.5, 1.5], f32)}, r_grad_only, ["x"],
         modes=("reverse", "reverse32")),
    Case("select_fn", lambda r: {"x": N(r, 3), "k": np.array(1.5, f32)}, r_force, ["x", "k"],
         extra=["--fn", "force"]),
    Case("select_fn", lambda r: {"x": N(r, 3), "k": np.array(1.5, f32)}, r_energy, ["x", "k"],
         extra=["--fn", "energy"]),
    Case("wrt_override", lambda r: {"x": N(r, 2, 3), "a": N(r, 3), "b": N(r, 3),
                                    "n": np.array([1, 2, 3], np.int32)}, r_wrt, ["x", "b"],
         extra=["--wrt", "x,b"]),
    Case("half_inputs", lambda r: {"x": N(r, 4).astype(np.float16),
                                   "w": N(r, 4).astype(np.float16)}, r_half, ["x"],
         rtol32=2e-2),
    Case("large_magnitude", lambda r: {"z": N(r, 2, 3, scale=1e4), "y": np.array([2, 0]),
                                       "t": U(r, 0, 1, 2, 3)}, r_large, ["z"],
         modes=("reverse", "reverse32", "jvp")),    # PyTorch's double backward gives NaN here
    Case("attention", lambda r: {"x": N(r, 3, 4), "Wq": N(r, 4, 4), "Wk": N(r, 4, 4),
                                 "Wv": N(r, 4, 4), "g": N(r, 4), "b": N(r, 4)}, r_attention,
         ["Wq", "Wk", "Wv", "g", "b"]),
    Case("bool_int_inputs", lambda r: {"x": N(r, 6), "mask": r.random(6) > 0.5,
                                       "level": np.array([0, 1, 2, 3, 2, 1], np.int32)},
         r_bool_int, ["x"]),
    Case("kinks", lambda r: {"x": np.array([-2, -1, -0.5, 0, 0.5, 1, 2], f32)}, r_kinks, ["x"]),
    Case("stacked_weights", lambda r: {"x": N(r, 2, 3), "W": N(r, 4, 3, 3, scale=0.5),
                                       "bs": N(r, 4, 3)}, r_stacked, ["W", "bs"]),
    Case("var_logsumexp_axes", lambda r: {"x": N(r, 3, 2, 4)}, r_var_lse, ["x"]),
    Case("call_postfix", lambda r: {"x": N(r, 3)}, r_call_postfix, ["x"]),
    Case("scalar_inputs", lambda r: {"a": np.array(0.8, f32), "b": np.array(-0.3, f32),
                                     "x": N(r, 3)}, r_scalars, ["a", "b"]),
    Case("rebinding", lambda r: {"x": N(r, 3)}, r_rebinding, ["x"]),
    Case("mlp_classifier", lambda r: {"x": N(r, 6, 4), "labels": r.integers(0, 3, 6),
                                      "W1": N(r, 4, 8), "b1": N(r, 8), "W2": N(r, 8, 3),
                                      "b2": N(r, 3)}, r_mlp, ["W1", "b1", "W2", "b2"],
         subprocess_=True),
    Case("loop_multi_carry", lambda r: {"x0": N(r, 3), "M": N(r, 3, 3),
                                        "s0": np.array(0.5, f32)}, r_multi_carry,
         ["x0", "M", "s0"]),
    Case("generic_helper", lambda r: {"a": N(r, 3), "b": N(r, 5), "k": np.array(0.3, f32)},
         r_generic, ["a", "b", "k"]),
    Case("bind_dims", lambda r: {"x": N(r, 3, 4), "w": N(r, 4), "c": N(r, 3)}, r_bind,
         ["w", "c"], extra=["--bind", "K=4", "--bind", "B=3"]),
]
