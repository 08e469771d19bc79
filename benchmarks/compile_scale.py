"""Compile time against program size: every stage timed on straight-line chains of 1k, 10k
and 100k ops, with the growth exponent fitted over the sizes (time ~ n^k; k should be
about 1, and at most 1.2).

    python benchmarks/compile_scale.py                        # reverse and hvp, 1k 10k 100k
    python benchmarks/compile_scale.py --sizes 1000 4000 --modes reverse

A chain is one op per line (``h = tanh(h)``, ``h = h * w``, ...) on an f64[8] value. The
stages: the TDSL frontend, each pass of the CLI's pipeline for the mode, the verifier, the
IR printer and parser, the Python emitter and the buffer plan of the derived function.
Times are CPU seconds of this (single-threaded) process: the wall time on an idle machine,
without the waits a shared one adds. Every stage runs with the garbage collector's
thresholds raised, as the `adc` command runs them, and the passes with the collector paused,
as `run_pipeline` runs them (`adcompiler.ir.gcpause`); "collect" is the end of that pause
(after the passes left more than 100,000 new objects, it moves them to the collector's
oldest generation, or runs a full collection: `adcompiler.ir.gcpause` says when). The total leaves out parse-ir, which `adc compile` does not run (it is
timed for `.ir` inputs); the "compile" row adds up what `adc compile --emit ir` runs: the
frontend, the passes (with the end of their pause) and the printer.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import adcompiler  # noqa: F401  (registers the ops)
from adcompiler.cli.compile import DEFAULT_PASSES, DERIVATIVE_PREP
from adcompiler.emit.python import emit_python
from adcompiler.frontend import compile_source
from adcompiler.ir.gcpause import collector_paused, fewer_collections
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import verify
from adcompiler.passes.pipeline import apply_pass, parse_pipeline, pass_spec
from adc_runtime.buffers import plan_block
from adc_runtime.executor import Executor

# the stages `adc compile --emit ir` does not run
NOT_COMPILE = ("verify", "parse-ir", "emit-python", "buffer-plan")
FORMS = ("h = tanh(h)", "h = h * w", "h = sin(h)", "h = h + w", "h = -h")


def chain_source(n: int) -> str:
    """A TDSL function of `n` ops in one dependent chain, then a sum."""
    lines = ["def chain(x: f64[8], param w: f64[8]) -> f64 {", "    h = x"]
    lines += ["    " + FORMS[k % len(FORMS)] for k in range(n)]
    lines += ["    return sum(h)", "}"]
    return "\n".join(lines) + "\n"


def count_ops(module) -> int:
    return sum(1 for f in module.functions.values() for _ in f.walk())


def compile_timed(n: int, mode: str, parse_ir: bool = True) -> tuple[dict[str, float], int]:
    """Seconds per stage for a chain of `n` ops compiled for `mode`; and the op count of
    the result."""
    times: dict[str, float] = {}

    def timed(stage, f, *args):
        t0 = time.process_time()
        r = f(*args)
        times[stage] = times.get(stage, 0.0) + time.process_time() - t0
        return r

    src = chain_source(n)
    derive = f"{mode}{{wrt=w fn=chain}}"
    owned = False
    with fewer_collections():  # as the adc command runs every stage (cli/app.py)
        module = timed("frontend", compile_source, src, "chain.tdsl")
        with collector_paused():  # as run_pipeline runs the passes
            for p in parse_pipeline(",".join((DEFAULT_PASSES, DERIVATIVE_PREP, derive,
                                              DEFAULT_PASSES))):
                name = pass_spec(p).split("{")[0]
                module, owned = timed(name, apply_pass, p, module, owned)
            t0 = time.process_time()
        times["collect"] = time.process_time() - t0  # the end of the pause
        timed("verify", verify, module)
        text = timed("print", print_module, module)
        if parse_ir:
            timed("parse-ir", parse_module, text, "chain.ir")
        target = "chain_grad" if mode == "reverse" else "chain_hvp"
        timed("emit-python", emit_python, module, target)
        ex = Executor(module, np, {})
        timed("buffer-plan", plan_block, module[target].body, {}, ex.in_place_results)
    return times, count_ops(module)


def exponent(sizes: list[int], secs: list[float]) -> float:
    """The slope of log(time) against log(size), least squares."""
    xs, ys = [math.log(n) for n in sizes], [math.log(max(t, 1e-6)) for t in secs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--modes", nargs="+", default=["reverse", "hvp"],
                    choices=["reverse", "hvp"])
    ap.add_argument("--no-parse-ir", action="store_true",
                    help="leave out the IR parser (the slowest stage, not part of compiling)")
    args = ap.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    worst = 0.0
    for mode in args.modes:
        table: dict[str, list[float]] = {}
        totals, compiles, counts = [], [], []
        for n in args.sizes:
            print(f"[{mode}] compiling a chain of {n} ops ...", file=sys.stderr, flush=True)
            times, n_out = compile_timed(n, mode, not args.no_parse_ir)
            for stage, t in times.items():
                table.setdefault(stage, []).append(t)
            totals.append(sum(t for k, t in times.items() if k != "parse-ir"))
            compiles.append(sum(t for k, t in times.items() if k not in NOT_COMPILE))
            counts.append(n_out)
        print(f"\n## {mode} mode (seconds; ops in the compiled module: "
              f"{', '.join(map(str, counts))})\n")
        print("| stage | " + " | ".join(f"{n} ops" for n in args.sizes) + " | exponent |")
        print("|---|" + "---:|" * (len(args.sizes) + 1))
        rows = list(table.items()) + [("compile: frontend, passes, print", compiles),
                                      ("total (without parse-ir)", totals)]
        for stage, secs in rows:
            k = exponent(args.sizes, secs) if len(args.sizes) > 1 else float("nan")
            if stage.startswith("total"):
                worst = max(worst, k)
            print(f"| {stage} | " + " | ".join(f"{t:.3f}" for t in secs) + f" | {k:.2f} |")
    if len(args.sizes) > 1:
        print(f"\nlargest growth exponent of the total: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
