"""A gradient step under a sweep of memory budgets: predicted peak against measured peak.

    python benchmarks/memory_budget_sweep.py                       # the 12-block GPT on a GPU
    python benchmarks/memory_budget_sweep.py --cpu --size small    # the same on the CPU

For each budget (a fraction of the way from the least predicted peak any schedule reaches,
remat ``min-memory``, at 0 to the predicted peak without rematerialization at 1, both of the
unfused adjoint that the remat scheduler sees), the gradient of the model
(benchmarks/models/, `bench_gpu` sizes) is scheduled with the remat policy ``budget:BYTES``
and run once: on the GPU by generated step code (the program fused as the library's
``device="cuda"`` runner fuses it), its peak measured by a memory hook on CuPy's pool with
the inputs allocated inside it; on the CPU by the NumPy executor, whose live-byte accounting
is the measurement. The prediction is `adcompiler.memory.liveness.predict_peak` of the
program that ran. A budget below every schedule is reported as such (the smallest peak it
can reach), not run.

The table gives, per budget, the predicted and measured peaks, their ratio, the recomputed
FLOPs, and the run's time; the last lines say whether the measured peak is monotone in the
budget (it should never grow when the budget shrinks) and the largest deviation of measured
from predicted. With matplotlib installed, a plot of both peaks against the budget is
written beside the table (``--out`` with ``.png``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
os.environ.setdefault("CUPY_TF32", "0")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_gpu  # noqa: E402

FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


def _program(model: str, sizes: dict, policy: str, gpu: bool):
    """(module, function name, predicted peak, remat stats) of the gradient under `policy`."""
    from adcompiler.cli.remat import apply_remat
    from adcompiler.emit.cuda import ensure_fused
    from adcompiler.memory.liveness import predict_peak
    grad = bench_gpu.load(model, sizes, "reverse")
    module, stats, _ = apply_remat(grad.module, grad.run_name, policy, sizes)
    if gpu:
        module = ensure_fused(module, rows=True)
    return module, grad.run_name, predict_peak(module, grad.run_name, sizes).peak_bytes, stats


def _measure(module, name: str, inputs: dict, gpu: bool) -> tuple[int, float]:
    """(measured peak bytes, seconds) of one run of `name`, inputs included."""
    fn = module[name]
    if not gpu:
        from adc_runtime.executor import Executor
        ex = Executor(module, np, {})
        t0 = time.perf_counter()
        ex.call(fn, [inputs[a.name] for a in fn.args])
        return ex.peak, time.perf_counter() - t0
    import cupy as cp
    from adcompiler.emit.cuda import kernel_specs
    from adc_runtime.cuda import peak_memory_hook
    from adc_runtime.cuda_step import CudaStepExecutor
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    hook = peak_memory_hook(cp)
    with hook:
        args = [cp.asarray(inputs[a.name]) for a in fn.args]
        ex = CudaStepExecutor(module, cp, {}, kernel_specs(module))
        cp.cuda.get_current_stream().synchronize()
        t0 = time.perf_counter()
        outs = ex.call(fn, args)
        cp.cuda.get_current_stream().synchronize()
        seconds = time.perf_counter() - t0
        del outs, args, ex
    pool.free_all_blocks()
    return hook.peak, seconds


def sweep(model: str, sizes: dict, fractions, gpu: bool) -> list[dict]:
    """One row per budget, largest budget last."""
    # the range the scheduler works in: the peaks of the unfused adjoint it schedules
    full = _program(model, sizes, "none", False)[2]
    least = _program(model, sizes, "min-memory", False)[2]
    inputs = bench_gpu.make_inputs(bench_gpu.load(model, sizes, "forward").primal, sizes)
    rows = []
    for frac in sorted(fractions):
        budget = int(least + (full - least) * frac)
        row = {"fraction": frac, "budget": budget}
        try:
            module, name, predicted, stats = _program(model, sizes, f"budget:{budget}", gpu)
        except Exception as e:  # the budget is below every schedule: an AdcError says so
            row["refused"] = str(e).splitlines()[0]
            rows.append(row)
            continue
        measured, seconds = _measure(module, name, inputs, gpu)
        row.update(predicted=predicted, measured=measured, seconds=seconds,
                   recompute_flops=stats.get("recompute_flops"))
        rows.append(row)
    return rows


def verdict(rows: list[dict]) -> dict:
    """Whether the measured peaks are monotone in the budget, and the largest |measured /
    predicted - 1|."""
    ran = [r for r in rows if "measured" in r]
    monotone = all(a["measured"] <= b["measured"] for a, b in zip(ran, ran[1:]))
    worst = max((abs(r["measured"] / r["predicted"] - 1) for r in ran if r["predicted"]),
                default=None)
    return {"monotone": monotone, "worst_deviation": worst, "runs": len(ran)}


def table(rows: list[dict], header: str) -> str:
    mib = lambda b: f"{b / 2**20:,.3f}"  # noqa: E731
    lines = [header, "", "| budget (min-memory 0, no remat 1) | budget MiB | predicted MiB "
             "| measured MiB | measured / predicted | recomputed GFLOP | run s |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['fraction']:.2f} | {mib(r['budget'])} | refused: "
                         f"{r['refused']} | | | | |")
            continue
        flops = r.get("recompute_flops")
        lines.append(f"| {r['fraction']:.2f} | {mib(r['budget'])} | {mib(r['predicted'])} | "
                     f"{mib(r['measured'])} | {r['measured'] / r['predicted']:.4f} | "
                     f"{'-' if flops is None else f'{flops / 1e9:.3f}'} | {r['seconds']:.3f} |")
    v = verdict(rows)
    worst = "-" if v["worst_deviation"] is None else f"{100 * v['worst_deviation']:.2f}%"
    lines += ["", f"measured peak monotone in the budget: {'yes' if v['monotone'] else 'NO'}; "
              f"largest deviation of measured from predicted: {worst} ({v['runs']} runs)"]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ran = [r for r in rows if "measured" in r]
    fig, ax = plt.subplots(figsize=(6, 4))
    x = [r["budget"] / 2**20 for r in ran]
    ax.plot(x, [r["predicted"] / 2**20 for r in ran], "o-", label="predicted")
    ax.plot(x, [r["measured"] / 2**20 for r in ran], "s--", label="measured")
    ax.plot(x, x, ":", color="grey", label="budget")
    ax.set_xlabel("budget (MiB)")
    ax.set_ylabel("peak (MiB)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gpt", choices=sorted(bench_gpu.FULL))
    p.add_argument("--size", choices=sorted(bench_gpu.SIZES), help="default: full on the GPU, "
                   "small with --cpu")
    p.add_argument("--fractions", default=",".join(map(str, FRACTIONS)),
                   help="budgets: fractions of the way from the least peak (0) to the peak "
                        "without remat (1)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (NumPy)")
    p.add_argument("--out", default=str(HERE / "results-memory-budget.md"))
    args = p.parse_args(argv)
    gpu = not args.cpu
    size = args.size or ("small" if args.cpu else "full")
    sizes = bench_gpu.SIZES[size][args.model]
    fractions = [float(f) for f in args.fractions.split(",")]
    if any(not 0 <= f <= 1 for f in fractions):
        p.error("--fractions: each must be in [0, 1]")
    rows = sweep(args.model, sizes, fractions, gpu)
    where = "GPU (CuPy memory pool)" if gpu else "CPU (the executor's live bytes)"
    dims = ", ".join(f"{k}={v}" for k, v in sizes.items())
    text = table(rows, f"Gradient of {args.model} ({dims}) under memory budgets; measured on "
                       f"the {where}.")
    print(text)
    out = Path(args.out)
    out.write_text(text)
    if plot(rows, out.with_suffix(".png")):
        print(f"plot: {out.with_suffix('.png')}")
    return 0 if verdict(rows)["monotone"] else 1


if __name__ == "__main__":
    sys.exit(main())
