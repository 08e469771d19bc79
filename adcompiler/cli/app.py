"""The ``adc`` command: ``adc compile``, ``run``, ``check``, ``jacobian`` and ``remat-curve``.

Exit status: 0 success; 1 an error in the program, its data or a failed check (rendered as
``FILE:LINE:COL: error: MESSAGE`` with the source line and a caret); 2 a bad command line;
3 an internal error (``--debug`` shows its traceback).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
import warnings

import numpy as np

from .anomaly import add_anomaly_argument
from .commands import cmd_check, cmd_compile, cmd_run, load_or_draw_inputs
from .forward import (FORWARD_MODES, add_jacobian_command, add_tangents_argument,
                          jacobian_main)
from .remat import add_remat_arguments, add_remat_curve_command
from .progress import add_progress_argument
from .train import add_train_command
from .import_model import add_import_command
from ..diagnostics import AdcError, InternalError, render
from ..ir.gcpause import fewer_collections
from .argtypes import memory_size, nonneg_float, nonneg_int, plugin_name, positive_float


def add_train_mode_argument(p) -> None:
    p.add_argument("--train-mode", action="store_true",
                   help="--mode forward: training behaviour (dropout draws, batch norm uses "
                        "the batch's statistics); derivative modes always train")


EPILOG = "Run 'adc COMMAND --help' for the options of each command."


def _wrt(text: str) -> list[str]:
    names = [w.strip() for w in text.split(",")]
    # a name, or a path into a parameter group (blocks.attn, blocks.3.W)
    if not all(n.split(".")[0].isidentifier() and all(p.isidentifier() or p.isdigit()
                                                      for p in n.split(".")) for n in names):
        raise argparse.ArgumentTypeError(f"expected names separated by commas, "
                                         f"got '{text}'")
    return names


def _bind(text: str) -> dict[str, int]:
    from ..files.inputs import parse_binds
    try:
        return parse_binds([text])
    except AdcError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def _threads(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of threads, got '{text}'")
    return n


def _common(p: argparse.ArgumentParser, inputs: bool = True) -> None:
    p.add_argument("file", metavar="FILE", help="a TDSL program (.tdsl) or IR text (.ir, .adcir)")
    p.add_argument("--fn", metavar="NAME", help="the function to use (default: the last def)")
    p.add_argument("--wrt", metavar="A,B", type=_wrt,
                   help="inputs to differentiate (default: those marked param; if none is, "
                        "every float input)")
    p.add_argument("--bind", metavar="DIM=SIZE", type=_bind, action="append", default=[],
                   help="size of a symbolic dimension, e.g. --bind B=32 (repeatable)")
    if inputs:
        p.add_argument("--inputs", metavar="IN", action="append",
                       help="input arrays by name: .npz or .json; repeat it to merge several "
                            "files, each input in one of them (default: seeded random inputs, "
                            "see --seed)")
        p.add_argument("--seed", metavar="N", type=nonneg_int, default=0,
                       help="seed of the random inputs drawn without --inputs (default 0): "
                            "floats ~ N(0, 1); integers in [0, n) where they feed "
                            "cross_entropy labels, take or one_hot (n = the class count), "
                            "else in [0, 2); bools uniform; and of the program's random "
                            "ops (uniform, normal, bernoulli, dropout)")
    p.add_argument("--max-memory", metavar="SIZE", type=memory_size,
                   help="refuse, before allocating, inputs and runs predicted to need more "
                        "than SIZE, e.g. 8GiB (default: 75%% of this machine's memory)")
    p.add_argument("--plugin", metavar="MODULE", action="append", default=[], type=plugin_name,
                   help="import MODULE (or a .py file) first, to register its ops and "
                        "passes (repeatable)")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show Python tracebacks")


def _version() -> str:
    """The installed distribution's version (the package root is not imported here)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("adcompiler")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adc", description="Compile TDSL programs to derivative programs and run them.",
        epilog=EPILOG)
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    parser.add_argument("--version", action="version", version=f"adc {_version()}",
                        help="print adc's version and exit")
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
                        "graph; cuda: the CuPy kernels of the fused groups (elementwise, "
                        "or closed by a reduction) (default ir)")
    c.add_argument("-o", "--output", metavar="OUT", help="output file (default: stdout)")
    c.add_argument("--pipeline", metavar="PASSES",
                   help="passes to run, e.g. 'inline,cse,dce' (default "
                        "'inline,canonicalize,cse,dce'); reverse mode runs them before and "
                        "after scan-inputs,reverse{...} unless the string names a reverse "
                        "pass itself")
    c.add_argument("--print-ir-after-all", action="store_true",
                   help="print the IR after every pass to stderr")
    c.add_argument("--dtype", choices=("f16", "f32", "f64"),
                   help="make every float in the program this type")
    c.add_argument("--seed-output", metavar="NAME",
                   help="reverse mode: differentiate the result NAME alone (out, or out0, "
                        "out1, ...); by default every float result is seeded with ones")
    add_remat_arguments(c)
    add_train_mode_argument(c)
    c.set_defaults(func=cmd_compile, parser=c)

    r = sub.add_parser("run", help="run a program and print its results and gradients",
                       description="Run FILE on inputs and print a summary of the results "
                                   "and, in reverse mode, of the gradients.")
    _common(r)
    r.add_argument("--mode", choices=("forward", "reverse") + FORWARD_MODES,
                   help="forward: values only; reverse: values and gradients; jvp: values "
                        "and directional derivatives; hvp: gradients and Hessian-vector "
                        "products (default reverse; a function a pass already derived, "
                        "such as f_grad in a saved IR file, runs as it is)")
    r.add_argument("--dtype", choices=("f16", "f32", "f64"),
                   help="make every float in the program this type, e.g. f64")
    r.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to run: cpu (NumPy, default) or cuda (CuPy)")
    r.add_argument("--threads", metavar="N", type=_threads,
                   help="threads for matrix products (BLAS); default: the BLAS library's "
                        "own choice (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS or the cores)")
    r.add_argument("--out", metavar="OUT.npz",
                   help="write results (out or out0, out1, ...) and gradients (grad_<input>)")
    r.add_argument("--seed-output", metavar="NAME",
                   help="reverse mode: differentiate the result NAME alone (out, or out0, "
                        "out1, ...); by default every float result is seeded with ones")
    add_tangents_argument(r)
    add_remat_arguments(r)
    add_anomaly_argument(r)
    add_train_mode_argument(r)
    r.set_defaults(func=cmd_run, parser=r)

    k = sub.add_parser("check", help="check derivatives by finite differences",
                       description="Compare reverse-mode gradients with central finite "
                                   "differences in float64 on every differentiated input "
                                   "(non-scalar results are summed), forward mode with "
                                   "directional differences, and the two with the "
                                   "dot-product test <u, J v> = <J^T u, v>. Exit 1 on "
                                   "failure.")
    _common(k)
    k.add_argument("--eps", type=positive_float, default=1e-6, help="finite-difference step "
                   "(default 1e-6)")
    k.add_argument("--rtol", type=nonneg_float, default=1e-4,
                   help="largest allowed relative error (default 1e-4)")
    k.add_argument("--max-points", metavar="N", type=nonneg_int, default=200,
                   help="probe at most N seeded random elements of each input (0: all; "
                        "default 200)")
    add_progress_argument(k)
    k.set_defaults(func=cmd_check, parser=k)
    add_jacobian_command(sub, _common)
    sub.choices["jacobian"].set_defaults(
        func=lambda a: jacobian_main(a, inputs_for=load_or_draw_inputs))
    add_remat_curve_command(sub, _common)
    add_train_command(sub, _common, _wrt)
    add_import_command(sub)
    return parser


# ---- entry point ----------------------------------------------------------------------

def _merge_binds(items: list[dict[str, int]]) -> dict[str, int]:
    env: dict[str, int] = {}
    for item in items:
        for k, v in item.items():
            if env.get(k, v) != v:
                raise AdcError(f"argument --bind: dimension {k} is bound to both {env[k]} "
                               f"and {v}")
            env[k] = v
    return env



def _render(err: AdcError) -> str:
    from .compile import read_source
    return render(err, read_source(err.loc.file) if err.loc else None)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived while a command ran. A `KeyboardInterrupt`, so that what
    stops cleanly on Ctrl-C (no output file written or half-written, no error reported as
    the program's) stops the same way."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _termination_stops_the_command():
    """While a command runs, SIGTERM and SIGHUP raise `Terminated` (in the main thread, and
    only where they would otherwise end the process at once)."""
    def stop(signum, frame):
        raise Terminated(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
                previous[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def main(argv: list[str] | None = None) -> int:
    """Run the ``adc`` command line; returns the exit status (argparse exits 2 itself)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.bind = _merge_binds(args.bind)
    except AdcError as e:
        getattr(args, "parser", parser).error(e.message)  # the command's usage line, exit 2
    debug = args.debug
    from ..memory.limit import set_limit
    set_limit(getattr(args, "max_memory", None))
    try:
        from .places import check_places
        check_places(args)
        if getattr(args, "plugin", None):
            from ..plugins import load_plugins
            load_plugins(args.plugin)
        if args.bind:  # a --bind of a dimension the program does not have is a typo
            from .compile import load_module
            from ..files.inputs import check_binds
            check_binds(list(load_module(args.file).functions.values()), args.bind)
        with fewer_collections(), warnings.catch_warnings(), np.errstate(all="ignore"), \
                _termination_stops_the_command():
            # a command builds large IR: see `ir.gcpause`; NaN and Inf in a run are
            # reported at the op that produced them (nonfinite), not by NumPy
            warnings.simplefilter("ignore", RuntimeWarning)
            return args.func(args)
    except AdcError as e:
        print(_render(e), file=sys.stderr)
        if debug:
            traceback.print_exc()
        return 1
    except BrokenPipeError:  # stdout closed early (`adc run ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Terminated as e:  # exit 128 + N, as a shell reports a process ended by signal N
        print(f"adc: stopped by {signal.Signals(e.signum).name}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("adc: interrupted", file=sys.stderr)
        return 130
    except InternalError as e:  # our bug, at a known op of the program
        print(_render(e) + "\nadc: internal error; run again with --debug to see the "
              "traceback", file=sys.stderr)
        if debug:
            traceback.print_exc()
        return 3
    except MemoryError as e:  # a size the prediction did not cover (kernel temporaries)
        if debug:
            traceback.print_exc()
        print(f"error: out of memory{f' ({e})' if str(e) else ''}; the run needs more "
              "memory than this machine has", file=sys.stderr)
        return 1
    except Exception as e:
        if debug:
            raise
        print(f"adc: internal error ({type(e).__name__}: {e}); run again with --debug to "
              "see the traceback", file=sys.stderr)
        return 3
