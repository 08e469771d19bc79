"""HiGHS on the remat MILPs with the schedule in hand as a cutoff row and without it, through
highspy (HiGHS's own binding, the solver the project uses) and through scipy's `milp` (an
older HiGHS): is highspy worth depending on?

    python benchmarks/remat_warm_start.py

Part 1, the segment MILPs (`adcompiler/remat/segment_milp.py`) of unrolled transformers
(2 and 4 blocks, 16 positions, width 16) and of a segment whose values are read late in its
reverse (`late_reads`): every (segment, caps) solve the schedule makes, each run to its
proof in four ways; the total seconds and the solves proven. Part 2, the whole-program MILP
(`adcompiler/remat/milp.py`) after the chain DP on the small networks of
``remat_scale.py --only exact``: seconds to the proof (or to a deadline of ``--seconds``)
with the DP's objective as a cutoff row (through scipy and highspy) and without it.

HiGHS's first solution (`Highs.setSolution`) in place of the cutoff was measured by this
benchmark as of the commit that added it (git log -- benchmarks/remat_warm_start.py): no
faster, and the columns read back after an improving run were the start's.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from remat_scale import compiled, late_reads, mlp, transformer  # noqa: E402

from adcompiler.memory import predict_peak  # noqa: E402
from adcompiler.remat import highs, milp  # noqa: E402
from adcompiler.remat.highs import triplets  # noqa: E402
from adcompiler.remat.chain import build_chain  # noqa: E402
from adcompiler.remat.chain_solve import solve_chains  # noqa: E402
from adcompiler.remat.dag import build_problem  # noqa: E402
from adcompiler.remat.segment_milp import SegmentModel  # noqa: E402
from adcompiler.remat.straight import _apply  # noqa: E402

def _scipy(cost, rows, cols, vals, lo, hi, n, seconds):
    from scipy.optimize import Bounds, LinearConstraint, milp as sp_milp
    from scipy.sparse import coo_matrix
    A = coo_matrix((vals, (rows, cols)), shape=(len(lo), n)).tocsr()
    t = time.perf_counter()
    res = sp_milp(cost, integrality=np.ones(n), bounds=Bounds(np.zeros(n), np.ones(n)),
                  constraints=[LinearConstraint(A, lo, hi)],
                  options={"time_limit": seconds, "disp": False})
    return time.perf_counter() - t, res.status == 0 or res.status == 2


def _triplets(model: SegmentModel, abar, rev, cutoff):
    flops = {c: model.cst[c] for key, c in model.col.items() if key[0] == "R"}
    return triplets(model.rows + [(model.kept_row, -np.inf, abar - model.const)]
                    + ([(flops, -np.inf, cutoff)] if cutoff is not None else [])
                    + [(r, -np.inf, rev - model.const) for r in model.memory if r])


def segments(seconds: float) -> None:
    print("## Segment MILPs: every solve to its proof\n")
    print("| program | solves | highspy, cutoff row | highspy, none | scipy, cutoff row "
          "| scipy, none | proven (of each) |")
    print("|---|---|---|---|---|---|---|")
    for name, text in (("transformer 2", transformer(2)), ("transformer 4", transformer(4)),
                       ("late reads", late_reads())):
        module, fn, _ = compiled(text)
        prob = build_problem(module, fn, {})
        ch = build_chain(prob, module, {}, segment_milp=False)
        seen, jobs = set(), []
        for i, opts in enumerate(ch.options):
            key = tuple(o.quantities for o in opts)
            if key in seen or len(opts) < 2:
                continue
            seen.add(key)
            cost = {k: 0.0 for k in ch.stages[i]}
            from adcompiler.memory.flops import op_flops
            for k in ch.stages[i]:
                op = prob.ops[k]
                cost[k] = float(prob.cost.get(op.result, op_flops(op, {}, module)) + 1)
            model = SegmentModel(prob, ch.stages[i], ch.cut[i],
                                 {r for k in ch.stages[i] for r in prob.ops[k].results}
                                 & set(prob.reverse_uses),
                                 ch.start[i], cost)
            for o in opts:
                jobs.append((model, o.abar, o.rev, o.extra))
                lower = model.const + (o.rev - model.const) // 2
                if o.abar <= lower < o.rev:
                    jobs.append((model, o.abar, lower, None))
        tot = {k: 0.0 for k in ("hs", "hn", "sc", "sn")}
        ok = {k: 0 for k in tot}
        for model, abar, rev, inc in jobs:
            n = len(model.lb)
            for key, cut in (("hs", inc), ("hn", None)):
                h = highs.build(model.cst, *_triplets(model, abar, rev, cut), model.lb,
                                np.ones(n), np.ones(n))
                r = highs.run(h, seconds)
                tot[key] += r.seconds
                ok[key] += r.status in ("optimal", "infeasible")
            for key, cut in (("sc", inc), ("sn", None)):
                t, proven = _scipy(model.cst, *_triplets(model, abar, rev, cut), n, seconds)
                tot[key] += t
                ok[key] += proven
        print(f"| {name} | {len(jobs)} | {tot['hs']:.3f} s | {tot['hn']:.3f} s "
              f"| {tot['sc']:.3f} s | {tot['sn']:.3f} s "
              f"| {ok['hs']}, {ok['hn']}, {ok['sc']}, {ok['sn']} |", flush=True)


def whole(seconds: float) -> None:
    print("\n## The whole-program MILP after the chain DP (its objective as a cutoff)\n")
    print("| model | budget (of store-all) | variables | scipy, cutoff | highspy, cutoff "
          "| highspy, none |")
    print("|---|---|---|---|---|---|")
    for name, text in (("MLP 8", mlp(8, width=16, batch=16)),
                       ("MLP 16", mlp(16, width=16, batch=16)),
                       ("transformer 2", transformer(2, t=8, d=8)),
                       ("transformer 4", transformer(4, t=8, d=8))):
        module, fn, _ = compiled(text)
        prob = build_problem(module, fn, {})
        hi = predict_peak(module, fn, {}).peak_bytes
        for frac in (0.85, 0.92):
            b = int(hi * frac)

            def exact(clones):
                return _apply(module, fn, clones, {})[3]
            got = solve_chains(prob, module, {}, b, hi, exact)[1]
            if got is None:
                continue
            cutoff = milp.objective(prob, got[0].clones)
            model = milp._Model(prob)
            cells = []
            for engine, cut in (("scipy", cutoff), ("highspy", cutoff)):
                sol = _whole(model, b, seconds, cut, engine)
                cells.append(f"{sol[0]:.2f} s {sol[1]}")
            sol = _whole(model, b, seconds, None, "highspy")
            cells.append(f"{sol[0]:.2f} s {sol[1]}")
            print(f"| {name} | {b:,} ({frac:.0%}) | {len(model.lb):,} | " + " | ".join(cells)
                  + " |", flush=True)


def _whole(model, budget, seconds, cutoff, engine):
    allrows = list(model.rows)
    if cutoff is not None:
        allrows.append(({c: x for c, x in enumerate(model.cost) if x}, -np.inf, cutoff - 0.5))
    allrows += [(row, -np.inf, float(budget - model.prob.fixed[t]))
                for t, row in enumerate(model.memory)]
    rows, cols, vals, lo, hi = triplets(allrows)
    n = len(model.lb)
    if engine == "scipy":
        from scipy.optimize import Bounds, LinearConstraint, milp as sp_milp
        from scipy.sparse import coo_matrix
        A = coo_matrix((vals, (rows, cols)), shape=(len(lo), n)).tocsr()
        t = time.perf_counter()
        res = sp_milp(np.array(model.cost), integrality=np.ones(n),
                      bounds=Bounds(np.array(model.lb), np.ones(n)),
                      constraints=[LinearConstraint(A, lo, hi)],
                      options={"time_limit": seconds, "disp": False})
        status = {0: "optimal", 1: "time limit", 2: "infeasible"}.get(res.status, "other")
        return time.perf_counter() - t, status
    r = highs.solve(model.cost, rows, cols, vals, lo, hi, model.lb, np.ones(n), np.ones(n),
                    seconds)
    return r.seconds, r.status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="deadline per solve")
    ap.add_argument("--only", choices=("segments", "whole"))
    args = ap.parse_args()
    if args.only in (None, "segments"):
        segments(args.seconds)
    if args.only in (None, "whole"):
        whole(args.seconds)


if __name__ == "__main__":
    main()
