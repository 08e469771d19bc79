"""Gradient and training steps on the CPU: adc against PyTorch eager and jax.jit, at 1 and
2 threads.

    python benchmarks/bench_cpu.py                       # every workload, 1 and 2 threads
    python benchmarks/bench_cpu.py --threads 1 --models tiny_mlp mlp_small --repeats 5

A gradient step ("grad") computes the loss and the gradient of every parameter: adc's
``value_and_grad`` callable (the compiled executor, `adc_runtime.compiled`; with
``--interpreter`` also the NumPy interpreter), ``torch.autograd.grad`` in eager mode, and
``jax.jit(jax.value_and_grad(...))``. A training step ("train") adds an Adam update
(lr 1e-3) of the parameters: ``adc.train_step`` (parameters and state updated in place, its
elementwise runs compiled into loops from the first call, ``fuse=True``),
``torch.optim.Adam`` after ``backward()``, and a ``jax.jit`` optax step with the
parameters and state donated (``--steps-kind grad`` leaves it out). Workloads (float32):

* ``mlp_small``: batch 64, 256-256-10, relu, mean cross-entropy on integer labels;
* ``tiny_mlp``: samples/mlp.tdsl, batch 16, 4-8-3 (about 30 ops: overhead-bound);
* ``attention``: one head, T 128, D 256, softmax(q kᵀ / 16) v Wo, mean square;
* ``transformer_block``: benchmarks/models/transformer_block.tdsl, B 2, T 128, D 256,
  4 heads, F 1024;
* ``deep_mlp``: benchmarks/models/deep_mlp.tdsl, 64 residual tanh layers, batch 1024,
  width 64 (a loop in adc, ``unbind`` in PyTorch, ``lax.scan`` in JAX);
* ``digits_cnn``, ``char_gpt``: the training steps of samples/digits_cnn.tdsl (batch 64:
  three convolutions with batch normalization and running statistics, two max pools,
  dropout) and samples/char_gpt.tdsl (16 rows of 32 characters: two blocks of causal
  attention, RMSNorm, GELU, dropout), each peer written with its framework's own layers
  (`sample_steps.py`); training steps only, and their "grad diff" compares the parameters
  after one step with every dropout probability 0 (the frameworks draw different masks).

Each thread count runs in a child process whose BLAS (threadpoolctl), PyTorch
(``set_num_threads``) and XLA (``XLA_FLAGS``) are limited to it before anything runs. Times
are the median (``--stat min``: the minimum) over `--repeats` blocks of `--steps` steps,
the runners taking turns, after warm-up (adc's compilation and jax.jit's tracing happen in
the warm-up). "grad diff" is the largest relative difference ||g - g_adc|| / ||g_adc||
over the parameters; for a training step, the same of the parameters after one update
from the same start. A column whose framework is not installed is left out.

Each row also splits every runner's step into its matrix products and the rest
(`blas_time.py`): the products adc's program computes, recorded once from its interpreter,
are timed alone with each framework's own matrix product ("BLAS ms"); a step's time less
that is its time outside BLAS ("outside BLAS ms"), where the frameworks' elementwise work
and overhead differ (the products are the same arithmetic in each, done by different BLAS
libraries). Each row gives the 1-minute load average of the machine when it was measured
(``os.getloadavg``): the machine may be shared.

Gradient rows also time each runner's forward pass alone (adc's ``function`` callable,
PyTorch under ``no_grad``, ``jax.jit`` of the loss) and give the ratio of the gradient
step's time to it ("grad/fwd"), beside the same ratio of FLOPs in adc's programs ("FLOPs
grad/fwd", `adcompiler.memory.flops`): where the matrix products dominate, each one's
adjoint costs two more of the same size, so a gradient near 3x the forward is what the
arithmetic allows, and less where an input needs no gradient.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LR = 1e-3  # Adam's learning rate in the training steps

TINY = (ROOT / "samples" / "mlp.tdsl").read_text()
MLP_SMALL = """
def mlp_small(x: f32[B, D], labels: i64[B], param W1: f32[D, H], param b1: f32[H],
              param W2: f32[H, C], param b2: f32[C]) -> f32 {
    h = relu(x @ W1 + b1)
    return mean(cross_entropy(h @ W2 + b2, labels))
}
"""
ATTENTION = """
def attention(x: f32[T, D], param Wq: f32[D, D], param Wk: f32[D, D], param Wv: f32[D, D],
              param Wo: f32[D, D]) -> f32 {
    p = softmax((x @ Wq) @ transpose(x @ Wk) * 0.0625, axis=-1)
    y = p @ (x @ Wv) @ Wo
    return mean(y * y)
}
"""

# name -> (source, function, sizes, parameters in order, integer inputs -> class count)
WORKLOADS = {
    "mlp_small": (MLP_SMALL, "mlp_small", dict(B=64, D=256, H=256, C=10),
                  ["W1", "b1", "W2", "b2"], {"labels": "C"}),
    "tiny_mlp": (TINY, "mlp", dict(B=16), ["W1", "b1", "W2", "b2"], {"labels": 3}),
    "attention": (ATTENTION, "attention", dict(T=128, D=256), ["Wq", "Wk", "Wv", "Wo"], {}),
    "transformer_block": ((HERE / "models" / "transformer_block.tdsl").read_text(),
                          "transformer_block", dict(B=2, T=128, D=256, H=4, K=64, F=1024),
                          ["Wq", "Wk", "Wv", "Wo", "g1", "be1", "W1", "c1", "W2", "c2",
                           "g2", "be2"], {}),
    "deep_mlp": ((HERE / "models" / "deep_mlp.tdsl").read_text(), "deep_mlp",
                 dict(B=1024, D=64, L=64), ["W", "b"], {}),
}


# ---- inputs and peers ------------------------------------------------------------------

def make_inputs(fn, sizes: dict, ints: dict, seed: int = 0) -> dict:
    """bench_gpu's float inputs; integer class labels in [0, classes) for `ints`."""
    import numpy as np
    sys.path.insert(0, str(HERE))
    from bench_gpu import make_inputs as float_inputs
    out = float_inputs(fn, {"V": 1, **sizes}, seed)   # its labels: replaced below
    rng = np.random.default_rng(seed + 1)
    for name, n in ints.items():
        n = n if isinstance(n, int) else sizes[n]
        out[name] = rng.integers(0, n, out[name].shape).astype(np.int64)
    return out


def peer_loss(name: str, o):
    """The workload's loss written with the ops table `o` (PyTorch or JAX)."""
    if name in ("mlp_small", "tiny_mlp"):
        return lambda x, labels, W1, b1, W2, b2: o.ce(o.relu(x @ W1 + b1) @ W2 + b2, labels)
    if name == "attention":
        def attention(x, Wq, Wk, Wv, Wo):
            p = o.softmax((x @ Wq) @ o.t(x @ Wk) * 0.0625)
            y = p @ (x @ Wv) @ Wo
            return o.mean(y * y)
        return attention
    sys.path.insert(0, str(HERE))
    import peers
    return lambda *a: peers.MODELS[name](o, *a)


def torch_table():
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, str(HERE))
    import peers
    o = peers.torch_ops()
    o.ce = lambda z, y: F.cross_entropy(z, y)
    o.t = lambda a: a.T
    return o


def jax_table():
    import jax
    import jax.numpy as jnp
    sys.path.insert(0, str(HERE))
    import peers
    o = peers.jax_ops()

    def ce(z, y):
        ls = jax.nn.log_softmax(z, axis=-1)
        return -jnp.mean(jnp.take_along_axis(ls, y[:, None], axis=-1))
    o.ce = ce
    o.t = lambda a: a.T
    return o


# ---- one thread count (a child process) ------------------------------------------------

def time_steps(steps_by_runner: dict, args) -> dict:
    """Milliseconds per step of each runner: warm-up, then `args.repeats` blocks of
    `args.steps` steps, the runners taking turns block by block (so that a busy spell of
    a shared machine falls on all of them); the median (or `--stat min`) of the blocks."""
    for step in steps_by_runner.values():
        for _ in range(args.warmup):
            step()
    per: dict = {k: [] for k in steps_by_runner}
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    for _ in range(args.repeats):
        for k, step in steps_by_runner.items():
            t0 = clock()
            for _ in range(args.steps):
                step()
            per[k].append((clock() - t0) * 1e3 / args.steps)
    pick = min if args.stat == "min" else statistics.median
    return {k: pick(v) for k, v in per.items()}


def rel_diff(g: dict, ref: dict) -> float:
    import numpy as np
    return max(float(np.linalg.norm(np.asarray(g[k], np.float64) - ref[k])
                     / max(np.linalg.norm(ref[k]), 1e-30)) for k in ref)


def child(args) -> dict:
    """Time every workload at this process's thread count; returns the rows as JSON."""
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits
    threadpool_limits(args.nthreads)
    import adcompiler as adc

    frameworks = {}
    try:
        import torch
        torch.set_num_threads(args.nthreads)
        frameworks["torch eager"] = torch_table()
    except ImportError:
        pass
    try:
        import jax
        jax.config.update("jax_default_matmul_precision", "highest")
        frameworks["jax.jit"] = jax_table()
    except ImportError:
        pass
    blas = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, "
            f"{i.get('num_threads')} threads)" for i in threadpool_info()
            if i.get("user_api") == "blas"]
    rows = []
    sys.path.insert(0, str(HERE))
    import sample_steps
    for name in args.models:
        if name in sample_steps.SAMPLES:
            if "train" in args.kinds:
                peers = [p for p in frameworks if p != "jax.jit" or _has("optax")]
                row = sample_steps.train_row(name, ["adc", *peers], args.batch, LR,
                                             lambda steps: time_steps(steps, args))
                row.update(threads=args.nthreads, load=os.getloadavg()[0])
                rows.append(row)
                print(f"  {name} train at {args.nthreads} thread(s): "
                      + ", ".join(f"{k} {v:.3g}" for k, v in row.items()
                                  if isinstance(v, float)), file=sys.stderr, flush=True)
            continue
        src, fn_name, sizes, params, ints = WORKLOADS[name]
        module = adc.parse_tdsl(src, f"{name}.tdsl")
        fn = module[fn_name]
        inputs = make_inputs(fn, sizes, ints)
        vg = adc.value_and_grad(module, fn.name, wrt=params, dims=sizes)
        sys.path.insert(0, str(HERE))
        import blas_time
        gemms = blas_time.products(blas_time.record(vg.module, vg.fn_name, inputs, sizes),
                                   frameworks)
        for kind, make in (("grad", grad_row), ("train", train_row)):
            if kind in args.kinds:
                row = make(name, module, fn, sizes, params, inputs, frameworks, args, gemms)
                row["load"] = os.getloadavg()[0]
                rows.append(row)
                print(f"  {name} {kind} at {args.nthreads} thread(s): "
                      + ", ".join(f"{k} {v:.3g}" for k, v in row.items()
                                  if isinstance(v, float)), file=sys.stderr, flush=True)
    return {"rows": rows, "blas": blas,
            "versions": {"numpy": np.__version__,
                         **{k: __import__(m).__version__ for k, m in
                            (("torch", "torch"), ("jax", "jax")) if _has(m)}}}


def with_blas(steps: dict, blas: dict) -> dict:
    """`steps` and, for each runner with a product list, its products ("<runner> blas")."""
    out = dict(steps)
    for k, run in blas.items():
        if k in steps:
            out[f"{k} blas"] = run
        elif k.endswith(" dispatch") and k[:-len(" dispatch")] in steps:
            out[f"{k[:-len(' dispatch')]} blas dispatch"] = run
    return out


def products_ms(r: dict, runner: str) -> float:
    """A runner's matrix products in a row: their time, less its dispatch where timed."""
    return max(r[runner + " blas"] - r.get(runner + " blas dispatch", 0.0), 0.0)


def grad_row(name, module, fn, sizes, params, inputs, frameworks, args, blas) -> dict:
    """A gradient step of every runner; "diff" compares each gradient with adc's."""
    import numpy as np
    import adcompiler as adc
    from adc_runtime.executor import Runner
    vg = adc.value_and_grad(module, fn.name, wrt=params, dims=sizes)

    def adc_step():
        return vg(**inputs)

    loss, grads = adc_step()
    ref = {k: np.asarray(g, np.float64) for k, g in zip(params, grads)}
    row = {"model": name, "step": "grad", "threads": args.nthreads}
    forward = adc.function(module, fn.name, dims=sizes)
    row["flops"] = flop_ratio(vg, forward, sizes)
    steps = {"adc": adc_step, "adc fwd": lambda: forward(**inputs)}
    if args.interpreter:
        run = Runner(vg.module, vg.fn_name)

        def interp_step():
            return run(inputs, sizes)

        outs = interp_step()[0]
        steps["adc interpreter"] = interp_step
        row["adc interpreter diff"] = rel_diff(dict(zip(params, outs[1:])), ref)
    order = [a.name for a in fn.args]
    idx = [order.index(p) for p in params]
    for peer, o in frameworks.items():
        loss_fn = peer_loss(name, o)
        if peer == "torch eager":
            import torch
            tin = [torch.from_numpy(inputs[k]) for k in order]
            for k in idx:
                tin[k].requires_grad_(True)

            def step(tin=tin, loss_fn=loss_fn):
                out = loss_fn(*tin)
                return out, torch.autograd.grad(out, [tin[k] for k in idx])

            _, g = step()
            g = [t.numpy() for t in g]

            def fwd(tin=tin, loss_fn=loss_fn):
                with torch.no_grad():
                    return loss_fn(*tin)
        else:
            import jax
            jin = [jax.numpy.asarray(inputs[k]) for k in order]
            f = jax.jit(jax.value_and_grad(loss_fn, argnums=tuple(idx)))

            def step(f=f, jin=jin):
                out = f(*jin)
                jax.block_until_ready(out)
                return out

            g = [np.asarray(t) for t in step()[1]]
            jf = jax.jit(loss_fn)

            def fwd(jf=jf, jin=jin):
                return jax.block_until_ready(jf(*jin))
        steps[peer] = step
        steps[f"{peer} fwd"] = fwd
        row[f"{peer} diff"] = rel_diff(dict(zip(params, g)), ref)
    row.update(time_steps(with_blas(steps, blas), args))
    return row


def flop_ratio(grad, forward, sizes) -> float:
    """FLOPs of adc's gradient program over those of its forward program."""
    from adcompiler.memory.flops import function_flops
    g = function_flops(grad.module[grad.fn_name], sizes, grad.module)
    f = function_flops(forward.module[forward.fn_name], sizes, forward.module)
    return g / f


def train_row(name, module, fn, sizes, params, inputs, frameworks, args, blas) -> dict:
    """A training step (Adam, lr 1e-3) of every runner; each starts from the workload's
    parameters, and "diff" compares the parameters after one update with adc's."""
    import numpy as np
    import adcompiler as adc
    order = [a.name for a in fn.args]
    batch = {k: v for k, v in inputs.items() if k not in params}
    # fused from the first call: the steady state of a run longer than FUSE_AFTER_S
    step = adc.train_step(module, adc.optim.adam(LR), fn=fn.name, dims=sizes, fuse=True)
    p0 = {k: inputs[k] for k in params}
    now = {"p": p0, "s": step.init(p0)}

    def adc_step():
        now["p"], now["s"], _ = step(now["p"], now["s"], batch)

    adc_step()
    ref = {k: np.asarray(v, np.float64) for k, v in now["p"].items()}
    steps, row = {"adc": adc_step}, {"model": name, "step": "train", "threads": args.nthreads}
    for peer, o in frameworks.items():
        loss_fn = peer_loss(name, o)
        if peer == "torch eager":
            import torch
            tin = {k: torch.tensor(inputs[k], requires_grad=k in params) for k in order}
            opt = torch.optim.Adam([tin[k] for k in params], lr=LR)

            def one(tin=tin, opt=opt, loss_fn=loss_fn):
                opt.zero_grad()
                loss_fn(*[tin[k] for k in order]).backward()
                opt.step()

            one()
            got = {k: tin[k].detach().numpy() for k in params}
        else:
            import jax
            if not _has("optax"):
                continue
            import optax
            tx = optax.adam(LR)

            def loss_of(p, b, loss_fn=loss_fn):
                return loss_fn(*[p[k] if k in p else b[k] for k in order])

            def train(p, s, b, tx=tx, loss_of=loss_of):
                g = jax.grad(loss_of)(p, b)
                updates, s = tx.update(g, s, p)
                return optax.apply_updates(p, updates), s

            jstep = jax.jit(train, donate_argnums=(0, 1))
            jp = {k: jax.numpy.asarray(inputs[k]) for k in params}
            jb = {k: jax.numpy.asarray(v) for k, v in batch.items()}
            held = {"p": jp, "s": tx.init(jp)}

            def one(held=held, jstep=jstep, jb=jb):
                held["p"], held["s"] = jstep(held["p"], held["s"], jb)
                jax.block_until_ready(held["p"])

            one()
            got = {k: np.asarray(v) for k, v in held["p"].items()}
        steps[peer] = one
        row[f"{peer} diff"] = rel_diff(got, ref)
    row.update(time_steps(with_blas(steps, blas), args))
    return row


def _has(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


# ---- the parent: one child per thread count, one table ---------------------------------

def table(rows: list[dict]) -> str:
    peers = [p for p in ("torch eager", "jax.jit") if any(p in r for r in rows)]
    interp = any("adc interpreter" in r for r in rows)
    head = ["workload", "step", "threads", "adc ms"]
    if interp:
        head += ["interpreter ms"]
    for p in peers:
        head += [f"{p} ms", f"adc / {p}", f"grad diff vs {p}"]
    fwd = any("adc fwd" in r for r in rows)
    if fwd:
        head += ["adc grad/fwd"] + [f"{p} grad/fwd" for p in peers] + ["FLOPs grad/fwd"]
    head.append("load")
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        cells = [r["model"], r["step"], str(r["threads"]), f"{r['adc']:.3f}"]
        if interp:
            cells.append(f"{r['adc interpreter']:.3f}" if "adc interpreter" in r else "-")
        for p in peers:
            if p in r:
                cells += [f"{r[p]:.3f}", f"{r['adc'] / r[p]:.2f}", f"{r[p + ' diff']:.1e}"]
            else:
                cells += ["-", "-", "-"]
        if fwd:
            cells += [f"{r[k] / r[k + ' fwd']:.2f}" if k + " fwd" in r else "-"
                      for k in ("adc", *peers)]
            cells.append(f"{r['flops']:.2f}" if "flops" in r else "-")
        cells.append(f"{r.get('load', 0):.1f}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def blas_table(rows: list[dict]) -> str:
    """Each runner's step split into its matrix products and the rest (`blas_time.py`),
    and adc's time outside BLAS over each peer's."""
    runners = [p for p in ("adc", "torch eager", "jax.jit") if any(p + " blas" in r for r in rows)]
    peers = [p for p in runners if p != "adc"]
    head = ["workload", "step", "threads", "load"]
    for p in runners:
        head += [f"{p} BLAS ms", f"{p} outside BLAS ms"]
    head += [f"adc / {p} outside BLAS" for p in peers]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        cells = [r["model"], r["step"], str(r["threads"]), f"{r.get('load', 0):.1f}"]
        rest = {}
        for p in runners:
            if p + " blas" in r and p in r:
                rest[p] = r[p] - products_ms(r, p)
                cells += [f"{products_ms(r, p):.3f}", f"{rest[p]:.3f}"]
            else:
                cells += ["-", "-"]
        for p in peers:
            ok = p in rest and "adc" in rest and rest[p] > 0
            cells.append(f"{rest['adc'] / rest[p]:.2f}" if ok else "-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sys.path.insert(0, str(HERE))
    from sample_steps import SAMPLES
    names = list(WORKLOADS) + list(SAMPLES)
    ap.add_argument("--models", nargs="+", default=names, choices=names)
    ap.add_argument("--batch", type=int,
                    help="the samples' batch size (default: 64 digits, 16 rows of text)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="of the blocks' times per step (min: on a busy shared machine)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall-clock time, or the process's CPU time (all its threads): "
                         "on a machine whose cores other work keeps busy, the CPU time "
                         "leaves out the time spent waiting for a core")
    ap.add_argument("--steps-kind", dest="kinds", nargs="+", choices=("grad", "train"),
                    default=["grad", "train"], help="gradient and/or training steps")
    ap.add_argument("--interpreter", action="store_true",
                    help="also time adc's NumPy interpreter")
    ap.add_argument("--out", help="also write the table (Markdown) here")
    ap.add_argument("--nthreads", type=int, help=argparse.SUPPRESS)  # a child's count
    args = ap.parse_args(argv)
    if args.nthreads is not None:
        print(json.dumps(child(args)))
        return 0
    rows, info = [], {}
    for n in args.threads:
        # ADC_FUSE=1: row passes from the first call (the steady state of a run that has
        # taken `ROWS_AFTER_S`), as `fuse=True` for the training steps
        env = dict(os.environ, ADC_FUSE=os.environ.get("ADC_FUSE", "1"),
                   OMP_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n),
                   MKL_NUM_THREADS=str(n),
                   XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                              + ("true" if n > 1 else "false")
                              + f" intra_op_parallelism_threads={n}").strip())
        cmd = [sys.executable, __file__, "--nthreads", str(n), "--steps", str(args.steps),
               "--stat", args.stat, "--clock", args.clock,
               "--repeats", str(args.repeats), "--warmup", str(args.warmup),
               "--steps-kind", *args.kinds,
               "--models", *args.models] + (["--interpreter"] if args.interpreter else []) \
            + (["--batch", str(args.batch)] if args.batch else [])
        print(f"running at {n} thread(s) ...", file=sys.stderr, flush=True)
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
        info = json.loads(done.stdout)
        rows += info["rows"]
    versions = ", ".join(f"{k} {v}" for k, v in info.get("versions", {}).items())
    text = (f"CPU gradient and training steps, {datetime.date.today()}: {platform.machine()}, "
            f"{os.cpu_count()} cores; {versions}; BLAS: {'; '.join(info.get('blas', []))}. "
            f"The {args.stat} of {args.repeats} blocks of {args.steps} steps (runners taking "
            f"turns) after {args.warmup} warm-up steps, {args.clock} time, float32; "
            f"load: the 1-minute load average when each row was measured.\n\n"
            + table(rows) + "\n\nThe steps split into their matrix products (BLAS) and "
            "the rest:\n\n" + blas_table(rows) + "\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
