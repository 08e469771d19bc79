"""Time one training step (forward, backward, global-norm clipping at 1.0, Adam at 1e-3) of
the benchmark models with adc and its peers, on the CPU or (``--gpu``) on a CUDA GPU.

    python benchmarks/bench_train.py                   # medium sizes (tens of ms a step)
    python benchmarks/bench_train.py --size small --steps 1 --repeats 1   # smoke test
    python benchmarks/bench_train.py --gpu --size full   # on a GPU: adc.train_step(device=
                                                         # "cuda"), PyTorch on CUDA, JAX's GPU

Models and sizes are bench_gpu.py's (benchmarks/models/*.tdsl; the same models for the
peers in peers.py), float32. Runners, where installed:

* adc: ``adc.train_step(model, adc.optim.adam(1e-3), clip=1.0)``, one compiled step program
  whose parameters and Adam state are updated in place; and the same step with a runner that
  writes them into new arrays ("no in-place update", runner ``adc-copy``);
* PyTorch eager: ``zero_grad(); loss.backward(); clip_grad_norm_(params, 1.0);
  optimizer.step()`` with ``torch.optim.Adam`` (its default implementation on the CPU);
* ``jax.jit`` of an optax step (``clip_by_global_norm(1.0)`` then ``adam(1e-3)``),
  parameters and state donated.

Every runner starts from the same parameters and takes the same batch each step. The table
compares each runner's loss with adc's after one update (the second step's loss: equal to
float32 rounding) and after the last step (Adam's first updates are about ``lr * sign(g)``,
which turns rounding in near-zero gradients into whole steps, so trajectories drift apart
by then). "allocated MiB / step" is the NumPy memory allocated during one adc step after
the warm-up (tracemalloc's peak; on the GPU: CuPy's pool during one step, a memory hook), next
to the bytes of the parameters and the Adam state. Every step ends by reading its loss to the
host, on either device, so the wall clock times whole steps.
Compile time ("compile s") is adc's pass pipeline and XLA's compilation, timed with the
warm-up steps. The table (Markdown) is printed and written to `--out`.
"""
from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_gpu import SIZES, Clock, header, installed, make_inputs  # noqa: E402
import peers  # noqa: E402

import numpy as np  # noqa: E402

LR, CLIP = 1e-3, 1.0


@dataclass
class Row:
    model: str
    runner: str
    step_ms: float | None = None
    compile_s: float | None = None
    losses: list = field(default_factory=list)  # every step's loss, in order
    alloc_mib: float | None = None   # NumPy memory allocated during one step (tracemalloc)
    held_mib: float | None = None    # the parameters and optimizer state


def program(model: str, sizes: dict):
    """The model with its sizes bound (static loop trip counts, as bench_gpu.py does)."""
    import adcompiler as adc
    from adcompiler.passes.to_dtype import bind_dims
    from adcompiler.passes.clone import clone_module
    return bind_dims(clone_module(adc.load(str(HERE / "models" / f"{model}.tdsl"))), sizes)


def split(model: str, module, sizes: dict, xp=np) -> tuple[dict, dict]:
    """The parameters and the batch, as arrays of `xp` (numpy, or cupy on the GPU)."""
    fn = module[model]
    inputs = {n: xp.asarray(v) for n, v in make_inputs(fn, sizes).items()}
    params = {n: v for n, v in inputs.items() if n in fn.params}
    return params, {n: v for n, v in inputs.items() if n not in fn.params}


def run_adc(model: str, sizes: dict, clock: Clock, in_place: bool = True,
            gpu: bool = False) -> Row:
    """adc's step; without `in_place`, its runner writes every new parameter and state
    array into a fresh one (the baseline that in-place updates remove)."""
    import adcompiler as adc
    device = "cuda" if gpu else "cpu"
    t0 = time.perf_counter()
    module = program(model, sizes)
    step = adc.train_step(module, adc.optim.adam(LR), clip=CLIP, device=device)
    if not in_place:
        step._runner = adc.runner(step.module, step.fn_name, device=device, donate=False)
    xp = np
    if gpu:
        import cupy as xp
    params, batch = split(model, module, sizes, xp)
    now = {"p": params, "s": step.init(params)}
    row = Row(model, "adc" if in_place else "adc, no in-place update")

    def one():
        now["p"], now["s"], m = step(now["p"], now["s"], batch)
        row.losses.append(float(m["loss"]))

    compile_s = time.perf_counter() - t0 + clock.warm(one)
    row.step_ms, row.compile_s = clock.time(one), compile_s
    if gpu:
        from adc_runtime.cuda import peak_memory_hook
        hook = peak_memory_hook(xp)
        with hook:
            one()
        row.alloc_mib = hook.peak / 2**20
    else:
        tracemalloc.start()
        one()
        row.alloc_mib = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    row.held_mib = sum(a.nbytes for d in (now["p"], now["s"]) for a in d.values()) / 2**20
    return row


def run_torch(model: str, sizes: dict, clock: Clock, gpu: bool = False) -> Row:
    import torch
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    module = program(model, sizes)
    params, batch = split(model, module, sizes)
    names = module[model].arg_names
    dev = "cuda" if gpu else "cpu"
    ts = {n: torch.tensor(v, device=dev, requires_grad=n in params)
          for n, v in {**params, **batch}.items()}
    wrt = [ts[n] for n in names if n in params]
    opt = torch.optim.Adam(wrt, lr=LR)
    ops = peers.torch_ops()
    row = Row(model, "torch eager")

    def one():
        opt.zero_grad()
        loss = peers.MODELS[model](ops, *[ts[n] for n in names])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(wrt, CLIP)
        opt.step()
        row.losses.append(loss.item())

    clock.warm(one)
    row.step_ms = clock.time(one)
    one()
    return row


def run_jax(model: str, sizes: dict, clock: Clock) -> Row:
    import jax
    import jax.numpy as jnp
    import optax
    module = program(model, sizes)
    params, batch = split(model, module, sizes)
    names = module[model].arg_names
    ops = peers.jax_ops()

    def loss_fn(p, b):
        return peers.MODELS[model](ops, *[p[n] if n in p else b[n] for n in names])

    tx = optax.chain(optax.clip_by_global_norm(CLIP), optax.adam(LR))

    def train(p, s, b):
        loss, g = jax.value_and_grad(loss_fn)(p, b)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    t0 = time.perf_counter()
    jstep = jax.jit(train, donate_argnums=(0, 1))
    p = {n: jnp.asarray(v) for n, v in params.items()}
    b = {n: jnp.asarray(v) for n, v in batch.items()}
    now = {"p": p, "s": tx.init(p)}
    row = Row(model, "jax.jit + optax")

    def one():
        now["p"], now["s"], loss = jstep(now["p"], now["s"], b)
        row.losses.append(float(loss))   # waits for the step

    clock.warm(one)
    row.compile_s = time.perf_counter() - t0
    row.step_ms = clock.time(one)
    one()
    return row


def _ratio(a, b) -> str:
    return "-" if a is None or b is None or not b else f"{a / b:.2f}"


def _f(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _rel(a: Row, b: Row | None, k: int) -> str:
    if b is None or a is b or len(a.losses) <= k or len(b.losses) <= k:
        return "-"
    return f"{abs(a.losses[k] - b.losses[k]) / max(abs(b.losses[k]), 1e-30):.1e}"


def table(rows: list[Row]) -> str:
    """One row per runner; the loss columns compare with adc's: after one update (the
    second step's loss) and after the last step (Adam's sign-like first steps amplify
    float32 rounding in near-zero gradients, so later losses drift apart)."""
    lines = ["| model | runner | step ms | compile s | adc step / this | allocated MiB / step "
             "| params + state MiB | loss after 1 update, rel. diff vs adc "
             "| final loss | final rel. diff |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model in dict.fromkeys(r.model for r in rows):
        group = [r for r in rows if r.model == model]
        adc = next((r for r in group if r.runner == "adc"), None)
        for r in group:
            mine = r is adc
            lines.append(
                f"| {model} | {r.runner} | {r.step_ms:.3f} | {_f(r.compile_s, '.2f')} | "
                f"{'-' if mine else _ratio(adc and adc.step_ms, r.step_ms)} | "
                f"{_f(r.alloc_mib, '.2f')} | {_f(r.held_mib, '.2f')} | {_rel(r, adc, 1)} | "
                f"{r.losses[-1]:.6g} | {_rel(r, adc, len(r.losses) - 1)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="medium")
    p.add_argument("--steps", type=int, default=10, help="steps per timed block (default 10)")
    p.add_argument("--repeats", type=int, default=5, help="timed blocks (default 5)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps (default 3)")
    p.add_argument("--models", default="mlp,transformer_block,deep_mlp")
    p.add_argument("--runners", default="adc,adc-copy,torch,jax",
                   help="which runners (those not installed are skipped; adc-copy: adc "
                   "without in-place updates)")
    p.add_argument("--out", default=str(HERE / "results-train.md"),
                   help="Markdown file to write")
    p.add_argument("--gpu", action="store_true", help="run every runner on the CUDA GPU")
    args = p.parse_args(argv)
    runners = set(args.runners.split(","))
    clock = Clock(args.steps, args.repeats, args.warmup)
    rows: list[Row] = []
    for model in args.models.split(","):
        sizes = SIZES[args.size][model]
        if "adc" in runners:
            rows.append(run_adc(model, sizes, clock, gpu=args.gpu))
        if "adc-copy" in runners:
            rows.append(run_adc(model, sizes, clock, in_place=False, gpu=args.gpu))
        if "torch" in runners and installed("torch"):
            rows.append(run_torch(model, sizes, clock, args.gpu))
        if "jax" in runners and installed("jax") and installed("optax"):
            rows.append(run_jax(model, sizes, clock))
        print(f"done: {model}", file=sys.stderr)
    args.cpu, args.dtype = not args.gpu, "f32"
    head = header(args.gpu, args).replace("adc's peak memory row is the gradient step.",
                                       "One training step: forward, backward, clip, Adam.")
    text = head + "\n" + table(rows) + "\n"
    print(text)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
