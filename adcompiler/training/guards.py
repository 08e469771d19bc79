"""Checks of a training run made before its work, and the watch over its steps.

* Memory (``--max-memory``): the parameters are refused before they are drawn, and the
  compiled step (parameters, optimizer state, tape and every intermediate, as the memory
  model predicts its peak) before its state is allocated, each with the predicted size.
* A run over processes: every rank's plan (rows, batch, steps, bucket size, seed, the
  step it starts from) must be the same, or every rank would wait in a different
  collective forever; they compare plans once, before the first step, and fail together.
* Resuming: the checkpoint's position must fit this run's batches (another ``--batch``,
  ``--accumulate`` or fewer rows would read past the epoch), its optimizer must be this
  run's, and its metadata fields must be of their kinds.
* Mixed precision: `MAX_SKIPPED` steps in a row skipped by loss scaling stop the run (the
  scale has then gone from 2^16 to below f16's smallest normal number, 2^-14: gradients
  that still overflow do so at every scale), and a run whose every step was skipped is an
  error rather than "trained N steps".
"""
from __future__ import annotations

from typing import Mapping

from ..diagnostics import AdcError

MAX_SKIPPED = 30


def check_seed(seed) -> int:
    """`seed` as NumPy's generators take it: a whole number, at least 0."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
        raise AdcError(f"the seed must be a whole number from 0 to 2^64 - 1, got {seed!r}")
    return seed


def check_mappings(**given) -> None:
    """`adc.train`'s data, params and validation data are dicts (or None)."""
    for what, value in given.items():
        if value is not None and not isinstance(value, Mapping):
            raise AdcError(f"{what} must be a dict of arrays by name (or nested dicts and "
                           f"lists by path), got {type(value).__name__}")


def check_params_fit(fn, names: list[str], env: Mapping[str, int]) -> None:
    """Refuse parameters above the memory limit before drawing them."""
    from ..diagnostics import UnboundDimError
    from ..memory.limit import check_arrays_fit
    try:
        check_arrays_fit([fn.arg(n).type for n in names], env,
                         f"the params of '{fn.name}' ({', '.join(names)})")
    except UnboundDimError:   # named where the params are drawn
        return


def check_step_fits(step_fn, env: Mapping[str, int]) -> None:
    """Refuse a compiled training step whose predicted peak live memory (its inputs, that
    is the parameters, the optimizer state and the batch, its tape and intermediates)
    exceeds the memory limit, before its state is allocated. A mixed-precision step runs
    two programs (the low-precision gradient, then the f32 update): their peaks add."""
    from ..memory.limit import check_fits
    from ..memory.liveness import predict_peak
    programs = [(step_fn.module, step_fn.fn_name)]
    grad = getattr(step_fn, "grad", None)
    if grad is not None and hasattr(grad, "module"):
        programs.append((grad.module, grad.fn_name))
    total = sum(predict_peak(m, name, env).peak_bytes for m, name in programs)
    check_fits(total, "a training step (the params, the optimizer state, the tape and "
                      "the intermediates: predicted peak live memory)")


# the plan every rank of a run must share, in the order of the message
PLAN = ("rows", "batch", "accumulate", "steps", "bucket_mb", "seed", "start_step")


def agree_on_plan(comm, plan: Mapping[str, float]) -> None:
    """Compare `plan` over the ranks of `comm` (no-op without one); on a difference every
    rank stops: the lowest with the message, the others quietly (exit 1 each)."""
    if comm is None or comm.size == 1 or not hasattr(comm, "agree_plan"):
        return
    differ = comm.agree_plan([float(plan[k]) for k in PLAN])
    if differ is None:
        return
    k, low, high = differ
    if comm.rank != 0:
        from adc_runtime.collectives import PeerFailed
        raise PeerFailed(1)
    e = AdcError(f"the {comm.size} processes of this run disagree on {_PLAN_WORDS[PLAN[k]]} "
                 f"({_num(low)} on one, {_num(high)} on another): every process must have "
                 "the same data rows, options and checkpoint")
    e.every_rank_knows = True   # `distributed.fail_together`: reported once, no abort
    raise e


_PLAN_WORDS = {"rows": "the rows of their training data", "batch": "the batch",
               "accumulate": "--accumulate", "steps": "the number of steps",
               "bucket_mb": "--bucket-mb", "seed": "--seed",
               "start_step": "the step they resume from"}


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def check_resume(path: str, meta: dict, *, batches: int, optimizer: str) -> None:
    """A checkpoint's position must be one of this run's batches, and its optimizer this
    run's (`meta` already checked by `checkpoint.check_meta`)."""
    saved = meta.get("optimizer")
    if saved is not None and saved != optimizer:
        raise AdcError(f"checkpoint '{path}' was written by optimizer {saved}, this run uses "
                       f"{optimizer}: its state would be read as another optimizer's "
                       f"(resume with --optimizer {saved})")
    if meta["batch"] >= batches:
        raise AdcError(f"checkpoint '{path}' stopped at batch {meta['batch'] + 1} of its "
                       f"epoch, but this run's epochs have {batches} batches: resume with "
                       "the --batch, --accumulate and data it was written with")


class SkipWatch:
    """Counts the steps loss scaling skipped: `MAX_SKIPPED` in a row stop the run."""

    def __init__(self):
        self.in_a_row = 0
        self.total = 0

    def step(self, skipped: bool, step: int, scale: float | None) -> None:
        if not skipped:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        self.total += 1
        if self.in_a_row >= MAX_SKIPPED:
            at = f" (the loss scale is down to {scale:g})" if scale is not None else ""
            raise AdcError(f"loss scaling skipped {self.in_a_row} steps in a row, up to step "
                           f"{step}{at}: the gradients overflow at every scale, so the run "
                           "cannot train in this precision; training stopped (the params "
                           "are those of the last step kept). Run again with "
                           "--detect-anomaly to find the op")

    def check_end(self, steps: int) -> None:
        """After the run: refuse one whose every step was skipped."""
        if steps and self.total == steps:
            raise AdcError(f"loss scaling skipped every step of this run ({steps}): the "
                           "params did not change. The loss scale starts at 2^16 and halves "
                           "at each skipped step: train more steps, or with --detect-anomaly "
                           "to find the op that overflows")
