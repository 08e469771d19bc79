"""The benchmark models for PyTorch and JAX, written once over a small table of ops so that
both frameworks compute what benchmarks/models/*.tdsl computes (same shapes, same GELU
tanh approximation, layernorm eps 1e-5, loss = mean square of the output).

Each framework runs the layers of the residual MLP its idiomatic way, the one whose gradient
writes each layer's weight gradient once: ``unbind`` in PyTorch (indexing ``W[i]`` in a
Python loop would add a full-size zero-padded gradient per layer) and ``lax.scan`` over the
stacked weights in JAX."""
from __future__ import annotations

import functools
from types import SimpleNamespace


def mlp(o, x, W1, b1, W2, b2, W3, b3):
    h1 = o.relu(x @ W1 + b1)
    h2 = o.relu(h1 @ W2 + b2)
    y = h2 @ W3 + b3
    return o.mean(y * y)


def transformer_block(o, x, Wq, Wk, Wv, Wo, g1, be1, W1, c1, W2, c2, g2, be2):
    q = o.einsum("btd,hdk->bhtk", x, Wq)
    kt = o.einsum("btd,hdk->bhkt", x, Wk)
    v = o.einsum("btd,hdk->bhtk", x, Wv)
    p = o.softmax(q @ kt * 0.125)
    att = o.einsum("bhtk,hkd->btd", p @ v, Wo)
    a = o.layernorm(x + att, g1, be1)
    h = o.layernorm(a + o.gelu(a @ W1 + c1) @ W2 + c2, g2, be2)
    return o.mean(h * h)


def deep_mlp(o, x, W, b):
    h = o.fold_layers(lambda h, w, c: h + o.tanh(h @ w + c), x, W, b)
    return o.mean(h * h)


def gpt(o, x, y, Wq, Wk, Wv, Wo, g1, be1, W1, c1, W2, c2, g2, be2, gf, bf, Wout):
    def block(h, wq, wk, wv, wo, g1, be1, w1, c1, w2, c2, g2, be2):
        a = o.layernorm(h, g1, be1)
        q, k, v = (o.einsum("btd,hdk->bhtk", a, w) for w in (wq, wk, wv))
        h = h + o.einsum("bhtk,hkd->btd", o.causal_attention(q, k, v), wo)
        return h + o.gelu(o.layernorm(h, g2, be2) @ w1 + c1) @ w2 + c2

    h = o.fold_layers(block, x, Wq, Wk, Wv, Wo, g1, be1, W1, c1, W2, c2, g2, be2)
    return o.cross_entropy(o.layernorm(h, gf, bf) @ Wout, y)


def cnn(o, x, w1, b1, w2, b2, Wf, bf):
    h = o.relu(o.conv3x3(x, w1) + b1[:, None, None])
    h = o.max_pool2(h)
    h = o.relu(o.conv3x3(h, w2) + b2[:, None, None])
    y = o.spatial_mean(h) @ Wf + bf
    return o.mean(y * y)


MODELS = {"mlp": mlp, "transformer_block": transformer_block, "deep_mlp": deep_mlp,
          "gpt": gpt, "cnn": cnn}


def torch_ops():
    import torch
    import torch.nn.functional as F
    def fold_layers(step, h, *stacked):
        return functools.reduce(lambda h, ws: step(h, *ws), zip(*(W.unbind(0) for W in stacked)),
                                h)

    def cross_entropy(logits, y):   # the mean over every position
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    return SimpleNamespace(
        conv3x3=lambda x, w: F.conv2d(x, w, padding=1), max_pool2=lambda x: F.max_pool2d(x, 2),
        spatial_mean=lambda x: x.mean(dim=(2, 3)),
        fold_layers=fold_layers, cross_entropy=cross_entropy,
        causal_attention=lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                        is_causal=True),
        relu=torch.relu, tanh=torch.tanh, mean=torch.mean, einsum=torch.einsum,
        softmax=lambda x: torch.softmax(x, dim=-1),
        gelu=lambda x: F.gelu(x, approximate="tanh"),
        layernorm=lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b, eps=1e-5))


def jax_ops():
    import jax
    import jax.numpy as jnp

    def layernorm(x, g, b):
        m = jnp.mean(x, axis=-1, keepdims=True)
        v = jnp.mean(jnp.square(x - m), axis=-1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * g + b

    def fold_layers(step, h, *stacked):
        return jax.lax.scan(lambda h, ws: (step(h, *ws), None), h, stacked)[0]

    def causal_attention(q, k, v):
        s = jnp.einsum("...tk,...sk->...ts", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
        t = q.shape[-2]
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
        return jax.nn.softmax(s, axis=-1) @ v

    def cross_entropy(logits, y):
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[..., None], axis=-1))

    def conv3x3(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                            precision=jax.lax.Precision.HIGHEST)

    def max_pool2(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    return SimpleNamespace(
        conv3x3=conv3x3, max_pool2=max_pool2, spatial_mean=lambda x: jnp.mean(x, axis=(2, 3)),
        fold_layers=fold_layers, causal_attention=causal_attention,
        cross_entropy=cross_entropy,
        relu=jax.nn.relu, tanh=jnp.tanh, mean=jnp.mean, einsum=jnp.einsum,
        softmax=lambda x: jax.nn.softmax(x, axis=-1),
        gelu=lambda x: jax.nn.gelu(x, approximate=True), layernorm=layernorm)
