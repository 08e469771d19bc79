"""Checkpointing imported CNNs: the training steps of ResNet-50, VGG-19 and DenseNet-121 (the
light models of the onnx wheel) under a sweep of memory budgets, against MONeT and
Checkmate.

    python benchmarks/remat_cnn.py                    # the three models (tens of minutes)
    python benchmarks/remat_cnn.py --quick            # SqueezeNet, 3 budgets (seconds)

Each model is imported with `adc.from_onnx(..., loss="cross_entropy")` at a fixed batch (its
input's and its Reshape's leading 1 set to the batch); the step is the adjoint of the
imported `loss`: the mean cross entropy of the model's output (its final softmax, taken as
the logits of `cross_entropy`) against seeded random labels, differentiated with respect to
every trained weight (the batch norms' running statistics are constants). The weights are
the model's own (ConstantOfShape); the data is seeded standard normal.

Per budget, from `min-memory`'s peak to store-all: the schedule's predicted peak and the
peak measured by running the step once (they must be equal: a difference stops the
benchmark), the recomputed FLOPs over the forward FLOPs, the step's time over store-all's
(CPU seconds, the lesser of two runs), the schedule's solve time
(wall and CPU seconds), what is proven about it and a lower bound on the recomputation
any schedule of adc's clone model needs at that budget (`remat.bound`), with the
schedule's gap to it. Memory is given as a share of store-all's peak, and as a share of
its activations: the peak over the bytes that do not grow with the batch (weights,
gradients), estimated as ``2 peak(B) - peak(2B)`` of store-all, the form comparable with
MONeT's batch of 184. For VGG-19 also the largest batch whose `min-memory` (and Chen's
segments') peak fits the store-all peak of the base batch (Checkmate's experiment).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adcompiler.diagnostics import AdcError  # noqa: E402
from adcompiler.memory import predict_peak  # noqa: E402
from adcompiler.remat.bound import recompute_bound  # noqa: E402
from adcompiler.remat.dag import build_problem  # noqa: E402
from adcompiler.remat.explain import remat_stats  # noqa: E402
from adcompiler.remat.policy import Policy  # noqa: E402
from adcompiler.remat.schedule import schedule  # noqa: E402
from adcompiler.remat.straight import schedule_baseline  # noqa: E402

# MONeT (Shah et al. 2021), ResNet-50 at batch 184: memory of store-all, step time over
# store-all, and the recomputation as a share of one forward pass (a step is about three)
MONET = [(0.66, 1.032, 0.10), (0.40, 1.093, 0.28), (0.33, 1.120, 0.36)]
CHECKMATE_VGG, CHEN_VGG = 1.76, 1.59     # Checkmate's ILP and Chen's greedy: VGG-19's batch
BATCH = {"resnet50": 8, "vgg19": 2, "densenet121": 4, "squeezenet": 1}


def light_path(name: str) -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def light_model(name: str, batch: int):
    """The wheel's light model with batch `batch`: the data input's, the output's and each
    constant Reshape shape's leading 1 set to it (the models are written for batch 1)."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(light_path(name))
    inits = {t.name: t for t in m.graph.initializer}
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.name not in inits and len(dims) and dims[0].dim_value == 1:
            dims[0].dim_value = batch
    del m.graph.value_info[:]
    for node in m.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            t = inits[node.input[1]]
            shape = numpy_helper.to_array(t).copy()
            if shape[0] == 1:
                shape[0] = batch
                t.CopyFrom(numpy_helper.from_array(shape, t.name))
    return m


class Step:
    """An imported model's training step: the adjoint `fn` of `loss` in `module`, inputs."""

    def __init__(self, name: str, batch: int, inputs: bool = True):
        import adcompiler as adc
        from adcompiler.cli.compile import compile_program
        self.name, self.batch = name, batch
        imp = adc.from_onnx(light_model(name, batch), loss="cross_entropy")
        trained = [k for k in imp.params if k not in imp.constants]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, f"{name}.tdsl")
            Path(path).write_text(imp.source)
            comp = compile_program(path, "reverse", "loss", wrt=trained)
        self.module, self.fn = comp.module, comp.run_name
        self.inputs = None
        if inputs:
            rng = np.random.default_rng(0)
            loss = self.module["loss"]
            x = loss.arg(imp.inputs[0]).type
            self.inputs = {**imp.params,
                           imp.inputs[0]: rng.standard_normal(x.shape).astype(np.float32),
                           "target": rng.integers(0, 1000, loss.arg("target").type.shape)}

    def peak(self, policy="none") -> int:
        return remat_stats(self.module, schedule(self.module, policy, self.fn), {})[
            "peak_bytes_predicted"]


def timed(fn, *args):
    c, w = time.process_time(), time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - w, time.process_time() - c


def run_step(step: Step, module) -> tuple[int, float]:
    """The measured peak and the CPU seconds of one run (on one BLAS thread the CPU time
    is the work done; on a shared machine the wall time mostly measures the other jobs)."""
    import gc
    from adc_runtime.executor import run_function
    gc.collect()
    gc.disable()    # as timeit: the schedules made so far would be scanned in the run
    try:
        start = time.process_time()
        _, rs = run_function(module, step.fn, step.inputs)
        return rs["peak_bytes"], time.process_time() - start
    finally:
        gc.enable()


def row(step: Step, policy, run: bool, base_time: float | None) -> dict:
    """One schedule: its stats, solve time, bound and (with `run`) measured peak and time."""
    sched, wall, cpu = timed(schedule, step.module, policy, step.fn, {})
    st = remat_stats(step.module, sched, {})
    r = {"policy": str(policy), "peak": st["peak_bytes_predicted"], "measured": None,
         "recompute": st["recompute_fraction"], "flops": st["recompute_flops"],
         "forward_flops": st["forward_flops"], "solve_wall": wall, "solve_cpu": cpu,
         "guarantee": st["guarantee"], "gap": st["gap"], "solver": st["solver"] or "store-all",
         "time": None}
    if isinstance(policy, Policy) and policy.kind == "budget":
        prob = build_problem(step.module, step.fn, {})
        lb = recompute_bound(prob, policy.budget)
        r["bound"] = None if lb is None else lb / st["forward_flops"]
    if run:
        # the first run of a module prepares it (its buffers planned, its ops specialized:
        # about a second for DenseNet's 4,000 ops), so the lesser of two runs counts
        r["measured"], r["time"] = run_step(step, sched.module)
        r["time"] = min(r["time"], run_step(step, sched.module)[1])
        if r["measured"] != r["peak"]:
            raise SystemExit(f"{step.name} {policy}: predicted peak {r['peak']:,} but "
                             f"measured {r['measured']:,}")
        if base_time:
            r["time"] /= base_time
    return r


def sweep(name: str, batch: int, points: int, run: bool, log=print) -> dict:
    step = Step(name, batch, inputs=run)
    store = row(step, "none", run, None)
    base_time = store["time"]
    store["time"] = 1.0 if run else None
    hi = store["peak"]
    fixed = 2 * hi - Step(name, 2 * batch, inputs=False).peak()
    lo = row(step, "min-memory", run, base_time)
    log(f"{name} batch {batch}: store-all {hi:,} bytes ({fixed:,} fixed), min-memory "
        f"{lo['peak']:,} in {lo['solve_wall']:.1f} s")
    budgets = {lo["peak"] + (hi - lo["peak"]) * k // (points - 1) for k in range(1, points - 1)}
    if name == "resnet50":
        budgets |= {int(fixed + f * (hi - fixed)) for f, _, _ in MONET}
    rows = []
    for b in sorted(x for x in budgets if lo["peak"] <= x < hi):
        try:
            r = row(step, Policy("budget", budget=b), run, base_time)
        except AdcError as e:
            r = {"policy": f"budget:{b}", "error": e.message}
        r["budget"] = b
        rows.append(r)
        log(json.dumps({k: v for k, v in r.items()}, default=str))
    chen = schedule_baseline(step.module, step.fn, {}, "chen")
    return {"name": name, "batch": batch, "store_all": hi, "fixed": fixed, "rows": rows,
            "min_memory": lo, "store": store,
            "chen_peak": predict_peak(chen[0], step.fn, {}).peak_bytes}


def max_batch(name: str, base: int, policy: str, limit: int) -> tuple[int, int]:
    """The largest batch whose `policy` peak fits the store-all peak at `base`: (batch,
    budget). `policy` ``min-memory`` or ``chen`` (Chen's √n segments)."""
    budget = Step(name, base, inputs=False).peak()

    def fits(b):
        s = Step(name, b, inputs=False)
        if policy == "chen":
            return predict_peak(schedule_baseline(s.module, s.fn, {}, "chen")[0], s.fn,
                                {}).peak_bytes <= budget
        return s.peak("min-memory") <= budget
    lo, hi = base, base + 1
    while hi <= limit and fits(hi):
        lo, hi = hi, min(2 * hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, budget


def _cell(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def table(results: list[dict], batches: list[tuple], quick: bool) -> str:
    lines = ["| model (batch) | budget | predicted peak = measured | of store-all | of its "
             "activations | recompute (of a forward) | lower bound | step CPU time (of store-all) "
             "| solve s (CPU) | solver, guarantee |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        hi, fixed = res["store_all"], res["fixed"]
        for r in [res["store"], res["min_memory"]] + res["rows"]:
            label = f"{res['name']} ({res['batch']})"
            if "error" in r:
                lines.append(f"| {label} | {r['budget']:,} | {r['error']} |" + " |" * 7)
                continue
            meas = f"{r['peak']:,}" + ("" if r["measured"] is None else " = measured")
            bud = r["policy"] if "budget" not in r else f"{r['budget']:,}"
            gap = "" if r.get("bound") is None or not r["recompute"] else \
                f" (gap {1 - r['bound'] / r['recompute']:.0%})"
            lines.append(
                f"| {label} | {bud} | {meas} | {r['peak'] / hi:.3f} "
                f"| {(r['peak'] - fixed) / (hi - fixed):.3f} | {r['recompute']:.3f} "
                f"| {_cell(r.get('bound'), '{:.3f}')}{gap} | {_cell(r['time'])} "
                f"| {r['solve_wall']:.2f} ({r['solve_cpu']:.2f}) "
                f"| {r['solver']}, {r['guarantee']} |")
    out = "\n".join(lines)
    if batches:
        out += ("\n\n| model | base batch | store-all peak there (the budget) | largest batch: "
                "min-memory | largest batch: Chen's segments | Checkmate ILP / Chen "
                "(their runs) |\n|---|---|---|---|---|---|\n")
        for name, base, budget, mm, chen in batches:
            out += (f"| {name} | {base} | {budget:,} | {mm} ({mm / base:.2f}x) "
                    f"| {chen} ({chen / base:.2f}x) | {CHECKMATE_VGG}x / {CHEN_VGG}x |\n")
    return out


def plot(results: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for res in results:
        hi, fixed = res["store_all"], res["fixed"]
        pts = sorted(((r["peak"] - fixed) / (hi - fixed), r["recompute"])
                     for r in [res["store"], res["min_memory"]] + res["rows"] if "error" not in r)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=4,
                label=f"adc: {res['name']} (batch {res['batch']})")
    ax.plot([m[0] for m in MONET], [m[2] for m in MONET], "k*", ms=11,
            label="MONeT: ResNet-50 (batch 184)")
    ax.set_xlabel("peak memory, share of store-all's activations")
    ax.set_ylabel("recomputed FLOPs / forward FLOPs")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="SqueezeNet at batch 1, 3 budgets, no batch search (a smoke test)")
    ap.add_argument("--models", default="resnet50,vgg19,densenet121")
    ap.add_argument("--batch", type=lambda s: dict(kv.split("=") for kv in s.split(",")),
                    default={}, help="e.g. resnet50=8,vgg19=2 (defaults: %s)" % BATCH)
    ap.add_argument("--points", type=int, default=8, help="budgets per model, ends included")
    ap.add_argument("--no-run", action="store_true", help="schedules only: no measured peaks")
    ap.add_argument("--base-batch", type=int, default=8,
                    help="VGG-19's batch search: the batch whose store-all peak is the "
                         "budget (8)")
    ap.add_argument("--max-batch", type=int, default=64,
                    help="VGG-19's batch search goes up to this (64; 0: skip)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results-remat-cnn.md"))
    ap.add_argument("--plot", default=str(ROOT / "benchmarks" / "results-remat-cnn.png"))
    args = ap.parse_args(argv)
    from adc_runtime.threads import set_blas_threads
    set_blas_threads(args.threads)
    names = ["squeezenet"] if args.quick else args.models.split(",")
    points = 3 if args.quick else args.points
    log = (lambda *a: None) if args.quick else (lambda *a: print(*a, file=sys.stderr,
                                                                 flush=True))
    results = [sweep(n, int(args.batch.get(n, BATCH[n])), points, not args.no_run, log)
               for n in names]
    batches = []
    if "vgg19" in names and args.max_batch and not args.quick:
        base = args.base_batch
        mm, budget = max_batch("vgg19", base, "min-memory", args.max_batch)
        chen, _ = max_batch("vgg19", base, "chen", args.max_batch)
        batches.append(("vgg19", base, budget, mm, chen))
    text = table(results, batches, args.quick)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    command = " ".join(["python benchmarks/remat_cnn.py"] + list(argv or sys.argv[1:]))
    body = (f"# Checkpointing imported CNNs (benchmarks/remat_cnn.py)\n\n`{command}`\n\n"
            f"{text}\n\n(load: {load})\n")
    print(body)
    if args.out:
        Path(args.out).write_text(body)
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
