"""Command-line pieces for rematerialization: ``--remat``, ``--stats-json`` and
``adc remat-curve``. `app.py` wires them in (see `add_remat_arguments`, `apply_remat`,
`add_remat_curve_command`)."""
from __future__ import annotations

import json
import os
import sys

from ..diagnostics import AdcError


def _policy_text(text: str) -> str:
    """A well-formed ``--remat`` value (kept as text); a malformed one is a bad command line
    (exit 2), like any other option value argparse rejects."""
    import argparse

    from ..diagnostics import AdcError
    from ..remat.policy import parse_policy
    try:
        parse_policy(text)
    except AdcError as e:
        raise argparse.ArgumentTypeError(e.message) from None
    return text


def add_remat_arguments(parser) -> None:
    """``--remat POLICY`` and ``--stats-json FILE`` (for ``compile`` and ``run``)."""
    parser.add_argument("--remat", metavar="POLICY", default="none", type=_policy_text,
                        help="none, sqrt, revolve:C, budget:SIZE (e.g. budget:64MiB), "
                             "min-memory, or the mincut baseline (default: none)")
    parser.add_argument("--stats-json", metavar="FILE",
                        help="write the remat schedule's memory and FLOP figures as JSON")


def size_dims(fn, dims: dict) -> tuple[dict, list[str]]:
    """`dims` plus a default size for each symbol of `fn`'s inputs that nothing binds."""
    from ..files.inputs import DEFAULT_DIM, function_symbols
    env, notes = dict(dims), []
    for s in function_symbols(fn):
        if s not in env:
            env[s] = DEFAULT_DIM
            notes.append(f"remat: sizes computed with {s}={DEFAULT_DIM} (bind it with --bind)")
    return env, notes


def apply_remat(module, run_name: str, policy: str, dims: dict) -> tuple:
    """Schedule the compiled adjoint `run_name` of `module` (after ``reverse`` and ``dce``).
    Returns (module, stats dict, notes).

    The sizes in `dims` (``--bind``, and in ``adc run`` the shapes of the inputs) are
    substituted into a copy of the module first, so that loops whose trip count is a bound
    symbol get a schedule. Sizes that nothing binds only size the report: ``adc compile``
    keeps them symbolic, and their loops unscheduled."""
    from ..passes.to_dtype import bind_dims
    from ..passes.clone import clone_module
    from ..remat.explain import remat_stats
    from ..remat.schedule import schedule
    if dims and policy != "none":
        module = bind_dims(clone_module(module), dims)
    env, notes = size_dims(module[run_name], dims)
    sched = schedule(module, policy, run_name, env)
    return sched.module, remat_stats(module, sched, env), notes


def report(stats: dict, out=None) -> None:
    from ..remat.explain import format_stats
    print(format_stats(stats), file=out or sys.stderr)


def write_stats_json(path: str, stats: dict, **measured) -> None:
    """The schedule's `stats` and the run's `measured` figures (``peak_bytes_measured``,
    ``arena_bytes``), as JSON, written atomically."""
    from ..files.write import save_text
    data = {**stats, **{k: v for k, v in measured.items() if v is not None}}
    try:
        save_text(path, json.dumps(data, indent=2) + "\n")
    except OSError as e:
        raise AdcError(f"cannot write {path}: {e.strerror}") from None


def add_remat_curve_command(subparsers, common) -> None:
    """``adc remat-curve FILE [-o curve.png] [--points N]``; `common(p)` adds --fn, --wrt,
    --bind, --inputs, --seed."""
    p = subparsers.add_parser("remat-curve", help="sweep remat budgets from min-memory to "
                              "store-all: predicted and measured peak, recompute fraction")
    common(p)
    p.add_argument("-o", "--output", metavar="PLOT", help="draw the curve (needs matplotlib)")
    from .argtypes import positive_int
    p.add_argument("--points", metavar="N", type=positive_int, default=8,
                   help="budgets (default 8)")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    from .progress import add_progress_argument
    add_progress_argument(p)
    p.set_defaults(func=remat_curve_main)


def remat_curve_main(args, inputs_for=None) -> int:
    """Run ``remat-curve``; `inputs_for(args, fn, binder)` loads or draws the inputs
    (default: --inputs, else seeded random inputs)."""
    from .compile import compile_program
    from ..files.inputs import DimBinder, random_inputs, read_inputs
    from ..remat.curve import baseline_rows, format_curve, remat_curve
    from ..remat.plot import plot_curve
    from .progress import Progress
    from ..memory.limit import check_run_fits
    comp = compile_program(args.file, "reverse", args.fn, args.wrt,
                           bind=getattr(args, "bind", None) or None)
    binder = DimBinder(getattr(args, "bind", None) or {})
    if inputs_for is not None:
        inputs = inputs_for(args, comp.run_fn, binder)
    elif getattr(args, "inputs", None):
        inputs = read_inputs(comp.run_fn, args.inputs, binder, getattr(args, "seed", 0))
    else:
        inputs, _ = random_inputs(comp.run_fn, binder, getattr(args, "seed", 0))
    check_run_fits(comp.module, comp.run_name, binder.env)
    with Progress(args, "remat schedules", "schedule") as bar:
        rows = remat_curve(comp.module, comp.run_name, binder.env, inputs, points=args.points,
                           progress=lambda done, total: bar(done, total + 2))
        n = len(rows) + 2
        base = baseline_rows(comp.module, comp.run_name, binder.env, inputs,
                             progress=lambda done, total: bar(n + done, n + total))
    print(format_curve(rows, base))
    if getattr(args, "json", None):
        write_stats_json(args.json, {"rows": rows, "baselines": base})
    if args.output:
        title = f"{os.path.basename(args.file)} ({comp.run_name})"
        if plot_curve(rows, args.output, title, base):
            print(f"wrote {args.output}")
        else:
            print("adc: matplotlib is not installed; no plot drawn "
                  "(pip install matplotlib)", file=sys.stderr)
    return 0
