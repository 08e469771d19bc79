"""Per-example gradients of a batch: adc.vmap(adc.grad(...)) against a Python loop of
adc.grad calls, and against jax.vmap + jit and torch.func.vmap where installed.

The model is a two-layer classifier of one example (features -> hidden -> classes, tanh,
cross-entropy); the batch holds `--rows` examples. Each runner computes every example's
gradient with respect to all four parameters; the figures are the median of `--repeats`
timed calls after `--warmup` calls, in milliseconds, and the largest relative difference
of the gradients from the loop's.

    python benchmarks/bench_per_example.py                 # 64 rows, writes the table
    python benchmarks/bench_per_example.py --rows 8 --repeats 2 --out -
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE = """
def loss(x: f32[F], label: i64, param W1: f32[F, H], param b1: f32[H],
         param W2: f32[H, C], param b2: f32[C]) -> f32 {
    h = tanh(x @ W1 + b1)
    return cross_entropy(h @ W2 + b2, label)
}
"""


def data(rows: int, features: int, hidden: int, classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    f32 = np.float32
    params = {"W1": (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(f32),
              "b1": np.zeros(hidden, f32),
              "W2": (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(f32),
              "b2": np.zeros(classes, f32)}
    return (rng.standard_normal((rows, features)).astype(f32),
            rng.integers(0, classes, rows), params)


def timed(fn, warmup: int, repeats: int) -> tuple[float, object]:
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), out


def adc_runners(x, labels, params):
    import adcompiler as adc
    g = adc.grad(SOURCE)
    per_example = adc.vmap(g, in_axes={"x": 0, "label": 0})

    def loop():
        grads = [g(x=x[i], label=labels[i], **params) for i in range(len(x))]
        return [np.stack(parts) for parts in zip(*grads)]
    return {"adc Python loop": loop,
            "adc.vmap(adc.grad)": lambda: list(per_example(x=x, label=labels, **params))}


def jax_runner(x, labels, params):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}

    def loss(p, xi, yi):
        h = jnp.tanh(xi @ p["W1"] + p["b1"])
        z = h @ p["W2"] + p["b2"]
        return jax.nn.logsumexp(z) - z[yi]
    f = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
    p = {k: jnp.asarray(v) for k, v in params.items()}
    xj, yj = jnp.asarray(x), jnp.asarray(labels)

    def run():
        out = f(p, xj, yj)
        return [np.asarray(out[k].block_until_ready()) for k in ("W1", "b1", "W2", "b2")]
    return {"jax.jit(jax.vmap(jax.grad))": run}


def torch_runner(x, labels, params):
    try:
        import torch
        from torch.func import grad, vmap
    except ImportError:
        return {}

    def loss(p, xi, yi):
        h = torch.tanh(xi @ p["W1"] + p["b1"])
        z = h @ p["W2"] + p["b2"]
        return torch.logsumexp(z, 0) - torch.gather(z, 0, yi.reshape(1))[0]
    f = vmap(grad(loss), in_dims=(None, 0, 0))
    p = {k: torch.from_numpy(v) for k, v in params.items()}
    xt, yt = torch.from_numpy(x), torch.from_numpy(labels)

    def run():
        out = f(p, xt, yt)
        return [out[k].numpy() for k in ("W1", "b1", "W2", "b2")]
    return {"torch.func.vmap(grad)": run}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=64, help="examples in the batch (default 64)")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--repeats", type=int, default=20, help="timed calls (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    p.add_argument("--runners", default="adc,jax,torch",
                   help="which to time (default adc,jax,torch; missing ones are skipped)")
    p.add_argument("--out", default=str(HERE / "results-per-example.md"),
                   help="Markdown file to write ('-': stdout only)")
    args = p.parse_args(argv)
    x, labels, params = data(args.rows, args.features, args.hidden, args.classes)
    makers = {"adc": adc_runners, "jax": jax_runner, "torch": torch_runner}
    runners = {}
    for key in args.runners.split(","):
        runners.update(makers[key.strip()](x, labels, params))
    results = {}
    for name, fn in runners.items():
        print(f"timing {name} ...", file=sys.stderr)
        results[name] = timed(fn, args.warmup, args.repeats)
    ref_ms, ref = results["adc Python loop"]
    lines = [f"Per-example gradients of a batch of {args.rows} rows "
             f"({args.features}-{args.hidden}-{args.classes} tanh classifier, float32); "
             f"median of {args.repeats} calls after {args.warmup} warm-up calls; "
             f"{platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}. "
             "On a shared machine the figures move between runs (PyTorch's the most).", "",
             "| runner | ms per batch | loop / this | max rel. diff vs loop |",
             "|---|---:|---:|---:|"]
    for name, (ms, out) in results.items():
        diff = max(float(np.max(np.abs(o - r)) / max(np.max(np.abs(r)), 1e-30))
                   for o, r in zip(out, ref))
        lines.append(f"| {name} | {ms:.3f} | {ref_ms / ms:.1f} | {diff:.1e} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
