"""What a training run shows while it runs and leaves behind: a progress bar on stderr
(tqdm), one JSON object per step in a ``.jsonl`` log, and a plot of the losses and the
gradient norm (matplotlib).

tqdm rather than rich: one small package with no dependencies of its own, that writes to
stderr, turns itself off when stderr is not a terminal, and redraws at most a few times a
second, so a fast step loop is not slowed by its bar.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

from ..files.write import save_text, write_atomic
from ..diagnostics import AdcError


class Progress:
    """The bar: step, loss, gradient norm and samples per second (tqdm, on stderr)."""

    def __init__(self, total: int, start: int = 0, enabled: bool | None = None):
        from tqdm import tqdm
        self.bar = tqdm(total=total, initial=start, unit="step", file=sys.stderr,
                        disable=(not sys.stderr.isatty()) if enabled is None else not enabled,
                        dynamic_ncols=True, leave=True)

    def update(self, rec: dict) -> None:
        self.bar.set_postfix_str(f"loss {rec['loss']:.4g}  |g| {rec['grad_norm']:.3g}  "
                                 f"{rec['samples_per_s']:,.0f} samples/s", refresh=False)
        self.bar.update(1)

    def write(self, line: str) -> None:
        self.bar.write(line, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


class Rate:
    """Samples per second over the last step (wall clock)."""

    def __init__(self):
        self.t = time.perf_counter()

    def __call__(self, samples: int) -> float:
        now = time.perf_counter()
        dt, self.t = now - self.t, now
        return samples / dt if dt > 0 else math.inf


class JsonLog:
    """``--log FILE.jsonl``: one object per line, flushed as written. The file is opened at
    the first record, so a run that fails before its first step leaves an old log as it
    was; a resumed run (`append`) keeps the lines before its first step (rewritten
    atomically) and appends after them."""

    def __init__(self, path: str, append: bool = False):
        self.path, self.append, self.f = path, append, None

    def _open(self, first_step: int) -> None:
        mode = "w"
        if self.append and os.path.isfile(self.path):   # (a device is not read back)
            kept = [line for line in _read_lines(self.path)
                    if json.loads(line).get("step", 0) < first_step]
            save_text(self.path, "".join(kept))
            mode = "a"
        try:
            self.f = open(self.path, mode, encoding="utf-8")
        except OSError as e:
            raise AdcError(f"cannot write log '{self.path}': {e.strerror}") from None

    def write(self, rec: dict) -> None:
        if self.f is None:
            self._open(rec["step"])
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def _read_lines(path: str) -> list[str]:
    from ..files.read import read_bytes
    try:
        text = read_bytes(path, "log").decode("utf-8")
    except UnicodeDecodeError:
        raise AdcError(f"{path}: not a log of adc train (not UTF-8 text); will not append "
                       "to it") from None
    lines = [line for line in text.splitlines(keepends=True) if line.strip()]
    for k, line in enumerate(lines, 1):
        try:
            ok = isinstance(json.loads(line), dict)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise AdcError(f"{path}:{k}: not a JSON object; will not append to it")
    return [line if line.endswith("\n") else line + "\n" for line in lines]


def plot(path: str, history: list[dict], val: list[dict]) -> None:
    """Training loss per step, validation loss per epoch, and the gradient norm, as PNG."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AdcError("--plot needs matplotlib: pip install -e '.[plot]'") from None
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    steps = [r["step"] for r in history]
    ax1.plot(steps, [r["loss"] for r in history], lw=1, label="training loss")
    if val:
        ax1.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-",
                 label="validation loss")
    ax1.set_ylabel("loss")
    ax1.set_yscale("log" if all(r["loss"] > 0 for r in history) else "linear")
    ax1.legend()
    ax2.plot(steps, [r["grad_norm"] for r in history], lw=1, color="tab:red")
    ax2.set_ylabel("gradient norm (before clipping)")
    ax2.set_xlabel("step")
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
