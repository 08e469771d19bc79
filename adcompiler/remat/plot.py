"""The memory / recomputation trade-off drawn (``adc remat-curve -o curve.png``): each
budget's schedule as recomputation against predicted peak (measured peaks beside them), the
two ends of the sweep (min-memory and store-all) as labelled lines, the baseline policies
(``sqrt``, ``mincut``) as labelled points. An axis whose values span more than a decade is
logarithmic (symmetric-logarithmic for recomputation, which is 0 at store-all)."""
from __future__ import annotations

import os
from typing import Sequence

DECADE = 10.0
_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("bytes", 1))


def spans_decades(values: Sequence[float]) -> bool:
    """Whether the positive `values` span more than a factor of ten."""
    pos = [v for v in values if v > 0]
    return bool(pos) and max(pos) > DECADE * min(pos)


def _unit(largest: float) -> tuple[str, int]:
    return next((name, size) for name, size in _UNITS if largest >= size or size == 1)


def plot_curve(rows: list[dict], path: str, title: str = "",
               baselines: Sequence[dict] = ()) -> bool:
    """Draw `rows` (from `remat_curve`) and `baselines` (from `baseline_rows`) into `path`,
    its format from the extension; False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig = draw_curve(rows, title, baselines)
    from ..files.write import write_atomic
    fmt = os.path.splitext(path)[1][1:].lower() or "png"
    try:
        write_atomic(path, lambda f: fig.savefig(f, format=fmt))
    finally:
        plt.close(fig)
    return True


def draw_curve(rows: list[dict], title: str = "", baselines: Sequence[dict] = ()):
    """The figure `plot_curve` saves (matplotlib's, which the caller closes)."""
    import matplotlib.pyplot as plt
    peaks = [r["peak_bytes_predicted"] for r in list(rows) + list(baselines)]
    unit, scale = _unit(max(peaks))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    xs = [r["peak_bytes_predicted"] / scale for r in rows]
    ys = [r["recompute_fraction"] for r in rows]
    ax.plot(xs, ys, "o-", color="C0", label="budget sweep (predicted peak)")
    meas = [(r["peak_bytes_measured"] / scale, r["recompute_fraction"]) for r in rows
            if r["peak_bytes_measured"] is not None]
    if meas:
        ax.plot(*zip(*meas), "x", color="C1", markersize=8, label="measured peak")
    ends = [("min-memory", rows[0]["budget"], "C2"), ("store-all", rows[-1]["budget"], "C3")]
    for name, peak, color in ends:
        ax.axvline(peak / scale, color=color, linestyle="--", linewidth=1,
                   label=f"{name}: {peak / scale:,.4g} {unit}")
    for k, r in enumerate(baselines):
        x, y = r["peak_bytes_predicted"] / scale, r["recompute_fraction"]
        ax.plot([x], [y], "D", color=f"C{4 + k}", label=f"{r['policy']} "
                f"({r['recompute_fraction']:.2f}x)")
        ax.annotate(r["policy"], (x, y), textcoords="offset points", xytext=(6, 6),
                    fontsize=8)
    if spans_decades(peaks):
        ax.set_xscale("log")
    fractions = ys + [r["recompute_fraction"] for r in baselines]
    if spans_decades(fractions):
        smallest = min(v for v in fractions if v > 0)
        ax.set_yscale("symlog", linthresh=smallest)
    ax.set_xlabel(f"peak live memory ({unit})")
    ax.set_ylabel("recomputed FLOPs / forward FLOPs")
    ax.set_title(title or "remat trade-off")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
