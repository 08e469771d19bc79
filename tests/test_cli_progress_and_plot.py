"""The long commands say how far they are (``adc check``, ``adc remat-curve``: a bar on
stderr when it is a terminal or with ``--progress on``, never on stdout), and the remat
plot shows its whole range: logarithmic axes where values span decades, the file's base
name as its title, the min-memory and store-all ends and the baselines labelled."""
from __future__ import annotations

from pathlib import Path

import pytest

from adcompiler import cli

ROOT = Path(__file__).resolve().parent.parent
RNN, RNN_IN = str(ROOT / "samples" / "rnn.tdsl"), str(ROOT / "samples" / "rnn.json")


def adc(capsys, *args):
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_shows_progress_on_stderr_only(capsys):
    code, quiet, err = adc(capsys, "check", RNN, "--inputs", RNN_IN)
    assert code == 0 and "finite differences" not in err   # stderr is not a terminal here
    code, out, err = adc(capsys, "check", RNN, "--inputs", RNN_IN, "--progress", "on")
    assert code == 0 and out == quiet
    assert "finite differences" in err and "/36 [" in err   # 12 + 16 + 4 + 4 probes
    code, _, err = adc(capsys, "check", RNN, "--inputs", RNN_IN, "--progress", "off")
    assert code == 0 and "finite differences" not in err


def test_remat_curve_shows_progress_and_titles_its_plot_by_base_name(capsys, monkeypatch,
                                                                      tmp_path):
    from adcompiler.remat import plot
    drawn = {}
    monkeypatch.setattr(plot, "plot_curve", lambda rows, path, title, base: drawn.update(
        rows=rows, title=title, base=base) or True)
    code, out, err = adc(capsys, "remat-curve", RNN, "--bind", "T=6", "--points", "3",
                         "--progress", "on", "-o", tmp_path / "c.png")
    assert code == 0, err
    assert "remat schedules" in err and "/7 [" in err       # 2 ends, 3 budgets, 2 baselines
    assert "remat schedules" not in out
    assert drawn["title"] == "rnn.tdsl (rnn_grad)"
    assert [b["policy"] for b in drawn["base"]] == ["sqrt", "mincut"]


def rows(peaks, fractions):
    return [{"budget": p, "peak_bytes_predicted": p, "peak_bytes_measured": p,
             "recompute_fraction": f} for p, f in zip(peaks, fractions)]


def test_plot_axes_ends_and_baselines(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from adcompiler.remat.plot import draw_curve, plot_curve, spans_decades
    assert spans_decades([1, 11]) and not spans_decades([1, 10]) and not spans_decades([0, 0])
    base = [{"policy": "sqrt", "peak_bytes_predicted": 3 * 2**20, "peak_bytes_measured": None,
             "recompute_fraction": 1.0}]
    fig = draw_curve(rows([2**20, 2**22, 2**26], [30.0, 0.5, 0.0]), "deep.tdsl", base)
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "symlog")
    assert ax.get_title() == "deep.tdsl" and ax.get_xlabel() == "peak live memory (MiB)"
    labels = ax.get_legend_handles_labels()[1]
    assert "min-memory: 1 MiB" in labels and "store-all: 64 MiB" in labels
    assert "sqrt (1.00x)" in labels
    plt.close(fig)
    fig = draw_curve(rows([40_000, 60_000], [0.8, 0.5]))   # within a decade: linear axes
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("linear", "linear")
    assert ax.get_xlabel() == "peak live memory (KiB)"
    plt.close(fig)
    assert plot_curve(rows([2**20, 2**22], [1.0, 0.0]), str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
