"""The ``adc`` command: ``adc compile``, ``run``, ``check``, ``jacobian`` and ``remat-curve``.

Exit status: 0 success; 1 an error in the program, its data or a failed check (rendered as
``FILE:LINE:COL: error: MESSAGE`` with the source line and a caret); 2 a bad command line;
3 an internal error (``--debug`` shows its traceback).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

import numpy as np

from .cli_forward import (FORWARD_MODES, add_jacobian_command, add_tangents_argument,
                          check_forward, compile_forward, jacobian_main, run_main)
from .cli_remat import (add_remat_arguments, add_remat_curve_command, apply_remat, report,
                        write_stats_json)
from .diagnostics import AdcError, render

EPILOG = "Run 'adc COMMAND --help' for the options of each command."


def _wrt(text: str) -> list[str]:
    names = [w.strip() for w in text.split(",")]
    if not all(n.isidentifier() for n in names):
        raise argparse.ArgumentTypeError(f"expected input names separated by commas, "
                                         f"got '{text}'")
    return names


def _bind(text: str) -> dict[str, int]:
    from .cli_inputs import parse_binds
    try:
        return parse_binds([text])
    except AdcError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def _common(p: argparse.ArgumentParser, inputs: bool = True) -> None:
    p.add_argument("file", metavar="FILE", help="a TDSL program (.tdsl) or IR text (.ir, .adcir)")
    p.add_argument("--fn", metavar="NAME", help="the function to use (default: the last def)")
    p.add_argument("--wrt", metavar="A,B", type=_wrt,
                   help="inputs to differentiate (default: those marked param; if none is, "
                        "every float input)")
    p.add_argument("--bind", metavar="DIM=SIZE", type=_bind, action="append", default=[],
                   help="size of a symbolic dimension, e.g. --bind B=32 (repeatable)")
    if inputs:
        p.add_argument("--inputs", metavar="IN", help="input arrays by name: .npz or .json "
                       "(default: seeded random inputs, see --seed)")
        p.add_argument("--seed", metavar="N", type=int, default=0,
                       help="seed of the random inputs drawn without --inputs (default 0): "
                            "floats ~ N(0, 1); integers in [0, n) where they feed "
                            "cross_entropy labels, take or one_hot (n = the class count), "
                            "else in [0, 2); bools uniform")
    p.add_argument("--plugin", metavar="MODULE", action="append", default=[],
                   help="import MODULE (or a .py file) first, to register its ops and "
                        "passes (repeatable)")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show Python tracebacks")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adc", description="Compile TDSL programs to derivative programs and run them.",
        epilog=EPILOG)
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    c = sub.add_parser("compile", help="compile a program and emit IR, Python or DOT",
                       description="Compile FILE for a mode and write the resulting program.")
    _common(c, inputs=False)
    c.add_argument("--mode", choices=("reverse", "forward") + FORWARD_MODES,
                   default="reverse",
                   help="reverse: add the adjoint program <fn>_grad; forward: values only; "
                        "jvp: add the tangent program <fn>_jvp; hvp: add <fn>_hvp "
                        "(forward over reverse) (default reverse)")
    c.add_argument("--emit", choices=("ir", "python", "dot", "cuda"), default="ir",
                   help="ir: IR text; python: a standalone NumPy module; dot: a Graphviz "
                        "graph; cuda: the CuPy kernels of the fused elementwise groups "
                        "(default ir)")
    c.add_argument("-o", "--output", metavar="OUT", help="output file (default: stdout)")
    c.add_argument("--pipeline", metavar="PASSES",
                   help="passes to run, e.g. 'inline,cse,dce' (default "
                        "'inline,canonicalize,cse,dce'); reverse mode runs them before and "
                        "after reverse{...} unless the string names a reverse pass itself")
    c.add_argument("--print-ir-after-all", action="store_true",
                   help="print the IR after every pass to stderr")
    c.add_argument("--dtype", choices=("f16", "f32", "f64"),
                   help="make every float in the program this type")
    add_remat_arguments(c)
    c.set_defaults(func=cmd_compile, parser=c)

    r = sub.add_parser("run", help="run a program and print its results and gradients",
                       description="Run FILE on inputs and print a summary of the results "
                                   "and, in reverse mode, of the gradients.")
    _common(r)
    r.add_argument("--mode", choices=("forward", "reverse") + FORWARD_MODES,
                   default="reverse",
                   help="forward: values only; reverse: values and gradients; jvp: values "
                        "and directional derivatives; hvp: gradients and Hessian-vector "
                        "products (default reverse)")
    r.add_argument("--dtype", choices=("f16", "f32", "f64"),
                   help="make every float in the program this type, e.g. f64")
    r.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to run: cpu (NumPy, default) or cuda (CuPy)")
    r.add_argument("--out", metavar="OUT.npz",
                   help="write results (out or out0, out1, ...) and gradients (grad_<input>)")
    add_tangents_argument(r)
    add_remat_arguments(r)
    r.set_defaults(func=cmd_run, parser=r)

    k = sub.add_parser("check", help="check derivatives by finite differences",
                       description="Compare reverse-mode gradients with central finite "
                                   "differences in float64 on every differentiated input "
                                   "(non-scalar results are summed), forward mode with "
                                   "directional differences, and the two with the "
                                   "dot-product test <u, J v> = <J^T u, v>. Exit 1 on "
                                   "failure.")
    _common(k)
    k.add_argument("--eps", type=float, default=1e-6, help="finite-difference step "
                   "(default 1e-6)")
    k.add_argument("--rtol", type=float, default=1e-4,
                   help="largest allowed relative error (default 1e-4)")
    k.add_argument("--max-points", metavar="N", type=int, default=200,
                   help="probe at most N seeded random elements of each input (0: all; "
                        "default 200)")
    k.set_defaults(func=cmd_check, parser=k)
    add_jacobian_command(sub, _common)
    sub.choices["jacobian"].set_defaults(func=lambda a: jacobian_main(a, inputs_for=_inputs))
    add_remat_curve_command(sub, _common)
    return parser


# ---- commands -------------------------------------------------------------------------

def _merge_binds(items: list[dict[str, int]]) -> dict[str, int]:
    env: dict[str, int] = {}
    for item in items:
        for k, v in item.items():
            if env.get(k, v) != v:
                raise AdcError(f"argument --bind: dimension {k} is bound to both {env[k]} "
                               f"and {v}")
            env[k] = v
    return env


def _binds(args) -> dict[str, int]:
    return args.bind


def _note(msg: str) -> None:
    print(f"adc: {msg}", file=sys.stderr)


def _inputs(args, fn, binder) -> dict:
    """Load and check --inputs, or draw seeded random ones (and say so)."""
    from .cli_inputs import (check_index_ranges, check_inputs, load_data, random_inputs,
                             require_bound)
    if args.inputs:
        inputs = check_inputs(fn, load_data(args.inputs), args.inputs, binder)
        require_bound(fn, binder)
        check_index_ranges(fn, inputs, binder.env, args.inputs)
    else:
        inputs, dims = random_inputs(fn, binder, args.seed)
        extra = f"; unbound dimensions set to {', '.join(dims)}" if dims else ""
        _note(f"no --inputs given: using random inputs (seed {args.seed}){extra}")
    require_bound(fn, binder)
    return inputs


def cmd_compile(args) -> int:
    from .cli_compile import compile_program
    from .cli_output import save_text
    _check_remat_mode(args)
    if args.mode in FORWARD_MODES:
        comp = compile_forward(args.file, args.mode, args.fn, args.wrt, args.pipeline,
                               args.dtype, _binds(args), args.print_ir_after_all)
    else:
        comp = compile_program(args.file, args.mode, args.fn, args.wrt, args.pipeline,
                               args.dtype, _binds(args), args.print_ir_after_all)
    for n in comp.notes:
        _note(n)
    stats = _remat(args, comp, _binds(args))
    if stats is not None and args.stats_json:
        write_stats_json(args.stats_json, stats)
    if args.emit == "ir":
        from .ir.printer import print_module
        text = print_module(comp.module)
    elif args.emit == "python":
        from .emit.python import emit_python
        text = emit_python(comp.module, comp.run_name, comp.output_names())
    elif args.emit == "cuda":
        from .emit.cuda import emit_cuda
        text = emit_cuda(comp.module)
    else:
        from .emit.dot import emit_dot
        text = emit_dot(comp.module, comp.run_name)
    if args.output:
        save_text(args.output, text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _check_remat_mode(args) -> None:
    if args.mode != "reverse" and (args.remat != "none" or args.stats_json):
        raise AdcError("--remat and --stats-json apply to --mode reverse")


def _remat(args, comp, dims: dict) -> dict | None:
    """Schedule the adjoint program under ``--remat`` (in place in `comp`); returns the
    schedule's stats, or None when neither --remat nor --stats-json asks for one."""
    if args.remat == "none" and not args.stats_json:
        return None
    comp.module, stats, notes = apply_remat(comp.module, comp.run_name, args.remat, dims)
    for n in notes:
        _note(n)
    if args.remat != "none":
        report(stats)
    return stats


def select_device(name: str):
    """The array module for `--device`: NumPy, or CuPy when a CUDA GPU is usable."""
    if name == "cpu":
        return np
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # ImportError, or CUDA runtime errors without a driver
        raise AdcError(f"--device cuda needs CuPy and a CUDA GPU ({type(e).__name__}: {e}); "
                       "install with pip install -e '.[cuda]'") from None
    if count < 1:
        raise AdcError("--device cuda: no CUDA GPU found")
    return cupy


def cmd_run(args) -> int:
    from adc_runtime.executor import run_function
    from .cli_compile import compile_program
    from .cli_inputs import DimBinder
    from .cli_output import save_npz
    from .cli_table import summary
    xp = select_device(args.device)
    _check_remat_mode(args)
    if args.mode in FORWARD_MODES:
        if xp is not np:
            raise AdcError(f"--mode {args.mode} runs on --device cpu only")
        return run_main(args, inputs_for=_inputs)
    if args.tangents:
        raise AdcError("--tangents applies to --mode jvp and hvp")
    # remat schedules loops of a fixed trip count: let --bind fix symbolic ones first
    comp = compile_program(args.file, args.mode, args.fn, args.wrt, dtype=args.dtype,
                           bind=_binds(args) if args.remat != "none" else None)
    for n in comp.notes:
        _note(n)
    binder = DimBinder(_binds(args))
    inputs = _inputs(args, comp.run_fn, binder)
    remat_stats = _remat(args, comp, binder.env)
    if xp is np:
        outs, stats = run_function(comp.module, comp.run_name, inputs, xp=xp, dims=binder.env)
    else:
        outs, stats = _run_cuda(comp, inputs, binder.env, xp)
    if remat_stats is not None and args.stats_json:
        write_stats_json(args.stats_json, remat_stats,
                         stats.get("peak_bytes_measured", stats["peak_bytes"]))
    if xp is not np:
        outs = [xp.asnumpy(o) for o in outs]
    named = list(zip(comp.output_names(), [np.asarray(o) for o in outs]))
    print(summary(named))
    print(f"\npeak live memory: {stats['peak_bytes']:,} bytes")
    if "peak_bytes_measured" in stats:
        print(f"peak device memory (measured): {stats['peak_bytes_measured']:,} bytes")
    if args.out:
        save_npz(args.out, dict(named))
    return 0


def _run_cuda(comp, inputs: dict, dims: dict, cupy):
    """Fuse the compiled program and run it on the GPU with its generated kernels."""
    from adc_runtime.cuda import run_function as run_on_gpu
    from .emit.cuda import ensure_fused, kernel_specs
    module = ensure_fused(comp.module)
    return run_on_gpu(module, comp.run_name, inputs, kernel_specs(module), dims, cupy)


def cmd_check(args) -> int:
    from .cli_check import check_gradients
    from .cli_compile import compile_program
    from .cli_inputs import DimBinder
    from .cli_table import fmt_shape, table
    rev = compile_program(args.file, "reverse", args.fn, args.wrt, dtype="f64")
    for n in rev.notes:
        _note(n)
    fwd = compile_program(args.file, "forward", rev.primal.name, dtype="f64")
    binder = DimBinder(_binds(args))
    inputs = _inputs(args, rev.run_fn, binder)
    rows = check_gradients(rev, fwd, inputs, binder.env, args.eps, args.rtol,
                           args.max_points, args.seed)
    try:
        frows = {f.name: f for f in check_forward(fwd, inputs, rev.wrt, binder.env,
                                                  args.eps, args.rtol, args.seed)}
    except AdcError as e:  # e.g. a function with a grad rule and no tangent rule
        _note(f"forward-mode columns skipped: {e.message}")
        frows = {}

    def fwd_cols(name):
        f = frows.get(name)
        return [f"{f.jvp_rel:.3g}", f"{f.dot_rel:.3g}"] if f else ["-", "-"]

    def ok(r):
        return r.ok and (r.name not in frows or frows[r.name].ok)

    print(table(["input", "shape", "points", "max abs err", "max rel err", "fwd rel err",
                 "dot rel err", "status"],
                [[r.name, fmt_shape(r.shape), str(r.points), f"{r.max_abs:.3g}",
                  f"{r.max_rel:.3g}", *fwd_cols(r.name), "ok" if ok(r) else "FAIL"]
                 for r in rows]))
    failed = [r.name for r in rows if not ok(r)]
    if failed:
        print(f"\ngradient check FAILED for {', '.join(failed)} (rtol {args.rtol:g}, "
              f"eps {args.eps:g})")
        return 1
    print(f"\ngradient check passed (rtol {args.rtol:g}, eps {args.eps:g})")
    return 0


# ---- entry point ----------------------------------------------------------------------

def _render(err: AdcError) -> str:
    from .cli_compile import read_source
    return render(err, read_source(err.loc.file) if err.loc else None)


def _run_error_types() -> tuple:
    try:
        from adc_runtime.executor import RunError
        return (RunError,)
    except ImportError:
        return ()


def main(argv: list[str] | None = None) -> int:
    """Run the ``adc`` command line; returns the exit status (argparse exits 2 itself)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.bind = _merge_binds(args.bind)
    except AdcError as e:
        getattr(args, "parser", parser).error(e.message)  # the command's usage line, exit 2
    debug = args.debug
    try:
        if getattr(args, "plugin", None):
            from .plugins import load_plugins
            load_plugins(args.plugin)
        return args.func(args)
    except AdcError as e:
        print(_render(e), file=sys.stderr)
        if debug:
            traceback.print_exc()
        return 1
    except _run_error_types() as e:
        print(f"error: {e}", file=sys.stderr)
        if debug:
            traceback.print_exc()
        return 1
    except BrokenPipeError:  # stdout closed early (`adc run ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("adc: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        print(f"adc: internal error ({type(e).__name__}: {e}); run again with --debug to "
              "see the traceback", file=sys.stderr)
        return 3
