"""``adc train --log``: where a run's records go, chosen by the name given.

* ``FILE.csv``: a table, one row per record; its columns are the keys met so far (a new key,
  such as the first validation's ``val_loss``, rewrites the file with the wider header, empty
  cells where a record has no value);
* a folder (one that exists, or a name ending in ``/``): TensorBoard event files, each
  figure a scalar at its step (``train/loss``, ``train/grad_norm``, ..., ``val/loss``), by
  tensorboardX or else ``torch.utils.tensorboard`` (``pip install -e '.[tensorboard]'``);
* any other name: JSON lines (`report.JsonLog`).

Every writer opens at the first record, so a run that fails before its first step leaves an
old log as it was; a resumed run (`append`) keeps what came before its first step and drops
the rest (TensorBoard: the writer purges the events from that step on).
"""
from __future__ import annotations

import csv
import io
import os

from ..diagnostics import AdcError
from ..files.write import save_text
from .report import JsonLog

NOT_SCALARS = ("step", "epoch")


def is_tensorboard_log(path: str) -> bool:
    return os.path.isdir(path) or path.endswith(("/", os.sep))


def open_log(path: str, append: bool = False):
    """The writer for ``--log PATH`` (module docstring); a missing TensorBoard writer is an
    `AdcError` now, before the run."""
    if is_tensorboard_log(path):
        return TensorBoardLog(path, append)
    if path.lower().endswith(".csv"):
        return CsvLog(path, append)
    return JsonLog(path, append)


class CsvLog:
    """``--log FILE.csv`` (module docstring)."""

    def __init__(self, path: str, append: bool = False):
        self.path, self.append = path, append
        self.columns: list[str] = []
        self.f = None

    def _open(self, first_step: int) -> None:
        kept: list[dict] = []
        if self.append and os.path.isfile(self.path):   # (a device is not read back)
            kept = [r for r in _read_csv(self.path) if _step(r) < first_step]
        for r in kept:
            self.columns += [k for k in r if k not in self.columns]
        self._rewrite(kept)

    def _rewrite(self, rows: list[dict]) -> None:
        """The file as `rows` under the current columns, then opened to append."""
        text = io.StringIO()
        w = csv.DictWriter(text, self.columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        save_text(self.path, text.getvalue())
        try:
            self.f = open(self.path, "a", encoding="utf-8", newline="")
        except OSError as e:
            raise AdcError(f"cannot write log '{self.path}': {e.strerror}") from None

    def write(self, rec: dict) -> None:
        if self.f is None:
            self._open(rec["step"])
        new = [k for k in rec if k not in self.columns]
        if new:   # a wider header: the rows so far read back and written under it
            self.f.close()
            rows = _read_csv(self.path)
            self.columns += new
            self._rewrite(rows + [rec])
            return
        csv.DictWriter(self.f, self.columns, lineterminator="\n").writerow(rec)
        self.f.flush()

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def _step(row: dict) -> float:
    try:
        return float(row.get("step") or 0)
    except ValueError:
        return 0.0


def _read_csv(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise AdcError(f"cannot read log '{path}' to append to it: {e}") from None
    if rows and "step" not in rows[0]:
        raise AdcError(f"{path}: not a log of adc train (no 'step' column); will not append "
                       "to it")
    return [{k: v for k, v in r.items() if v not in ("", None)} for r in rows]


def _writer_class():
    try:
        from tensorboardX import SummaryWriter
        return SummaryWriter
    except ImportError:
        pass
    try:
        from torch.utils.tensorboard import SummaryWriter
        return SummaryWriter
    except ImportError:
        raise AdcError("--log DIR/ writes TensorBoard event files, which needs tensorboardX "
                       "(pip install -e '.[tensorboard]') or PyTorch with tensorboard") \
            from None


class TensorBoardLog:
    """``--log DIR/`` (module docstring)."""

    def __init__(self, path: str, append: bool = False):
        self.path, self.append = path, append
        self.cls = _writer_class()
        self.w = None

    def write(self, rec: dict) -> None:
        if self.w is None:
            try:
                os.makedirs(self.path, exist_ok=True)
                self.w = self.cls(self.path, purge_step=rec["step"] if self.append else None)
            except OSError as e:
                raise AdcError(f"cannot write log '{self.path}': {e.strerror}") from None
        val = any(k.startswith("val_") for k in rec)
        for k, v in rec.items():
            if k in NOT_SCALARS or not isinstance(v, (int, float)):
                continue
            tag = f"val/{k[4:]}" if val and k.startswith("val_") else f"train/{k}"
            self.w.add_scalar(tag, v, rec["step"])
        self.w.flush()

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
