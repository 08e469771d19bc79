"""PyTorch's OpInfo samples run through adc: the table per op of samples, pass, refused,
convention and fail.

    python tests/peers/opinfo_table.py                      # every float64 autograd sample
    python tests/peers/opinfo_table.py --ops clamp,pow -v   # some ops, each non-pass sample
    python tests/peers/opinfo_table.py --markdown table.md  # also write the table

It needs torch and expecttest (PyTorch's ``op_db`` imports it). Exit status 1 when a sample
fails.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from opinfo_check import check  # noqa: E402
from opinfo_map import MAP  # noqa: E402

STATUSES = ("pass", "refused", "convention", "fail")


def full_name(info) -> str:
    return info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")


def mapped_ops(only=None):
    """``[(name, OpInfo, Entry)]`` of the mapped OpInfos, in ``MAP``'s order; a name of
    ``MAP`` that ``op_db`` lacks is an error (the map is out of date)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    infos = {full_name(i): i for i in op_db}
    missing = sorted(set(MAP) - set(infos))
    if missing:
        raise LookupError(f"not in this PyTorch's op_db: {missing}")
    return [(n, infos[n], e) for n, e in MAP.items() if only is None or n in only]


def samples(info):
    """The float64 samples that require grad, drawn from a fixed seed, as they come."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield from info.sample_inputs("cpu", torch.float64, requires_grad=True)


def run_op(name, info, entry, pick=None, second_order=True):
    """``(counts, [(index, outcome)...] of the samples that did not pass)``; `pick`: a
    function from the ``(index, sample)`` pairs to those to run (default: all)."""
    chosen = enumerate(samples(info))
    if pick is not None:
        chosen = pick(chosen)
    counts, notes = collections.Counter(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, sample in chosen:
            out = check(info, entry, sample, i, second_order)
            counts[out.status] += 1
            counts.update("checked " + k for k in out.checks)
            if out.status != "pass":
                notes.append((i, out))
    return counts, notes


def table(rows) -> str:
    """Markdown: one row per OpInfo, then the totals (torch errors are not counted)."""
    lines = ["| OpInfo | adc op | samples | " + " | ".join(STATUSES) + " |",
             "|---|---|---|" + "---|" * len(STATUSES)]
    total = collections.Counter()
    for name, entry, counts in rows:
        n = sum(counts[s] for s in STATUSES)
        total.update(counts)
        lines.append(f"| `{name}` | `{entry.adc}` | {n} | "
                     + " | ".join(str(counts[s]) for s in STATUSES) + " |")
    n = sum(total[s] for s in STATUSES)
    lines.append(f"| **total** ({len(rows)} OpInfos, {len({e.adc for _, e, _ in rows})} adc ops)"
                 f" | | {n} | " + " | ".join(str(total[s]) for s in STATUSES) + " |")
    share = total["pass"] / n if n else 0.0
    checked = ", ".join(f"{k} {total['checked ' + k]}" for k in ("value", "gradient", "tangent",
                                                                  "hvp", "results"))
    return "\n".join(lines) + (f"\n\npass: {total['pass']} of {n} samples ({share:.1%}); "
                                f"comparisons made: {checked}\n")


def reasons(notes_by_op) -> str:
    """Markdown: what the refused samples use that adc lacks (a sample may count twice)."""
    count = collections.Counter()
    for name, notes in notes_by_op:
        for _, out in notes:
            for why in {r.split("=")[0] for r in out.reasons}:
                count[(name, why)] += 1
    lines = ["| OpInfo | refused for | samples |", "|---|---|---|"]
    lines += [f"| `{n}` | {why} | {k} |" for (n, why), k in
              sorted(count.items(), key=lambda item: (-item[1], item[0]))]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", help="comma-separated OpInfo names (default: every mapped one)")
    p.add_argument("--markdown", help="also write the table to this file")
    p.add_argument("--no-second-order", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each sample that did not pass, with its program")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    only = set(a.ops.split(",")) if a.ops else None
    rows, refused, fails, t0 = [], [], 0, time.perf_counter()
    for name, info, entry in mapped_ops(only):
        counts, notes = run_op(name, info, entry, second_order=not a.no_second_order)
        rows.append((name, entry, counts))
        refused.append((name, [(i, out) for i, out in notes if out.status == "refused"]))
        fails += counts["fail"]
        for i, out in notes:
            if out.status == "fail" or a.verbose:
                print(f"{name}[{i}] {out.status}: {out.detail}")
                if a.verbose and out.program:
                    print("    " + out.program.strip().replace("\n", "\n    "))
    text = table(rows) + "\n" + reasons(refused)
    print(text + f"({time.perf_counter() - t0:.0f} s)")
    conventions = [(n, e.convention) for n, e, _ in rows if e.convention]
    for n, why in conventions:
        print(f"convention of {n}: {why}")
    if a.markdown:
        with open(a.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
