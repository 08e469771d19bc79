"""Data-parallel training steps under MPI: step time at 1 and 2 processes, the bytes each
step all-reduces, and how much of the all-reduce the overlap with the backward pass hides;
then a model of larger runs.

    python benchmarks/bench_distributed.py                     # medium sizes, N = 1, 2
    python benchmarks/bench_distributed.py --size small --steps 3 --repeats 1   # smoke

For each model (benchmarks/models: the MLP and the transformer block, float32, Adam,
clipping at 1.0) and each N, ``mpiexec -n N`` runs this file as a worker in three modes:

* ``local``: the step without any all-reduce (each process alone: the compute);
* ``overlap``: the compiled step with the ``allreduce`` pass, each bucket's all-reduce
  started as soon as the reverse sweep finishes it;
* ``blocking``: the same buckets, all-reduced after the backward pass.

The global batch is the model's batch B; each process takes B / N rows. "hidden" is the
share of the blocking schedule's communication time that the overlapped one does not pay:
(blocking - overlap) / (blocking - local). MPICH's non-blocking collectives progress only
inside MPI calls unless ``MPIR_CVAR_ASYNC_PROGRESS=1`` starts a progress thread:
``--async-progress`` sets it (on this 2-core machine that thread competes for a core).

The model (`ring_model`) predicts weak scaling (B / N fixed per process) on N = 8 ... 1024
processes from the measured compute: a ring all-reduce of b bytes costs
``2 (N-1)/N * b / bandwidth + 2 (N-1) * latency``; buckets are ready evenly through the
backward pass (2/3 of the step's compute) and each runs as soon as the one before it is
done, so only what does not fit under the rest of the backward pass is exposed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BANDWIDTH = 25e9     # bytes/s: the interconnect the model assumes
LATENCY = 5e-6       # s per message hop
ITEMSIZE = {"f16": 2, "f32": 4, "f64": 8}


def worker(model: str, size: str, mode: str, bucket_mb: float, steps: int,
           repeats: int) -> None:
    import numpy as np
    import adcompiler as adc
    from adc_runtime.collectives import MPI
    from bench_gpu import SIZES
    from bench_train import program, split
    comm = MPI()
    sizes = dict(SIZES[size][model])
    params, batch = split(model, program(model, sizes), sizes)
    per = sizes["B"] // comm.size
    batch = {k: v[comm.rank * per:(comm.rank + 1) * per] for k, v in batch.items()}
    local = dict(sizes, B=per)
    step = adc.train_step(program(model, local), adc.optim.adam(1e-3), clip=1.0,
                          comm=None if mode == "local" else comm, bucket_mb=bucket_mb,
                          overlap=mode != "blocking")
    fn = step.module[step.fn_name]
    starts = [op.result for op in fn.body.ops if op.name == "allreduce_start"]
    nbytes = sum(math.prod(v.type.shape) * ITEMSIZE[v.type.dtype] for v in starts)
    now = {"p": params, "s": step.init(params)}

    def one():
        now["p"], now["s"], _ = step(now["p"], now["s"], batch)

    for _ in range(3):
        one()
    times = []
    for _ in range(repeats):
        comm.comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            one()
        comm.comm.Barrier()
        times.append((time.perf_counter() - t0) / steps)
    if comm.rank == 0:
        print(json.dumps({"model": model, "n": comm.size, "mode": mode,
                          "step_ms": 1e3 * sorted(times)[len(times) // 2],
                          "bytes": nbytes, "buckets": len(starts)}))


def launch(n: int, argv: list[str], async_progress: bool) -> dict:
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or \
        shutil.which("mpiexec")
    if mpiexec is None:
        sys.exit("bench_distributed: no mpiexec (pip install -e '.[mpi]')")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if async_progress:
        env["MPIR_CVAR_ASYNC_PROGRESS"] = "1"
    r = subprocess.run([mpiexec, "-n", str(n), sys.executable, __file__, "--worker", *argv],
                       capture_output=True, text=True, timeout=600, env=env)
    if r.returncode:
        sys.exit(f"bench_distributed: a worker failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def ring_model(compute_s: float, grad_bytes: int, n: int, bucket_bytes: float,
               bandwidth: float = BANDWIDTH, latency: float = LATENCY) -> float:
    """Predicted step time (s) of N processes: compute plus the exposed all-reduce."""
    if n == 1:
        return compute_s
    k = max(1, math.ceil(grad_bytes / bucket_bytes))
    each = grad_bytes / k
    per_bucket = 2 * (n - 1) / n * each / bandwidth + 2 * (n - 1) * latency
    backward = compute_s * 2 / 3
    done = 0.0   # when the all-reduce of each bucket ends, from the backward's start
    for j in range(1, k + 1):
        ready = backward * j / k
        done = max(done, ready) + per_bucket
    return compute_s + max(0.0, done - backward)


def best_bucket(compute_s: float, grad_bytes: int, n: int) -> tuple[float, float]:
    """The bucket size (bytes) with the least predicted step time, and that time."""
    sizes = [2 ** e for e in range(16, 31)]   # 64 KiB ... 1 GiB
    return min(((s, ring_model(compute_s, grad_bytes, n, s)) for s in sizes),
               key=lambda t: t[1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="medium", choices=("small", "medium", "full"))
    p.add_argument("--models", default="mlp,transformer_block")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--async-progress", action="store_true")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(*args.worker[:1], args.size, args.worker[1], args.bucket_mb, args.steps,
               args.repeats)
        return
    common = ["--size", args.size, "--steps", str(args.steps), "--repeats",
              str(args.repeats), "--bucket-mb", str(args.bucket_mb)]
    rows = []
    for model in args.models.split(","):
        for n in (1, 2):
            for mode in ("local", "overlap", "blocking"):
                r = launch(n, [model, mode, *common], args.async_progress)
                rows.append(r)
                print(f"  {model} N={n} {mode}: {r['step_ms']:.2f} ms", file=sys.stderr)
    print(f"| model | N | local ms | overlap ms | blocking ms | all-reduced/step | buckets "
          f"| hidden |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    by = {(r["model"], r["n"], r["mode"]): r for r in rows}
    for model in args.models.split(","):
        for n in (1, 2):
            loc, ov, bl = (by[(model, n, m)] for m in ("local", "overlap", "blocking"))
            comm_ms = bl["step_ms"] - loc["step_ms"]
            hidden = (bl["step_ms"] - ov["step_ms"]) / comm_ms if n > 1 and comm_ms > 0 \
                else float("nan")
            print(f"| {model} | {n} | {loc['step_ms']:.2f} | {ov['step_ms']:.2f} | "
                  f"{bl['step_ms']:.2f} | {ov['bytes'] / 2**20:.2f} MiB | {ov['buckets']} | "
                  f"{hidden:.0%} |")
    print(f"\nModel: weak scaling, ring all-reduce at {BANDWIDTH / 1e9:.0f} GB/s and "
          f"{LATENCY * 1e6:.0f} us, compute = the measured 1-process step, buckets of "
          f"{args.bucket_mb:g} MiB and the best size\n")
    print(f"| model | N | step ms ({args.bucket_mb:g} MiB) | efficiency | best bucket | "
          "step ms (best) | efficiency |\n|---|---:|---:|---:|---:|---:|---:|")
    for model in args.models.split(","):
        loc = by[(model, 1, "local")]
        c, g = loc["step_ms"] / 1e3, by[(model, 1, "overlap")]["bytes"]
        for n in (8, 64, 256, 1024):
            t = ring_model(c, g, n, args.bucket_mb * 2**20)
            s, tb = best_bucket(c, g, n)
            print(f"| {model} | {n} | {1e3 * t:.2f} | {c / t:.0%} | {s / 2**20:g} MiB | "
                  f"{1e3 * tb:.2f} | {c / tb:.0%} |")


if __name__ == "__main__":
    main()
