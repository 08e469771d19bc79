"""`adc.train`: the training loop behind ``adc train``.

One compiled step (`adc.train_step`: forward, adjoint, clipping and the optimizer update in
one program) is called on mini-batches drawn as `train_data` describes. The loop adds what a
run needs around the step: validation each epoch with the forward-only program, checkpoints
every N steps, resuming, a progress bar, a JSON-lines log, a plot, and stopping at a
non-finite loss or gradient norm without writing the bad parameters anywhere.

With a communicator (`adcompiler.training.distributed`), every process draws the same global batches
and trains on its own shard of each; the step averages the loss and gradients over the
processes, so the run does not depend on their number. Process 0 alone validates and
writes checkpoints; every process can resume from one.

A run interrupted and resumed from a checkpoint ends bit-identical to one that ran through:
the checkpoint holds the parameters, the optimizer state, the step, the position within the
epoch, the shuffling Generator's state at the epoch's start, and the loss scaler's state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from . import checkpoint as ckpt
from ..diagnostics import AdcError
from .distributed import shard
from ..files.paths import flat_paths, is_nested, nest, split, split_names, stacks_of
from .data import (DimBinder, bind_batch, check_data, check_loss, check_params,
                         draw_params, epoch_batches, param_names, rows_of, take_rows)


class NonFiniteLoss(AdcError):
    """The loss or the gradient norm of a step was NaN or Inf; the run stopped before
    keeping that step."""


@dataclass
class TrainResult:
    params: dict             # the parameters after the last good step, by name
    state: Any               # the optimizer state after it
    step: int                # steps taken (counting those of a resumed run)
    history: list = field(default_factory=list)   # one metrics record per step
    val: list = field(default_factory=list)       # one record per epoch with validation


@dataclass
class _Position:
    """Where the loop is: steps taken, the epoch, the next batch in it, and the shuffling
    Generator's state at the epoch's start (to draw the same permutation again)."""
    step: int = 0
    epoch: int = 0
    batch: int = 0
    rng_state: dict | None = None


def _float(v) -> float:
    return float(ckpt.host(v))


def _record(metrics: Mapping, pos: _Position, samples_per_s: float) -> dict:
    rec = {"step": pos.step, "epoch": pos.epoch}
    for k, v in metrics.items():   # 0-d arrays: loss, grad_norm, grad_norm_<p>, lr, ...
        a = ckpt.host(v)
        if a.ndim == 0:
            rec[k] = float(a)
    rec["samples_per_s"] = samples_per_s
    return rec


def train(program, data: Mapping[str, np.ndarray], optimizer, *, fn: str | None = None,
          params: Mapping[str, np.ndarray] | None = None, batch: int | None = None,
          steps: int | None = None, epochs: int | None = None, clip: float | None = None,
          accumulate: int = 1, val: Mapping[str, np.ndarray] | None = None, seed: int = 0,
          init_scheme: str = "torch", dtype: str | None = None,
          dims: Mapping[str, int] | None = None, remat: str | None = None,
          memory_budget: int | None = None,
          device: str = "cpu", precision: str | None = None, detect_anomaly: bool = False,
          checkpoint: str | None = None, every: int | None = None,
          resume: str | None = None, on_step: Callable[[dict], None] | None = None,
          on_epoch: Callable[[dict], None] | None = None, metrics: tuple[str, ...] = (),
          wrt=None, data_name: str = "data", val_name: str = "validation data",
          init_name: str = "initial params",
          report: Callable[[int, int, str], None] | None = None,
          comm=None, bucket_mb: float = 25.0,
          on_note: Callable[[str], None] | None = None) -> TrainResult:
    """Train the ``param`` inputs of `fn` (default: the module's main function) on `data`.

    `data`: one array per non-param input, rows on the leading axis. `params`: initial
    values by name (default: drawn by `init_scheme` from `seed`). Each step reads
    `accumulate` mini-batches of `batch` rows (default: every row). Stops after `steps`
    steps or `epochs` epochs (default one epoch). `val` is evaluated at the end of each
    epoch by the forward program, with each function named in `metrics` (same inputs as
    the loss, a scalar result, e.g. an accuracy). `checkpoint` is written every `every` steps and at the
    end; `resume` continues from a checkpoint. `on_step(record)` and `on_epoch(record)` are
    called with each step's metrics and at each epoch's end (with the validation figures). `wrt` names the
    inputs to train (default: the ``param`` inputs); every other input is data. With a
    `remat` policy or a `memory_budget` (bytes: the step's remat schedule is chosen so that
    the whole step's predicted peak fits), `report(predicted, measured, policy)` is told the
    step's peak memory after the first step. The `*_name` arguments name the data in error
    messages. `comm`: a communicator for data-parallel training (each step's `batch` rows are
    split evenly over its processes; gradients all-reduced in buckets of `bucket_mb` MiB).
    """
    from .setup import prepare
    from . import guards
    seed = guards.check_seed(seed)
    guards.check_mappings(data=data, params=params, val=val)
    if resume is not None and params is not None:
        raise AdcError("give initial params or a checkpoint to resume, not both: a resumed "
                       "run continues from the checkpoint's params (--init with --resume)")
    run = prepare(program, fn=fn, dtype=dtype, dims=dims)
    f = run.fn
    check_loss(f)
    names = param_names(f, wrt)
    binder = DimBinder(dims)
    data = check_data(f, names, data, data_name, binder)
    rows = rows_of(data)
    batch = rows if batch is None else int(batch)
    if accumulate < 1:
        raise AdcError(f"accumulate must be at least 1, got {accumulate}")
    if batch < 1:
        raise AdcError(f"the batch must hold at least one row, got {batch}")
    if batch * accumulate > rows:
        per = f"{accumulate} x {batch}" if accumulate > 1 else f"{batch}"
        raise AdcError(f"{data_name} has {rows} rows, fewer than one step's batch of {per}")
    size = 1 if comm is None else comm.size
    if batch % size:
        raise AdcError(f"a batch of {batch} rows does not split evenly over {size} processes:"
                       f" choose a batch that is a multiple of {size}")
    root = comm is None or comm.rank == 0
    if not root:
        checkpoint = None   # process 0 writes the run's files
    row_dims = bind_batch(f, names, batch // size, binder)
    if val is not None:
        val = check_data(f, names, val, val_name,
                         DimBinder({k: v for k, v in binder.env.items() if k not in row_dims}))
        if rows_of(val) == 0:
            raise AdcError(f"{val_name} has no rows: there is nothing to validate on")
    nested = params is not None and is_nested(params)
    model_state = list(f.attrs.get("state", ()))   # running statistics and the like
    flat = {} if params is None else flat_paths(params)   # state may come with the params
    given_state = {k: np.asarray(flat[k]) for k in model_state if k in flat}
    given = {} if params is None else check_params(f, names, params, init_name, binder,
                                                   partial=True)
    drawn = [n for n in names if n not in given]
    if drawn and params is not None and on_note is not None:
        on_note(f"{init_name} leaves out {', '.join(split_names(f, drawn))}: drawn by role "
                f"(scheme {init_scheme})")
    guards.check_params_fit(f, drawn, binder.env)
    params = {**draw_params(f, drawn, binder.env, init_scheme, seed, run.module), **given}
    params = {n: params[n] for n in names}
    per_epoch = rows // (batch * accumulate)
    if steps is None:
        steps = per_epoch * (1 if epochs is None else int(epochs))
    elif epochs is not None:
        raise AdcError("give the length of the run as steps or epochs, not both")
    if every is not None and every < 1:
        raise AdcError(f"checkpoints every {every} steps: expected at least 1")

    options = dict(clip=clip, accumulate=accumulate, device=device, precision=precision,
                   detect_anomaly=detect_anomaly, dims=binder.env, comm=comm,
                   bucket_mb=bucket_mb)
    options["seed"] = seed   # of the program's random ops
    if memory_budget is not None:
        if remat is not None:
            raise AdcError("give remat or memory_budget, not both")
        step_fn, remat = _fit_budget(run, optimizer, names, memory_budget, options)
    else:
        step_fn = run.step(optimizer, names, remat=remat, **options)
    guards.check_step_fits(step_fn, binder.env)
    state = step_fn.init(params, given_state) if model_state else step_fn.init(params)
    scaler = getattr(step_fn, "scaler", None)
    signature = ckpt.model_signature(f.name, params)
    rng = np.random.default_rng(seed)
    pos = _Position(rng_state=rng.bit_generator.state)
    plan = {"rows": rows, "batch": batch, "accumulate": accumulate}
    kind = getattr(optimizer, "kind", str(optimizer))
    if resume is not None:
        params, state, pos = _resume(resume, signature, scaler, state, f,
                                     dict(plan, optimizer=kind), step_fn)
        try:
            rng.bit_generator.state = pos.rng_state
        except (TypeError, ValueError, KeyError, OverflowError) as e:
            raise AdcError(f"checkpoint '{resume}': its metadata field 'rng' is not a state of "
                           f"this run's random generator ({e})") from None
    guards.agree_on_plan(comm, dict(plan, steps=steps, bucket_mb=bucket_mb, seed=seed,
                                    start_step=pos.step))
    batches = epoch_batches(rows, batch * accumulate, rng)
    eval_dims = {k: v for k, v in binder.env.items() if k not in row_dims}
    evaluators = {"val_loss": run.forward(f.name, device, detect_anomaly, eval_dims)}
    for m in metrics:
        evaluators[f"val_{m}"] = run.forward(m, device, detect_anomaly, eval_dims)
    result = TrainResult(params, state, pos.step)
    from .report import Rate
    rate = Rate()
    skips = guards.SkipWatch()

    def save_checkpoint():
        meta = {"model": signature, "step": pos.step, "epoch": pos.epoch,
                "batch": pos.batch, "rng": pos.rng_state,
                "scaler": scaler.state() if scaler else None, "optimizer": kind,
                "plan": plan}
        ckpt.save(checkpoint, split(stacks_of(f), params),    # by leaf path
                  state_as_tree(step_fn, state, f), meta)

    while pos.step < steps:
        idx = batches[pos.batch]
        mine = idx if comm is None else shard(idx, comm.rank, comm.size)
        new_params, new_state, metrics = step_fn(params, state, take_rows(data, mine))
        loss = _float(metrics["loss"])
        norm = _float(metrics.get("grad_norm", 0.0))
        skipped = _float(metrics.get("skipped", 0.0))   # loss scaling skips Inf gradients
        if scaler is not None and math.isfinite(loss):
            skips.step(bool(skipped), pos.step + 1, _float(metrics.get("loss_scale", 1.0)))
        if not math.isfinite(loss) or not (skipped or math.isfinite(norm)):
            kept = (f"; the last checkpoint '{checkpoint}' is kept" if checkpoint else "")
            what = f"the loss is {loss}" if not math.isfinite(loss) else \
                f"the gradient norm is {norm} (the loss {loss:.6g})"
            raise NonFiniteLoss(
                f"{what} at step {pos.step + 1} (epoch {pos.epoch + 1}); training stopped "
                f"before keeping that step{kept}. Run again with --detect-anomaly to find "
                "the first op that made a NaN or Inf")
        params, state = new_params, new_state
        if pos.step == result.step:
            _warn_no_gradient(f, names, metrics, norm, pos.step + 1, on_note)
        if report is not None and pos.step == result.step:  # the first step of this run
            report(*_peaks(step_fn, binder.env), remat)
        pos.step += 1
        pos.batch += 1
        rec = _record(metrics, pos, rate(len(idx)))
        result.history.append(rec)
        if on_step:
            on_step(rec)
        if pos.batch == len(batches):  # the epoch's end: validation, then a new shuffle
            erec = {"step": pos.step, "epoch": pos.epoch}
            if val is not None and root:
                now = {**params, **{k: state[k] for k in model_state}}
                erec.update({k: _mean(ev, now, val, batch) for k, ev in evaluators.items()})
                result.val.append(erec)
            if on_epoch:
                on_epoch(erec)
            pos.epoch += 1
            pos.batch = 0
            pos.rng_state = rng.bit_generator.state
            batches = epoch_batches(rows, batch * accumulate, rng)
        if checkpoint and ((every and pos.step % every == 0) or pos.step == steps):
            save_checkpoint()
    if scaler is not None:
        skips.check_end(len(result.history))
    result.params, result.state, result.step = params, state, pos.step
    if nested:   # given as nested dicts and lists: returned so
        result.params = nest(split(stacks_of(f), {k: ckpt.host(v) for k, v in params.items()}))
        result.state = state_as_tree(step_fn, state, f)
    return result


def _warn_no_gradient(fn, names: list[str], metrics: Mapping, norm: float, step: int,
                      note) -> None:
    """A first step whose gradient is exactly zero, in all or for some parameters, trains
    nothing there: say so, naming them (a loss that ignores them, a gain that starts at 0)."""
    none = [n for n in names if _float(metrics.get(f"grad_norm_{n}", 1.0)) == 0.0]
    if norm == 0.0:
        none = list(names)
    if not none:
        return
    shown = ", ".join(split_names(fn, none))
    if len(none) == len(names):
        msg = (f"warning: the gradient norm is exactly 0 at step {step}: no parameter of "
               f"'{fn.name}' gets a gradient ({shown}), so training changes nothing. Is "
               f"'{fn.name}' the loss? (--fn names it)")
    else:
        msg = (f"warning: {shown} got no gradient at step {step} (exactly 0): '{fn.name}' "
               "may not depend on them")
    if note is not None:
        note(msg)
    else:
        import warnings
        warnings.warn(msg, stacklevel=3)


def _mean(evaluate, params: Mapping, val: Mapping, batch: int) -> float:
    """A function of the validation data (the loss, a metric): the forward program on
    batches of `batch` rows (the last one shorter), averaged weighted by their rows (the
    mean over every row, for a function that is a mean over its rows)."""
    rows = rows_of(val)
    total = 0.0
    for start in range(0, rows, batch):
        part = {k: a[start:start + batch] for k, a in val.items()}
        total += _float(evaluate({**params, **part})) * len(next(iter(part.values())))
    return total / rows


def _peaks(step_fn, dims: Mapping[str, int]) -> tuple[int, int]:
    """The step's peak live memory: predicted from its IR, and measured by its executor."""
    from ..memory.liveness import predict_peak
    predicted = predict_peak(step_fn.module, step_fn.fn_name, dims).peak_bytes
    return predicted, step_fn.stats["peak_bytes"]


def _fit_budget(run, optimizer, names, budget: int, options: dict) -> tuple:
    """The step whose whole predicted peak (parameters, optimizer state and gradients
    included) fits `budget`, and its policy. The remat schedule budgets the adjoint's own
    memory, so the largest adjoint budget whose step fits is found by bisection (the step's
    peak grows with the adjoint's budget)."""
    from ..memory.liveness import predict_peak
    from ..memory.sizes import format_bytes

    def attempt(target: int):
        try:
            step = run.step(optimizer, names, remat=f"budget:{target}", **options)
        except AdcError:  # the adjoint alone cannot fit `target`
            return None, None
        return step, predict_peak(step.module, step.fn_name, options["dims"]).peak_bytes

    step, peak = attempt(budget)
    if peak is not None and peak <= budget:
        return step, f"budget:{budget}"
    best = (run.step(optimizer, names, remat="min-memory", **options), "min-memory")
    least = predict_peak(best[0].module, best[0].fn_name, options["dims"]).peak_bytes
    if least > budget:
        raise AdcError(f"memory budget {format_bytes(budget)} ({budget:,} bytes) cannot be "
                       f"met: the training step's smallest predicted peak is "
                       f"{format_bytes(least)} ({least:,} bytes, remat min-memory)")
    lo, hi = 0, budget
    while hi - lo > budget // 50:   # within 2% of the largest adjoint budget that fits
        mid = (lo + hi) // 2
        step, peak = attempt(mid)
        if peak is not None and peak <= budget:
            best, lo = (step, f"budget:{mid}"), mid
        else:
            hi = mid
    return best


def state_as_tree(step, state: Mapping, fn) -> dict:
    """A step's flat state as the tree mirroring the params' (`state_tree`), on the host."""
    from .state_tree import layout, to_tree
    return to_tree({k: ckpt.host(v) for k, v in state.items()}, layout(step),
                   lambda d: nest(split(stacks_of(fn), d)))


def _saved_state(path: str, flat: Mapping, template: Mapping, fn, step) -> dict:
    """The flat state of a checkpoint: saved as the tree (``state/exp_avg/m/W``), or keyed
    by the step's input names as checkpoints were written before (``state/exp_avg_m.W``)."""
    old = ckpt.flatten(template)
    if set(flat) <= set(old):
        return ckpt.unflatten(template, flat, path)
    from ..files.paths import flat_paths, join
    from .state_tree import from_tree, layout
    tree = state_as_tree(step, template, fn)
    extra = sorted(set(flat) - set(ckpt.flatten(tree)))
    if extra:
        raise AdcError(f"checkpoint '{path}': optimizer state '{extra[0]}' is not one of this "
                       "run's (saved with another optimizer?)")
    return from_tree(ckpt.unflatten(tree, flat, path), layout(step),
                     lambda t, what, names: join(fn, flat_paths(t), f"checkpoint '{path}': "
                                                 f"{what}", names))


def _resume(path: str, signature: dict, scaler, template, fn, plan: dict, step) -> tuple:
    from . import guards
    params, flat, meta = ckpt.load(path)
    ckpt.check_meta(path, meta)
    from ..files.paths import join
    params = join(fn, params, f"checkpoint '{path}'")
    ckpt.check_model(path, meta, signature)
    saved = meta.get("plan")
    if isinstance(saved, dict) and {k: saved.get(k) for k in ("rows", "batch", "accumulate")} \
            != {k: plan[k] for k in ("rows", "batch", "accumulate")}:
        raise AdcError(f"checkpoint '{path}' was written by a run of {saved.get('rows')} rows "
                       f"in batches of {saved.get('batch')} x {saved.get('accumulate')}, this "
                       f"run has {plan['rows']} rows in batches of {plan['batch']} x "
                       f"{plan['accumulate']}: resume with the data, --batch and --accumulate "
                       "it was written with (the shuffles and the position in the epoch "
                       "depend on them)")
    guards.check_resume(path, meta, batches=plan["rows"] // (plan["batch"] * plan["accumulate"]),
                        optimizer=plan["optimizer"])
    state = _saved_state(path, flat, template, fn, step)
    if scaler is not None and meta.get("scaler"):
        scaler.load_state(meta["scaler"])
    pos = _Position(meta["step"], meta["epoch"], meta["batch"], meta["rng"])
    return params, state, pos


__all__ = ["train", "TrainResult", "NonFiniteLoss"]
