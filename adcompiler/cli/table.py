"""Plain-text tables for the CLI's summaries (`adc run`, `adc check`)."""
from __future__ import annotations

import numpy as np

SHOW_VALUES_UP_TO = 6  # arrays with at most this many elements are printed in full


def table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces, with a rule under the header."""
    widths = [max(len(str(r[k])) for r in [header] + rows) for k in range(len(header))]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def fmt_shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def fmt_value(a: np.ndarray) -> str:
    """A scalar's value, a small array's values, or nothing for a large array."""
    if a.ndim == 0:
        return f"{a.item():.6g}" if a.dtype.kind == "f" else str(a.item())
    if a.size <= SHOW_VALUES_UP_TO:
        return np.array2string(a, precision=4, separator=", ", suppress_small=False,
                               max_line_width=10**6).replace("\n", "")
    return ""


def fmt_norm(a: np.ndarray) -> str:
    if a.ndim == 0 or a.dtype.kind not in "fiu":
        return ""
    return f"{float(np.linalg.norm(a.astype(np.float64).ravel())):.6g}"


def summary(named: list[tuple[str, np.ndarray]]) -> str:
    """One row per array: name, shape, dtype, L2 norm (non-scalars), value (small arrays)."""
    rows = [[name, fmt_shape(a.shape), str(a.dtype), fmt_norm(a), fmt_value(a)]
            for name, a in named]
    return table(["name", "shape", "dtype", "norm", "value"], rows)
