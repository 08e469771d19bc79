"""The ``adc compile``, ``adc run`` and ``adc check`` commands (argument parsing and the
entry point are in `cli`)."""
from __future__ import annotations

import sys

import numpy as np

from .anomaly import anomaly_executor
from .forward import FORWARD_MODES, check_forward, compile_forward, run_main
from .remat import apply_remat, report, write_stats_json
from ..diagnostics import AdcError
from ..memory.limit import check_run_fits
from .nonfinite import warn_nonfinite


def _binds(args) -> dict[str, int]:
    return args.bind


def _note(msg: str) -> None:
    print(f"adc: {msg}", file=sys.stderr)


def load_or_draw_inputs(args, fn, binder) -> dict:
    """Load and check --inputs, or draw seeded random ones (and say so)."""
    from ..files.inputs import random_inputs, read_inputs, require_bound
    if args.inputs:
        inputs = read_inputs(fn, args.inputs, binder, args.seed)
    else:
        inputs, dims = random_inputs(fn, binder, args.seed)
        extra = f"; unbound dimensions set to {', '.join(dims)}" if dims else ""
        _note(f"no --inputs given: using random inputs (seed {args.seed}){extra}")
    require_bound(fn, binder)
    return inputs


def cmd_compile(args) -> int:
    from .compile import compile_program
    from ..files.write import save_text
    _check_remat_mode(args)
    if args.seed_output and args.mode != "reverse":
        raise AdcError("--seed-output applies to --mode reverse")
    if args.mode in FORWARD_MODES:
        comp = compile_forward(args.file, args.mode, args.fn, args.wrt, args.pipeline,
                               args.dtype, _binds(args), args.print_ir_after_all)
    else:
        comp = compile_program(args.file, args.mode, args.fn, args.wrt, args.pipeline,
                               args.dtype, _binds(args), args.print_ir_after_all,
                               seed_output=args.seed_output, train_mode=args.train_mode)
    for n in comp.notes:
        _note(n)
    stats = _remat(args, comp, _binds(args))
    if stats is not None and args.stats_json:
        write_stats_json(args.stats_json, stats)
    if args.emit == "ir":
        from ..ir.printer import print_module
        text = print_module(comp.module)
    elif args.emit == "python":
        from ..emit.python import emit_python
        text = emit_python(comp.module, comp.run_name, comp.output_names())
    elif args.emit == "cuda":
        from ..emit.cuda import emit_cuda
        text = emit_cuda(comp.module)
    else:
        from ..emit.dot import emit_dot
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
    from .compile import compile_program
    from ..files.inputs import DimBinder
    from ..files.paths import split_outputs
    from ..files.write import save_npz
    from .table import summary
    xp = select_device(args.device)
    if args.threads:
        from adc_runtime.threads import set_blas_threads
        set_blas_threads(args.threads)
    explicit_mode, args.mode = args.mode is not None, args.mode or "reverse"
    _check_remat_mode(args)
    if args.mode in FORWARD_MODES:
        if xp is not np:
            raise AdcError(f"--mode {args.mode} runs on --device cpu only")
        return run_main(args, inputs_for=load_or_draw_inputs)
    if args.tangents:
        raise AdcError("--tangents applies to --mode jvp and hvp")
    if args.seed_output and args.mode != "reverse":
        raise AdcError("--seed-output applies to --mode reverse")
    # remat schedules loops of a fixed trip count: let --bind fix symbolic ones first
    comp = compile_program(args.file, args.mode, args.fn, args.wrt, dtype=args.dtype,
                           bind=_binds(args) if args.remat != "none" else None,
                           seed_output=args.seed_output, rederive=explicit_mode,
                           train_mode=args.train_mode)
    for n in comp.notes:
        _note(n)
    binder = DimBinder(_binds(args))
    inputs = load_or_draw_inputs(args, comp.run_fn, binder)
    remat_stats = _remat(args, comp, binder.env)
    check_run_fits(comp.module, comp.run_name, binder.env)
    if xp is np or args.detect_anomaly:  # anomaly checks run op by op, unfused
        outs, stats = run_function(comp.module, comp.run_name, inputs, xp=xp, dims=binder.env,
                                   executor=anomaly_executor(args.detect_anomaly))
    else:
        outs, stats = _run_cuda(comp, inputs, binder.env, xp)
    if remat_stats is not None and args.stats_json:
        write_stats_json(args.stats_json, remat_stats,
                         peak_bytes_measured=stats.get("peak_bytes_measured",
                                                       stats["peak_bytes"]),
                         arena_bytes=stats.get("arena_bytes"))
    if xp is not np:
        outs = [xp.asnumpy(o) for o in outs]
    named = list(zip(comp.output_names(), [np.asarray(o) for o in outs]))
    if xp is np and not args.detect_anomaly:
        warn_nonfinite(comp.module, comp.run_name, inputs, binder.env, named)
    named = split_outputs(comp.module[comp.run_name], named)   # one row per leaf
    print(summary(named))
    arena = stats.get("arena_bytes")
    print(f"\npeak live memory: {stats['peak_bytes']:,} bytes" +
          (f"; planned buffers: {arena:,} bytes in one arena" if arena else ""))
    if "peak_bytes_measured" in stats:
        print(f"peak device memory (measured): {stats['peak_bytes_measured']:,} bytes")
    if args.out:
        save_npz(args.out, dict(named))
    return 0


def _run_cuda(comp, inputs: dict, dims: dict, cupy):
    """Fuse the compiled program and run it on the GPU with its generated kernels (the
    softmax and norm adjoints left to the row kernels)."""
    from adc_runtime.cuda import run_function as run_on_gpu
    from ..emit.cuda import ensure_fused, kernel_specs
    module = ensure_fused(comp.module, rows=True)
    return run_on_gpu(module, comp.run_name, inputs, kernel_specs(module), dims, cupy)


def cmd_check(args) -> int:
    from .check import check_gradients
    from .compile import compile_program
    from ..files.inputs import DimBinder
    from .table import fmt_shape, table
    rev = compile_program(args.file, "reverse", args.fn, args.wrt, dtype="f64")
    for n in rev.notes:
        _note(n)
    # differences of the training-mode forward: the derivatives are those of training
    fwd = compile_program(args.file, "forward", rev.primal.name, dtype="f64",
                          train_mode=True)
    binder = DimBinder(_binds(args))
    inputs = load_or_draw_inputs(args, rev.run_fn, binder)
    check_run_fits(rev.module, rev.run_name, binder.env)
    from .progress import Progress
    with Progress(args, "finite differences", "probe") as progress:
        rows = check_gradients(rev, fwd, inputs, binder.env, args.eps, args.rtol,
                               args.max_points, args.seed, progress)
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
