"""``adc train FILE --data TRAIN.npz``: train the ``param`` inputs of a loss function with
`adcompiler.training.loop.train` (spec §8), showing progress and writing the run's files.

Every option value is checked before anything is read (a bad one exits 2), and the data, the
initial values and a checkpoint to resume are checked before anything is written, so that a
mistake leaves the files of an earlier run as they were.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np

from ..diagnostics import AdcError
from ..frontend.importer.losses import LOSSES
from .anomaly import add_anomaly_argument
from .remat import _policy_text


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {v}")
    return v


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if not 0 <= v < 2 ** 64:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 2^64 - 1, got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
    return v


def _optimizer(text: str):
    from ..training.optim import parse_optimizer
    try:
        return parse_optimizer(text)
    except AdcError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def _schedule(text: str) -> tuple[str, dict]:
    """``constant``, ``warmup:steps=N`` or ``cosine[:warmup=N,min_lr=X]``."""
    kind, _, rest = text.partition(":")
    allowed = {"constant": (), "warmup": ("steps", "start_factor"),
               "cosine": ("warmup", "min_lr", "start_factor")}
    if kind not in allowed:
        raise argparse.ArgumentTypeError(f"unknown schedule '{kind}' (constant, "
                                         "warmup:steps=N, cosine[:warmup=N,min_lr=X])")
    opts: dict = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, val = (s.strip() for s in item.partition("="))
        if not eq or key not in allowed[kind]:
            raise argparse.ArgumentTypeError(
                f"schedule '{kind}' has no option '{item}' (options: "
                f"{', '.join(allowed[kind]) or 'none'})")
        if key in opts:
            raise argparse.ArgumentTypeError(f"schedule '{kind}': option '{key}' is given "
                                             "twice; give it once")
        try:
            opts[key] = int(val) if key in ("steps", "warmup") else float(val)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key} must be a number, got '{val}'") from None
    if kind == "warmup" and "steps" not in opts:
        raise argparse.ArgumentTypeError("the warmup schedule needs steps=N")
    return kind, opts


def _size(text: str) -> int:
    from ..memory.sizes import parse_size
    try:
        return parse_size(text)
    except AdcError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def add_train_command(subparsers, common, names_list) -> None:
    """``adc train``; `common(p, inputs=False)` adds the common options, `names_list` parses
    a comma-separated list of names."""
    p = subparsers.add_parser(
        "train", help="train the param inputs of a loss function on data",
        description="Train the param inputs of FILE's loss function (a float scalar result) "
                    "on the arrays of TRAIN.npz, one per non-param input, rows on the "
                    "leading axis, in shuffled mini-batches. One compiled step runs the "
                    "forward, the adjoint, clipping and the optimizer update.")
    common(p, inputs=False)
    g = p.add_argument_group("data and length")
    g.add_argument("--data", metavar="TRAIN.npz", required=True,
                   help="training data: one array per non-param input, by name; or a "
                        "folder of NAME.npy files or .npz shards, memory-mapped (data "
                        "bigger than memory, docs/training.md)")
    g.add_argument("--loss", choices=sorted(LOSSES),
                   help="with an ONNX model as FILE: import it (as adc import does) and "
                        "train this loss of its output against the data's 'target'")
    g.add_argument("--val", metavar="VAL.npz",
                   help="validation data, evaluated at each epoch's end with the forward "
                        "program only")
    g.add_argument("--metric", metavar="FN,FN", type=names_list, default=[],
                   help="functions of FILE (same inputs as the loss, a scalar result, e.g. "
                        "an accuracy) to evaluate on --val each epoch")
    g.add_argument("--batch", metavar="N", type=_positive_int,
                   help="rows per mini-batch (default: every row, full-batch); the rows "
                        "left over at an epoch's end are not used")
    length = g.add_mutually_exclusive_group()
    length.add_argument("--epochs", metavar="N", type=_positive_int,
                        help="passes over the data (default 1)")
    length.add_argument("--steps", metavar="N", type=_positive_int,
                        help="optimizer steps to take")
    g.add_argument("--seed", metavar="N", type=_seed, default=0,
                   help="seed of the shuffles, of --init-scheme and of the program's random "
                        "ops, such as dropout (default 0)")
    o = p.add_argument_group("optimization")
    o.add_argument("--optimizer", metavar="NAME:K=V,...", type=_optimizer, default="adam",
                   help="sgd (lr, momentum, dampening, nesterov, weight_decay or wd), adam or "
                        "adamw (lr, b1, b2, eps, weight_decay or wd), with torch.optim's "
                        "formulas and defaults, e.g. adam:lr=1e-3,wd=0.01 (default adam)")
    o.add_argument("--schedule", metavar="KIND", type=_schedule, default=("constant", {}),
                   help="learning-rate schedule: constant, warmup:steps=N or "
                        "cosine[:warmup=N,min_lr=X] (cosine decays over the whole run)")
    o.add_argument("--clip", metavar="MAX_NORM", type=_positive_float,
                   help="clip the global gradient norm (torch.nn.utils.clip_grad_norm_)")
    o.add_argument("--accumulate", metavar="K", type=_positive_int, default=1,
                   help="micro-batches of --batch rows per step (default 1)")
    o.add_argument("--precision", choices=("f16", "bf16"),
                   help="run the program in low precision with f32 master weights and "
                        "dynamic loss scaling (torch.amp.GradScaler's rules)")
    o.add_argument("--dtype", choices=("f16", "f32", "f64"),
                   help="make every float in the program this type, e.g. f64")
    o.add_argument("--remat", metavar="POLICY", type=_policy_text,
                   help="checkpointing of the step's adjoint: none, sqrt, revolve:C, "
                        "budget:SIZE or min-memory")
    o.add_argument("--memory-budget", metavar="SIZE", type=_size,
                   help="pick the remat schedule whose whole training step's predicted "
                        "peak fits SIZE (e.g. 64MiB); reports predicted and measured peak")
    o.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to run: cpu (NumPy, default) or cuda (CuPy)")
    o.add_argument("--threads", metavar="N", type=_threads,
                   help="threads for matrix products (BLAS), as adc run --threads; on a "
                        "busy or small machine 1 is often the fastest")
    add_anomaly_argument(p)
    d = p.add_argument_group("data-parallel training")
    d.add_argument("--distributed", choices=("none", "mpi"), default="none",
                   help="mpi: run as one of the processes that mpiexec starts; each trains "
                        "on its share of every batch and the gradients are averaged with "
                        "MPI all-reduces placed in the step by the compiler (install with "
                        "pip install -e '.[mpi]')")
    d.add_argument("--bucket-mb", metavar="MiB", type=_positive_float, default=25.0,
                   help="gradients all-reduced together, in MiB (default 25, as PyTorch DDP)")
    f = p.add_argument_group("files")
    f.add_argument("--init", metavar="PARAMS.npz",
                   help="initial values of the params, by path (m.blocks.3.W); those left "
                        "out are drawn by --init-scheme")
    f.add_argument("--init-scheme", choices=("torch", "glorot", "kaiming", "normal"),
                   default="torch",
                   help="how weights not given by --init are drawn: torch (torch.nn's "
                        "default, uniform in 1/sqrt(fan_in)), glorot (uniform), kaiming "
                        "(normal, for ReLU) or normal (std 0.01); fans from the weight's use "
                        "(matmul, convolution); gains start at 1, biases at 0 (default "
                        "torch)")
    f.add_argument("--save", metavar="PARAMS.npz",
                   help="write the trained params by name (what --init and adc run --inputs "
                        "read)")
    f.add_argument("--checkpoint", metavar="CKPT.npz",
                   help="write a checkpoint (params, optimizer state, step, RNG state) "
                        "atomically every --every steps and at the end")
    f.add_argument("--every", metavar="N", type=_positive_int,
                   help="steps between checkpoints (default: only at the end)")
    f.add_argument("--resume", metavar="CKPT.npz",
                   help="continue a run from its checkpoint: the result is bit-identical to "
                        "a run that was never interrupted")
    f.add_argument("--log", metavar="FILE.jsonl|FILE.csv|DIR/",
                   help="one record per step (and one per validation): JSON lines, a CSV "
                        "table (.csv), or TensorBoard event files in a folder (DIR/; needs "
                        "tensorboardX)")
    f.add_argument("--plot", metavar="FILE.png",
                   help="training and validation loss and the gradient norm (matplotlib)")
    f.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="the progress bar on stderr (default auto: when it is a terminal)")
    p.set_defaults(func=cmd_train, parser=p)


def _check_folder(option: str, path: str | None) -> None:
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise AdcError(f"{option} '{path}': folder '{folder}' does not exist")


def _scheduled(opt, kind: str, opts: dict, total: int):
    from ..training import optim
    lr = opt.lr.lr
    if kind == "constant":
        return opt
    if kind == "warmup":
        sched = optim.warmup(lr, **opts)
    else:
        if opts.get("warmup", 0) >= total:
            raise AdcError(f"--schedule cosine: warmup={opts['warmup']} is not below the "
                           f"run's {total} steps")
        sched = optim.cosine(lr, total, **opts)
    return dataclasses.replace(opt, lr=sched)


def _threads(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of threads, got '{text}'")
    return int(text)


def cmd_train(args) -> int:
    from ..training.distributed import communicator, fail_together
    if getattr(args, "threads", None):
        from adc_runtime.threads import set_blas_threads
        set_blas_threads(args.threads)
    comm = communicator(args.distributed)
    if comm is not None and comm.rank != 0:   # process 0 alone writes the run's files
        args.save = args.log = args.plot = args.checkpoint = None
        args.progress = "off"
    with fail_together(comm):
        return _train(args, comm)


def _train(args, comm) -> int:
    from ..training.data import load_arrays
    from ..training.loop import train
    from ..training.logs import open_log
    from ..training.report import Progress, plot
    from .compile import load_module
    if args.remat and args.memory_budget:
        args.parser.error("give --remat or --memory-budget, not both")
    if args.precision and args.dtype:
        args.parser.error("--precision keeps f32 master weights and runs the program in low "
                          "precision; it does not combine with --dtype")
    if args.every and not args.checkpoint and (comm is None or comm.rank == 0):
        args.parser.error("--every needs --checkpoint FILE")
    for option, path in (("--save", args.save), ("--checkpoint", args.checkpoint),
                         ("--log", args.log), ("--plot", args.plot)):
        _check_folder(option, path)
    imported = None
    if args.file.endswith(".onnx"):
        module, imported = _import_model(args)
    else:
        if args.loss:
            args.parser.error("--loss is for an ONNX model (adc train MODEL.onnx --loss "
                              "NAME); a TDSL program writes its own loss")
        module = load_module(args.file)
    if args.fn is None:
        args.fn = _the_loss(module, args.file, args.metric)
    data = load_arrays(args.data, "training data", folder=True)
    val = load_arrays(args.val, "validation data", folder=True) if args.val else None
    init = load_arrays(args.init, "--init") if args.init else None
    if imported is not None:   # the model's own initializers, under those --init gives
        init = {**imported.params, **imported.state, **(init or {})}
        if args.wrt is None:
            args.wrt = imported.trained    # constants the import computed stay as they are

    log = open_log(args.log, append=bool(args.resume)) if args.log else None
    failed: list[str] = []   # a log or a plot that could not be written: said at the end
    bar = None
    history, val_hist = [], []
    started = time.perf_counter()

    def on_step(rec):
        nonlocal bar
        if bar is None:
            bar = Progress(total, rec["step"] - 1, None if args.progress == "auto"
                           else args.progress == "on")
        bar.update(rec)
        history.append(rec)
        _write_log(rec)

    def _write_log(rec):
        nonlocal log
        if log is None:
            return
        try:
            log.write(rec)
        except (OSError, AdcError) as e:   # the run goes on: its params are worth more
            failed.append(f"--log '{args.log}': {_why(e)}")
            print(f"adc: warning: {failed[-1]}; the log stops here", file=sys.stderr)
            _close_log()

    def _close_log():
        nonlocal log
        done, log = log, None
        try:
            done.close()
        except (OSError, AdcError) as e:
            if not failed:
                failed.append(f"--log '{args.log}': {_why(e)}")

    def on_epoch(rec):
        losses = [r["loss"] for r in history if r["epoch"] == rec["epoch"]]
        parts = [f"loss {sum(losses) / len(losses):.4g} (mean)"] if losses else []
        parts += [f"{k} {v:.4g}" for k, v in rec.items() if k.startswith("val_")]
        if any(k.startswith("val_") for k in rec):
            val_hist.append(rec)
            _write_log(rec)
        msg = f"epoch {rec['epoch'] + 1}: {'  '.join(parts)}"
        if comm is not None and comm.rank != 0:
            return                                 # process 0 speaks for the run
        bar.write(msg) if bar and not bar.bar.disable else print(msg, file=sys.stderr)

    shapes = [np.shape(a) for a in data.values()]
    rows = shapes[0][0] if shapes and shapes[0] else 0   # (a 0-d array: refused by train)
    per_step = (args.batch or rows) * args.accumulate
    total = args.steps or max(rows // max(per_step, 1), 1) * (args.epochs or 1)
    optimizer = _scheduled(args.optimizer, *args.schedule, total)
    try:
        with np.errstate(all="ignore"):  # a NaN or an Inf is reported by the loop
            result = train(
                module, data, optimizer, fn=args.fn, params=init, batch=args.batch,
                steps=args.steps, epochs=args.epochs, clip=args.clip,
                accumulate=args.accumulate, val=val, seed=args.seed,
                init_scheme=args.init_scheme, dtype=args.dtype, dims=args.bind,
                remat=args.remat, memory_budget=args.memory_budget,
                device=args.device, precision=args.precision,
                detect_anomaly=args.detect_anomaly, checkpoint=args.checkpoint,
                every=args.every, resume=args.resume, on_step=on_step, on_epoch=on_epoch,
                metrics=tuple(args.metric), wrt=args.wrt, data_name=args.data,
                val_name=args.val or "validation data", init_name=args.init or "initial params",
                report=_report_memory if args.memory_budget or args.remat not in (None, "none")
                else None, comm=comm, bucket_mb=args.bucket_mb,
                on_note=lambda m: print(f"adc: {m}", file=sys.stderr))
    finally:   # no drawing here: a stopped or failed run writes no plot
        if bar:
            bar.close()
        if log:
            _close_log()
    elapsed = time.perf_counter() - started
    if args.save:
        from ..files.write import save_npz
        from ..training.checkpoint import host
        from ..files.paths import split, stacks_of
        fn = module[args.fn or module.main.name]
        saved = {k: host(v) for k, v in result.params.items()}
        saved.update({k: host(result.state[k]) for k in fn.attrs.get("state", ())})
        save_npz(args.save, split(stacks_of(fn), saved))   # the params and the state
    if args.plot and history:   # after --save: a plot that fails costs no params
        try:
            plot(args.plot, history, val_hist)
        except (OSError, AdcError, ValueError, RuntimeError) as e:
            failed.append(f"--plot '{args.plot}': {_why(e)}")
    if comm is None or comm.rank == 0:
        _summary(result, elapsed, per_step, comm)
    if failed:
        saved = f" (the trained params were written to '{args.save}')" if args.save else ""
        raise AdcError(f"cannot write {'; '.join(failed)}{saved}")
    return 0


def _why(e: Exception) -> str:
    """The reason an output could not be written, in a few words."""
    return getattr(e, "message", None) or getattr(e, "strerror", None) or str(e)


def _import_model(args):
    """An ONNX model imported for training: its compiled program (with a function
    ``loss``, trained by default) and the `Imported` holding its initial parameters."""
    from ..frontend.onnx import from_onnx
    from ..memory.limit import current_limit
    if not args.loss:
        raise AdcError(f"{args.file}: an imported model has no loss to train: give --loss "
                       f"({' or '.join(sorted(LOSSES))})")
    imported = from_onnx(args.file, loss=args.loss, max_memory=current_limit())
    if args.fn is None:
        args.fn = "loss"
    return imported.module, imported


def _the_loss(module, path: str, metrics) -> str | None:
    """The loss to train without --fn: the one function that returns a float scalar and
    takes params, once those named by --metric are left out (None: the last function, as
    before). Several such functions (a loss and an accuracy, say) are refused: training the
    wrong one would fail silently."""
    candidates = [f.name for f in module.functions.values()
                  if "." not in f.name and not any(k in f.attrs for k in ("grad_of",
                                                                          "tangent_of"))
                  and len(f.result_types) == 1 and f.result_types[0].shape == ()
                  and f.result_types[0].is_float and f.params and f.name not in metrics]
    if len(candidates) > 1:
        raise AdcError(f"{path} has {len(candidates)} functions that return a float scalar "
                       f"and take params ({', '.join(candidates)}): say which is the loss "
                       f"with --fn NAME (and name the others with --metric)")
    return candidates[0] if candidates else None


def _report_memory(predicted: int, measured: int, policy: str) -> None:
    from ..memory.sizes import format_bytes
    print(f"remat {policy} on the training step: predicted peak {predicted:,} bytes "
          f"({format_bytes(predicted)}), measured peak {measured:,} bytes "
          f"({format_bytes(measured)})", file=sys.stderr)


def _summary(result, elapsed: float, per_step: int, comm=None) -> None:
    h = result.history
    if not h:
        print(f"nothing to do: the run had already taken {result.step} steps")
        return
    last = h[-1]
    # each record's rate covers the time since the step before: from the second step on,
    # that is the steps themselves (and validation), without compiling
    seconds = sum(per_step / r["samples_per_s"] for r in h[1:])
    rate = f", {(len(h) - 1) * per_step / seconds:,.0f} samples/s after the first step" \
        if seconds > 0 else ""
    line = (f"trained {len(h)} steps (to step {result.step}) in {elapsed:.2f} s{rate}; "
            f"final loss {last['loss']:.6g}, grad norm {last['grad_norm']:.4g}")
    skipped = sum(1 for r in h if r.get("skipped"))
    if skipped:
        line += f"; {skipped} of them skipped by loss scaling (Inf or NaN gradients)"
    if comm is not None:
        line += f"; {comm.size} processes"
    if result.val:
        line += "; " + ", ".join(f"{k} {v:.6g}" for k, v in result.val[-1].items()
                                 if k.startswith("val_"))
    print(line)
