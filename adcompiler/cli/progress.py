"""Progress on stderr for the commands that take long (``adc check``, ``adc remat-curve``):
a tqdm bar shown as ``adc train`` shows its own, when stderr is a terminal or when
``--progress on`` asks for it; stdout keeps only the command's results."""
from __future__ import annotations

import sys


def add_progress_argument(parser) -> None:
    parser.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                        help="a progress bar on stderr (default auto: when it is a terminal)")


class Progress:
    """A bar counting `unit`s; call it with (done, total) as work completes."""

    def __init__(self, args, desc: str, unit: str):
        from tqdm import tqdm
        mode = getattr(args, "progress", "auto")
        enabled = sys.stderr.isatty() if mode == "auto" else mode == "on"
        self.bar = tqdm(total=None, desc=desc, unit=unit, file=sys.stderr,
                        disable=not enabled, dynamic_ncols=True, leave=False)

    def __call__(self, done: int, total: int) -> None:
        self.bar.update(done - self.bar.n)
        if self.bar.total != total or done == total:
            # tqdm redraws at most every 0.1 s: a new total and the last step are drawn
            # now, so a run shorter than that still shows where it stood
            self.bar.total = total
            self.bar.refresh()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
