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


MODELS = {"mlp": mlp, "transformer_block": transformer_block, "deep_mlp": deep_mlp}


def torch_ops():
    import torch
    import torch.nn.functional as F
    def fold_layers(step, h, W, b):
        return functools.reduce(lambda h, wc: step(h, *wc), zip(W.unbind(0), b.unbind(0)), h)

    return SimpleNamespace(
        fold_layers=fold_layers,
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

    def fold_layers(step, h, W, b):
        return jax.lax.scan(lambda h, wc: (step(h, *wc), None), h, (W, b))[0]

    return SimpleNamespace(
        fold_layers=fold_layers,
        relu=jax.nn.relu, tanh=jnp.tanh, mean=jnp.mean, einsum=jnp.einsum,
        softmax=lambda x: jax.nn.softmax(x, axis=-1),
        gelu=lambda x: jax.nn.gelu(x, approximate=True), layernorm=layernorm)
