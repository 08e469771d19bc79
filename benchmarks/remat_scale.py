"""Remat at scale: how long scheduling takes, what it recomputes against the baselines, and
whether the predicted peak is the measured one.

    python benchmarks/remat_scale.py                 # everything (tens of minutes)
    python benchmarks/remat_scale.py --quick         # 4 budgets, the smaller sizes

Part 1, unrolled networks (no loop: straight-line code, as most PyTorch models are
written): MLPs of 32, 64 and 128 layers and transformer stacks of 12 and 24 blocks. For a
sweep of budgets from `min-memory` to store-all: the time to schedule (every run's measured
peak is checked equal to the predicted one) and which solver made the schedule. Then the
baselines, Chen's √n segments and the min-cut, each against the chain DP at the same
predicted peak (``budget:`` equal to the baseline's peak), and the DP's recomputation over
the MILP's proven optimum at three budgets of the sweep (the MILP alone, `--milp-seconds`).

Part 2, loops: the tanh RNN sample over T = 10^3, 10^4, 10^5 steps under `revolve:2`,
`revolve:4`, `revolve:32`, `budget:` (half of store-all), `min-memory` and `sqrt`: the time
to schedule (the remat pass alone, in this process: CPU and wall seconds), the size of the
scheduled adjoint in ops (with the functions of its shared parts, counted too), the plan (slots,
tape length), its recomputed steps against the binomial optimum for those slots and tapes
(`binomial.cost`), and the predicted peak against the measured one, for the schedules that
run at most `--run-evals` step evaluations. A cell that runs past `--cap` seconds says so.
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adcompiler.cli.compile import compile_program  # noqa: E402
from adcompiler.passes.to_dtype import bind_dims  # noqa: E402
from adcompiler.files.inputs import DimBinder, random_inputs  # noqa: E402
from adcompiler.diagnostics import AdcError  # noqa: E402
from adcompiler.ir.calls import calls_bottom_up  # noqa: E402
from adcompiler.memory import predict_peak  # noqa: E402
from adcompiler.remat.explain import remat_stats  # noqa: E402
from adcompiler.remat.policy import Policy  # noqa: E402
from adcompiler.remat.schedule import schedule  # noqa: E402
from adcompiler.remat.straight import schedule_baseline  # noqa: E402
from adc_runtime.executor import run_function  # noqa: E402


def mlp(layers: int, width: int = 32, batch: int = 32) -> str:
    args = ", ".join(f"param W{k}: f32[{width}, {width}], param b{k}: f32[{width}]"
                     for k in range(layers))
    body = "".join(f"    h{k + 1} = tanh(h{k} @ W{k} + b{k})\n" for k in range(layers))
    return (f"def mlp(x: f32[{batch}, {width}], {args}) -> f32 {{\n    h0 = x\n{body}"
            f"    return mean(h{layers} * h{layers})\n}}\n")


def transformer(blocks: int, t: int = 16, d: int = 16) -> str:
    args, body = [], []
    for k in range(blocks):
        args.append(", ".join(f"param {w}{k}: f32[{d}, {d}]" for w in ("Wq", "Wk", "Wv", "Wo"))
                    + f", param W1{k}: f32[{d}, {2 * d}], param W2{k}: f32[{2 * d}, {d}]"
                    + f", param g{k}: f32[{d}], param e{k}: f32[{d}]")
        body.append(
            f"    s{k} = (h{k} @ Wq{k}) @ transpose(h{k} @ Wk{k}) * 0.25\n"
            f"    a{k} = layernorm(h{k} + softmax(s{k}, axis=-1) @ (h{k} @ Wv{k}) @ Wo{k},"
            f" g{k}, e{k})\n"
            f"    h{k + 1} = a{k} + gelu(a{k} @ W1{k}) @ W2{k}\n")
    return (f"def stack(x: f32[{t}, {d}], target: f32[{t}, {d}], {', '.join(args)}) -> f32 {{\n"
            f"    h0 = x\n{''.join(body)}    return mse(h{blocks}, target)\n}}\n")


def late_reads(dtype: str = "f32") -> str:
    """Layers around a segment (q, q @ C, r, r * p) whose reverse reads r, then q @ C, then
    q: a tape option that recomputes a dropped value right before its first use and holds
    it to its last holds more than it must (benchmarks/remat_warm_start.py)."""
    w = f"{dtype}[16, 16]"
    return (f"def f(x: {w}, param W0: {w}, param A: {w}, param B: {w}, param C: {w}, "
            f"param W1: {w}) -> {dtype} {{\n"
            "    h = tanh(x @ W0)\n    p = exp(h @ A)\n    q = tanh(p @ B)\n"
            "    r = sin(q @ C)\n    g = tanh((r * p) @ W1)\n    return sum(g)\n}\n")


class Timeout(Exception):
    pass


def capped(seconds: float, fn, *args):
    """(result, seconds), or (None, None) past `seconds`."""
    def alarm(*_):
        raise Timeout
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    try:
        return fn(*args), time.perf_counter() - start
    except Timeout:
        return None, None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def compiled(text: str, bind=None):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.tdsl"
        path.write_text(text)
        comp = compile_program(str(path), "reverse", bind=bind)
    module = bind_dims(comp.module, bind) if bind else comp.module
    inputs, _ = random_inputs(comp.run_fn, DimBinder(dict(bind or {})), 0)
    return module, comp.run_name, inputs


def checked(module, fn, sched, dims, inputs, run=True) -> dict:
    """The schedule's stats; with `run`, its measured peak, which must be the predicted one."""
    stats = remat_stats(module, sched, dims)
    if run:
        _, rs = run_function(sched.module, fn, inputs, dims=dims)
        stats["peak_bytes_measured"] = rs["peak_bytes"]
        if rs["peak_bytes"] != stats["peak_bytes_predicted"]:
            raise SystemExit(f"{fn} {sched.policy}: predicted peak "
                             f"{stats['peak_bytes_predicted']} but measured {rs['peak_bytes']}")
    return stats


def ops_of(module, fn) -> int:
    """Ops of `fn` and of the functions it calls (a long plan's parts)."""
    return sum(1 for name in calls_bottom_up(module, fn) for _ in module[name].walk())


def _cpu_capped(seconds, fn, *args):
    """`capped`, with the CPU seconds of this process (all its threads) as well: on a
    shared machine the wall time mostly measures the other jobs."""
    start = time.process_time()
    res, wall = capped(seconds, fn, *args)
    return res, wall, time.process_time() - start


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def _milp_optimum(module, fn, budget, seconds):
    """The MILP alone at `budget` (no cutoff): (exact peak, recomputed FLOPs) when HiGHS
    proves its optimum within `seconds`; "too large" or None (not proven) otherwise."""
    from adcompiler.remat import milp
    from adcompiler.remat.dag import build_problem
    from adcompiler.remat.straight import _apply, _flops
    prob = build_problem(module, fn, {})
    if milp.model_size(prob) > milp.MAX_VARIABLES:
        return "too large"
    sol = milp.solve(prob, budget, seconds)
    if not (sol.optimal and sol.feasible):
        return None
    return _apply(module, fn, sol.clones, {})[3], _flops(prob, sol.clones)


def _dp_alone(module, fn, budget, whole=False, segment_milp=True):
    """The chain DP alone at `budget`: (exact peak, recomputed FLOPs, CPU s) or None;
    `whole`: on the chain of every cut point, each segment's tape kept whole;
    `segment_milp`: its segments' options refined by their MILP."""
    from adcompiler.remat.chain import build_chain
    from adcompiler.remat.chain_solve import solve_chain, solve_chains
    from adcompiler.remat.dag import build_problem
    from adcompiler.remat.straight import _apply, _flops
    start = time.process_time()
    prob = build_problem(module, fn, {})
    base = predict_peak(module, fn, {}).peak_bytes

    def exact(clones):
        return _apply(module, fn, clones, {})[3]
    if whole:
        ch = build_chain(prob, module, {}, with_options=False, merge=False)
        got = solve_chain(ch, budget, base, exact) if ch is not None else None
    else:
        got = solve_chains(prob, module, {}, budget, base, exact,
                           segment_milp=segment_milp)[1]
    if got is None:
        return None
    return got[1], _flops(prob, got[0].clones), time.process_time() - start


def _over(flops, opt) -> str:
    """FLOPs and their ratio to a proven optimum (when there is one)."""
    if not isinstance(opt, tuple):
        return f"{flops:,}"
    return f"{flops:,}, " + (f"{flops / opt[1]:.2f}" if opt[1] else
                             "1.00" if flops == 0 else "inf")


def exact(args) -> None:
    """The chain DP alone against the MILP's proven optimum, on networks small enough."""
    from adcompiler.remat import segment_milp
    print("\n## The chain DP against the MILP's proven optimum (small unrolled networks)\n")
    print("| model | budget (of store-all) | DP: recomputed FLOPs | MILP optimum: recomputed "
          "FLOPs | DP / optimum | DP, enumerated options only: FLOPs, / optimum "
          "| whole tapes: FLOPs, / optimum | schedule (`budget:`): FLOPs, / optimum, "
          "guarantee | DP CPU s | MILP s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    models = [("MLP", n, mlp(n, width=16, batch=16)) for n in (4, 8, 16)] + \
             [("transformer", n, transformer(n, t=8, d=8)) for n in (1, 2, 4)]
    for kind, n, text in models:
        module, fn, inputs = compiled(text)
        hi = predict_peak(module, fn, {}).peak_bytes
        floor = remat_stats(module, schedule(module, "min-memory", fn), {})
        lo = floor["peak_bytes_predicted"]
        if lo >= hi:
            print(f"| {kind} {n} | {hi:,} (100%): min-memory is store-all | | | | | | | | |")
            continue
        for frac in (0.25, 0.5, 0.75):
            b = lo + int((hi - lo) * frac)
            segment_milp._CACHE.clear()        # its time in this row's DP CPU s
            dp = _dp_alone(module, fn, b)
            enum = _dp_alone(module, fn, b, segment_milp=False)
            old = _dp_alone(module, fn, b, whole=True)
            st = remat_stats(module, schedule(module, Policy("budget", budget=b), fn), {})
            start = time.perf_counter()
            opt = _milp_optimum(module, fn, b, args.milp_seconds)
            took = time.perf_counter() - start
            dcell = "no fit" if dp is None else f"{dp[1]:,}"
            ocell = "too large" if opt == "too large" else \
                f"not proven in {args.milp_seconds:.0f} s" if opt is None else f"{opt[1]:,}"
            ratio = _over(dp[1], opt).split(", ")[1] if dp is not None and \
                isinstance(opt, tuple) else ""
            ecell = "no fit" if enum is None else _over(enum[1], opt)
            wcell = "no fit" if old is None else _over(old[1], opt)
            scell = f"{_over(st['recompute_flops'], opt)}, {st['guarantee']}"
            print(f"| {kind} {n} | {b:,} ({b / hi:.0%}) | {dcell} | {ocell} | {ratio} "
                  f"| {ecell} | {wcell} | {scell} "
                  f"| {'' if dp is None else f'{dp[2]:.2f}'} | {took:.1f} |", flush=True)


def networks(args) -> None:
    models = [("MLP", n, mlp(n)) for n in (32, 64, 128)] + \
             [("transformer", n, transformer(n)) for n in (12, 24)]
    if args.quick:
        models = [m for m in models if m[1] in (32, 12)]
    points = 4 if args.quick else 10
    print("## Unrolled networks (straight-line code)\n")
    print("| model | segments | CPU s per schedule: median / max | wall s: median / max "
          "| solver (of "
          f"{points}) | recompute at Chen's peak: budget: (its solver) vs Chen | at mincut's "
          "peak: budget: vs mincut | over the MILP's proven optimum | predicted = measured |")
    print("|---|---|---|---|---|---|---|---|---|")
    from adcompiler.memory import function_flops
    for kind, n, text in models:
        module, fn, inputs = compiled(text)
        none = checked(module, fn, schedule(module, "none", fn), {}, inputs)
        hi, fwd = none["peak_bytes_store_all"], none["forward_flops"]
        lo, t_lo, c_lo = _cpu_capped(args.cap, schedule, module, "min-memory", fn)
        if lo is None:
            print(f"| {kind} {n} | | | min-memory > {args.cap:.0f} s | | | | | |")
            continue
        floor = checked(module, fn, lo, {}, inputs)
        budgets = sorted({floor["peak_bytes_predicted"]
                          + (hi - floor["peak_bytes_predicted"]) * k // (points - 1)
                          for k in range(points)})
        times, cpu, solvers, segments = [t_lo], [c_lo], {}, floor["straight_line"]["segments"]
        sweep = {}
        for b in budgets:
            s, t, c = _cpu_capped(args.cap, schedule, module, Policy("budget", budget=b), fn)
            if s is None:
                times.append(float("inf"))
                continue
            st = checked(module, fn, s, {}, inputs)
            times.append(t)
            cpu.append(c)
            sweep[b] = st
            solvers[st["solver"] or "store-all"] = solvers.get(st["solver"] or "store-all", 0) + 1
        cells = []
        for name in ("chen", "mincut"):
            base = schedule_baseline(module, fn, {}, name)
            peak = predict_peak(base[0], fn, {}).peak_bytes
            rec = function_flops(base[0][fn], {}, base[0], only_recompute=True) / fwd
            fell = " (store-all: the cut peaked higher)" if base[1].fallback_peak else ""
            try:
                ex, _ = capped(args.cap, schedule, module, Policy("budget", budget=peak), fn)
                es = checked(module, fn, ex, {}, inputs) if ex else None
            except AdcError:
                es = None
            got = "-" if es is None else \
                f"{es['recompute_fraction']:.2f}x ({es['solver'] or 'store-all'})"
            cells.append(f"{got} vs {rec:.2f}x (peak {peak / hi:.0%} of store-all{fell})")
        cellm = []
        for b in budgets[1:-1:3] if args.milp_seconds > 0 else ():
            opt = _milp_optimum(module, fn, b, args.milp_seconds)
            if opt == "too large":
                cellm = ["MILP too large"]
                break
            cellm.append(f"not proven in {args.milp_seconds:.0f} s" if opt is None else
                         f"{sweep[b]['recompute_flops'] / max(opt[1], 1):.2f}x at {b / hi:.0%}")
        milp_cell = ", ".join(sorted(set(cellm), key=cellm.index))
        finite = [t for t in times if t != float("inf")]
        worst = "> cap" if len(finite) < len(times) else f"{max(finite):.2f}"
        used = ", ".join(f"{k} {v}" for k, v in sorted(solvers.items()))
        print(f"| {kind} {n} | {segments} | {_median(cpu):.2f} / {max(cpu):.2f} "
              f"| {_median(finite):.2f} / {worst} | {used} "
              f"| {cells[0]} | {cells[1]} | {milp_cell} | yes |", flush=True)


def loops(args) -> None:
    from adcompiler.remat.binomial import cost
    rnn = (ROOT / "samples" / "rnn.tdsl").read_text()
    module, fn, _ = compiled(rnn, {"T": 20})     # imports (HiGHS) outside the timings
    schedule(module, "min-memory", fn, {"T": 20})
    print("\n## Loops (samples/rnn.tdsl)\n")
    print("| T | policy | schedule CPU / wall (s) | adjoint ops (functions) | slots, tape "
          "| recomputed steps | binomial optimum | predicted peak | measured peak |")
    print("|---|---|---|---|---|---|---|---|---|")
    for T in args.loops:
        dims = {"T": T}
        module, fn, inputs = compiled(rnn, dims)
        store = remat_stats(module, schedule(module, "none", fn, dims), dims)
        budget = store["peak_bytes_store_all"] // 2
        for policy in ("revolve:2", "revolve:4", "revolve:32", f"budget:{budget}",
                       "min-memory", "sqrt"):
            try:
                s, t, cpu = _cpu_capped(args.cap, schedule, module, policy, fn, dims)
            except AdcError as e:
                print(f"| {T:,} | {policy} | error: {e.message} | | | | | | |")
                continue
            if s is None:
                print(f"| {T:,} | {policy} | > {args.cap:.0f} | | | | | | |", flush=True)
                continue
            st = remat_stats(module, s, dims)
            lp = st["loops"][0]
            steps, c, L = lp["recomputed_steps"], lp["slots"], lp["tape_steps"]
            best = cost(T, c, L) if policy != "sqrt" else None
            measured = "not run"
            if T + steps <= args.run_evals:
                _, rs = run_function(s.module, fn, inputs, dims=dims)
                measured = f"{rs['peak_bytes']:,}"
                if rs["peak_bytes"] != st["peak_bytes_predicted"]:
                    raise SystemExit(f"T={T} {policy}: predicted peak "
                                     f"{st['peak_bytes_predicted']} but measured "
                                     f"{rs['peak_bytes']}")
            fns = len(calls_bottom_up(s.module, fn))
            print(f"| {T:,} | {policy} | {cpu:.2f} / {t:.2f} | {ops_of(s.module, fn):,} ({fns}) "
                  f"| {c}, {L} "
                  f"| {steps:,} | {'-' if best is None else f'{best:,}'} "
                  f"| {st['peak_bytes_predicted']:,} | {measured} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 budgets, the smaller models")
    ap.add_argument("--cap", type=float, default=120.0, help="seconds per schedule (120)")
    ap.add_argument("--loops", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1000, 10_000, 100_000], help="trip counts (1000,10000,100000)")
    ap.add_argument("--run-evals", type=int, default=50_000,
                    help="run (and check the peak of) loop schedules of at most this many "
                         "step evaluations, recomputation included (50000)")
    ap.add_argument("--only", choices=("networks", "exact", "loops"))
    ap.add_argument("--milp-seconds", type=float, default=60.0,
                    help="the MILP alone, for its proven optimum at 3 budgets per network "
                         "(seconds per solve; 0: skip) (60)")
    args = ap.parse_args()
    if args.only in (None, "networks"):
        networks(args)
    if args.only in (None, "exact"):
        exact(args)
    if args.only in (None, "loops"):
        loops(args)


if __name__ == "__main__":
    main()
