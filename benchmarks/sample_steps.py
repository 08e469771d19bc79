"""The training steps of samples/digits_cnn.tdsl and samples/char_gpt.tdsl for bench_cpu:
adc's `adc.train_step`, the same model in PyTorch eager with ``torch.optim.Adam`` and in
``jax.jit`` with ``optax.adam``, on the same batch and initial parameters (float32).

Each peer writes the model as that framework's users do: ``F.conv2d``, ``F.batch_norm``
with running statistics (momentum 0.1, unbiased running variance), ``F.max_pool2d``,
``F.dropout``, ``F.rms_norm``, ``F.scaled_dot_product_attention(is_causal=True)`` in
PyTorch; ``lax.conv_general_dilated``, ``lax.reduce_window``, ``jax.nn.dot_product_attention``
and dropout from a key split inside the jitted step in JAX.

Dropout draws differ between frameworks, so "diff" (the parameters after one step from the
same start, relative to adc's) compares the models with every dropout probability set to
0 (the same programs otherwise); the timed steps drop out at the samples' rates.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# name -> (sample file, loss function, dims, the sample's dropout probability)
SAMPLES = {
    "digits_cnn": ("digits_cnn.tdsl", "digits_cnn", dict(B=64), 0.25),
    "char_gpt": ("char_gpt.tdsl", "char_gpt", dict(B=16), 0.1),
}


def source(name: str, dropout: bool = True) -> str:
    """The sample's text; without `dropout`, every ``dropout(x, p)`` has p = 0."""
    text = (ROOT / "samples" / SAMPLES[name][0]).read_text()
    return text if dropout else re.sub(r"(dropout\(.*), 0\.\d+\)", r"\1, 0.0)", text)


def inputs(name: str, batch: int, seed: int = 0) -> tuple[dict, dict]:
    """(parameters, batch) as float32/int64 arrays: weights normal over sqrt(fan-in),
    embeddings normal / 10, gains ones, biases zeros."""
    rng = np.random.default_rng(seed)
    if name == "digits_cnn":
        shapes = {"w1": (16, 1, 3, 3), "g1": (16,), "b1": (16,), "w2": (32, 16, 3, 3),
                  "g2": (32,), "b2": (32,), "w3": (64, 32, 3, 3), "g3": (64,), "b3": (64,),
                  "fc_w": (256, 10), "fc_b": (10,)}
        data = {"x": rng.random((batch, 64), dtype=np.float32),
                "labels": rng.integers(0, 10, batch).astype(np.int64)}
    else:
        shapes = {"m.tok_emb": (32, 32), "m.pos_emb": (32, 32), "m.blocks.n1": (2, 32),
                  **{f"m.blocks.attn.{k}": (2, 32, 32) for k in ("wq", "wk", "wv", "wo")},
                  "m.blocks.n2": (2, 32), "m.blocks.mlp.w1": (2, 32, 128),
                  "m.blocks.mlp.b1": (2, 128), "m.blocks.mlp.w2": (2, 128, 32),
                  "m.blocks.mlp.b2": (2, 32), "m.norm": (32,), "m.lm_head": (32, 32)}
        text = rng.integers(0, 32, (batch, 33)).astype(np.int64)
        data = {"xs": text[:, :-1].copy(), "ys": text[:, 1:].copy()}
    params = {}
    for k, shape in shapes.items():
        last = k.rsplit(".", 1)[-1]
        if last in ("g1", "g2", "g3", "n1", "n2", "norm"):
            params[k] = np.ones(shape, np.float32)
        elif last in ("b1", "b2", "b3", "fc_b"):
            params[k] = np.zeros(shape, np.float32)
        else:
            fan_in = math.prod(shape[1:]) if len(shape) == 4 else shape[-2]
            scale = 0.1 if "emb" in k else fan_in ** -0.5
            params[k] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return params, data


# ---- PyTorch ---------------------------------------------------------------------------

def torch_loss(name: str, p: float):
    """loss(params, batch) in PyTorch (the running statistics held inside)."""
    import torch
    import torch.nn.functional as F
    if name == "digits_cnn":
        stats = {k: torch.zeros(n) if k[0] == "m" else torch.ones(n)
                 for k, n in (("m1", 16), ("v1", 16), ("m2", 32), ("v2", 32), ("m3", 64),
                              ("v3", 64))}

        def bn(h, i, w):
            return F.batch_norm(h, stats[f"m{i}"], stats[f"v{i}"], w[f"g{i}"], w[f"b{i}"],
                                training=True, momentum=0.1, eps=1e-5)

        def loss(w, b):
            h = b["x"].reshape(-1, 1, 8, 8)
            h = F.relu(bn(F.conv2d(h, w["w1"], padding=1), 1, w))
            h = F.max_pool2d(F.relu(bn(F.conv2d(h, w["w2"], padding=1), 2, w)), 2)
            h = F.max_pool2d(F.relu(bn(F.conv2d(h, w["w3"], padding=1), 3, w)), 2)
            h = F.dropout(h.reshape(h.shape[0], 256), p, training=True)
            return F.cross_entropy(h @ w["fc_w"] + w["fc_b"], b["labels"])
        return loss

    def loss(w, b):
        def norm(x, g):
            return F.rms_norm(x, (32,), g, eps=1e-6)
        xs = b["xs"]
        n = xs.shape[0]
        h = w["m.tok_emb"][xs] + w["m.pos_emb"]
        blocks = zip(*(w[f"m.blocks.{k}"].unbind(0) for k in (
            "n1", "attn.wq", "attn.wk", "attn.wv", "attn.wo", "n2", "mlp.w1", "mlp.b1",
            "mlp.w2", "mlp.b2")))
        for n1, wq, wk, wv, wo, n2, w1, b1, w2, b2 in blocks:
            a = norm(h, n1)
            q, k, v = ((a @ m).view(n, 32, 2, 16).transpose(1, 2) for m in (wq, wk, wv))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + F.dropout(y.transpose(1, 2).reshape(n, 32, 32) @ wo, p, training=True)
            m = F.gelu(norm(h, n2) @ w1 + b1) @ w2 + b2
            h = h + F.dropout(m, p, training=True)
        logits = norm(h, w["m.norm"]) @ w["m.lm_head"]
        return F.cross_entropy(logits.reshape(-1, 32), b["ys"].reshape(-1))
    return loss


def torch_step(name: str, params: dict, batch: dict, lr: float, drop: bool = True):
    """A step function (Adam after ``backward()``) and the parameters it updates."""
    import torch
    p = SAMPLES[name][3] if drop else 0.0
    w = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    b = {k: torch.from_numpy(v) for k, v in batch.items()}
    loss = torch_loss(name, p)
    opt = torch.optim.Adam(list(w.values()), lr=lr)

    def one():
        opt.zero_grad()
        loss(w, b).backward()
        opt.step()
    return one, lambda: {k: v.detach().numpy() for k, v in w.items()}


# ---- JAX -------------------------------------------------------------------------------

def jax_loss(name: str):
    """loss(params, batch, stats, key, p) -> (loss, new stats) in JAX (the dropout
    probability `p` an argument, so that one compilation serves every p)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def dropout(h, key, p):
        keep = jax.random.bernoulli(key, 1 - p, h.shape)
        return jnp.where(keep, h / (1 - p), 0)

    def ce(z, y):
        ls = jax.nn.log_softmax(z, axis=-1)
        return -jnp.mean(jnp.take_along_axis(ls, y[..., None], axis=-1))

    if name == "digits_cnn":
        def conv(h, w):
            return lax.conv_general_dilated(h, w, (1, 1), [(1, 1), (1, 1)])

        def pool(h):
            return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

        def bn(h, i, w, stats, new):
            mean = jnp.mean(h, axis=(0, 2, 3))
            var = jnp.mean(jnp.square(h - mean[:, None, None]), axis=(0, 2, 3))
            n = h.size // h.shape[1]
            new[f"m{i}"] = 0.9 * stats[f"m{i}"] + 0.1 * lax.stop_gradient(mean)
            new[f"v{i}"] = 0.9 * stats[f"v{i}"] + 0.1 * lax.stop_gradient(var) * n / (n - 1)
            y = (h - mean[:, None, None]) * lax.rsqrt(var + 1e-5)[:, None, None]
            return y * w[f"g{i}"][:, None, None] + w[f"b{i}"][:, None, None]

        def loss(w, b, stats, key, p):
            new = {}
            h = b["x"].reshape(-1, 1, 8, 8)
            h = jax.nn.relu(bn(conv(h, w["w1"]), 1, w, stats, new))
            h = pool(jax.nn.relu(bn(conv(h, w["w2"]), 2, w, stats, new)))
            h = pool(jax.nn.relu(bn(conv(h, w["w3"]), 3, w, stats, new)))
            h = dropout(h.reshape(h.shape[0], 256), key, p)
            return ce(h @ w["fc_w"] + w["fc_b"], b["labels"]), new
        return loss

    def norm(x, g):
        return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g

    def loss(w, b, stats, key, p):
        xs = b["xs"]
        n = xs.shape[0]
        h = w["m.tok_emb"][xs] + w["m.pos_emb"]
        keys = jax.random.split(key, 4)
        for i in range(2):
            blk = {k: w[f"m.blocks.{k}"][i] for k in (
                "n1", "attn.wq", "attn.wk", "attn.wv", "attn.wo", "n2", "mlp.w1", "mlp.b1",
                "mlp.w2", "mlp.b2")}
            a = norm(h, blk["n1"])
            q, k, v = ((a @ blk[f"attn.{m}"]).reshape(n, 32, 2, 16) for m in ("wq", "wk", "wv"))
            y = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(n, 32, 32)
            h = h + dropout(y @ blk["attn.wo"], keys[2 * i], p)
            m = jax.nn.gelu(norm(h, blk["n2"]) @ blk["mlp.w1"] + blk["mlp.b1"],
                            approximate=False) @ blk["mlp.w2"] + blk["mlp.b2"]
            h = h + dropout(m, keys[2 * i + 1], p)
        return ce(norm(h, w["m.norm"]) @ w["m.lm_head"], b["ys"]), stats
    return loss


def jax_step(name: str, params: dict, batch: dict, lr: float, drop: bool = True):
    """A step function (``jax.jit`` of the gradient and an optax Adam update, parameters,
    optimizer state, running statistics and key donated) and the parameters it updates."""
    import jax
    import jax.numpy as jnp
    p = jnp.float32(SAMPLES[name][3] if drop else 0.0)
    stats = ({k: jnp.zeros(n) if k[0] == "m" else jnp.ones(n) for k, n in
              (("m1", 16), ("v1", 16), ("m2", 32), ("v2", 32), ("m3", 64), ("v3", 64))}
             if name == "digits_cnn" else {})

    jstep, tx = _jax_train(name, lr)
    w = {k: jnp.asarray(v) for k, v in params.items()}
    held = {"w": w, "s": tx.init(w), "stats": stats, "key": jax.random.key(0)}
    b = {k: jnp.asarray(v) for k, v in batch.items()}

    def one():
        held["w"], held["s"], held["stats"], held["key"] = jstep(
            held["w"], held["s"], held["stats"], held["key"], b, p)
        jax.block_until_ready(held["w"])
    return one, lambda: {k: np.asarray(v) for k, v in held["w"].items()}


_JITTED: dict = {}


def _jax_train(name: str, lr: float):
    """The jitted step of the sample and its optax Adam, one per sample and learning rate
    in this process."""
    import jax
    import optax
    if (name, lr) in _JITTED:
        return _JITTED[name, lr]
    loss, tx = jax_loss(name), optax.adam(lr)

    def train(w, s, stats, key, b, p):
        key, sub = jax.random.split(key)
        g, stats = jax.grad(loss, has_aux=True)(w, b, stats, sub, p)
        updates, s = tx.update(g, s, w)
        return optax.apply_updates(w, updates), s, stats, key

    return _JITTED.setdefault((name, lr), (jax.jit(train, donate_argnums=(0, 1, 2, 3)), tx))


# ---- adc -------------------------------------------------------------------------------

def adc_step(name: str, params: dict, batch: dict, lr: float, drop: bool = True):
    """adc's compiled training step of the sample (its elementwise runs fused from the first
    call, as bench_cpu's other training steps) and the parameters it updates."""
    import adcompiler as adc
    _, fn, dims, _ = SAMPLES[name]
    dims = dict(dims, B=len(next(iter(batch.values()))))
    module = adc.parse_tdsl(source(name, drop), f"{name}.tdsl")
    step = adc.train_step(module, adc.optim.adam(lr), fn=fn, dims=dims, fuse=True)
    path = ADC_PATHS.get(name, {})   # the peers' names -> the sample's parameter paths
    now = {"p": {path.get(k, k): v for k, v in params.items()}}
    now["s"] = step.init(now["p"])
    back = {v: k for k, v in path.items()}

    def one():
        now["p"], now["s"], _ = step(now["p"], now["s"], batch)
    return one, lambda: {back.get(k, k): v for k, v in now["p"].items()}


# digits_cnn's parameters in the sample (a group per layer) by the names the peers use
ADC_PATHS = {"digits_cnn": {
    **{f"{k}{i}": f"m.c{i}.{p}" for i in (1, 2, 3) for k, p in
       (("w", "w"), ("g", "bn.g"), ("b", "bn.b"))}, "fc_w": "m.fc.W", "fc_b": "m.fc.b"}}


STEPS = {"adc": adc_step, "torch eager": torch_step, "jax.jit": jax_step}


def train_row(name: str, runners: list, batch_size: int | None, lr: float, timer) -> dict:
    """The sample's training step of each runner in `runners` ("adc" first), timed by
    `timer` ({runner: step} -> {runner: ms}), with "<runner> diff": its parameters after
    one step without dropout, relative to adc's."""
    params, batch = inputs(name, batch_size or SAMPLES[name][2]["B"])
    ref_step, ref_of = adc_step(name, params, batch, lr, drop=False)
    ref_step()
    ref = {k: np.asarray(v, np.float64) for k, v in ref_of().items()}
    row, steps = {"model": name, "step": "train"}, {}
    for runner in runners:
        if runner != "adc":
            plain, got = STEPS[runner](name, params, batch, lr, drop=False)
            plain()
            row[f"{runner} diff"] = rel_diff(got(), ref)
        steps[runner] = STEPS[runner](name, params, batch, lr)[0]
        steps[runner]()
    row.update(timer(steps))
    return row


def rel_diff(g: dict, ref: dict) -> float:
    return max(float(np.linalg.norm(np.asarray(g[k], np.float64) - ref[k])
                     / max(np.linalg.norm(ref[k]), 1e-30)) for k in ref)
