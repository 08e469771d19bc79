"""The chain DP (remat/chain*.py): its vectorized tables against a plain recursion of the
same recurrences on random chains, against the MILP's proven optimum on a small MLP, the decomposition of programs with and without cut
points, schedules with bit-identical gradients and predicted = measured peaks, no more
recomputation than Chen's segments at their peak, the min-cut's fallback to store-all,
and the progress lines of long solves."""
import functools
import random

import numpy as np
import pytest

import test_remat_dag
from test_remat_dag import compiled, measure, same

from adcompiler.diagnostics import AdcError
from adcompiler.memory import predict_peak
from adcompiler.remat.chain import INF, Chain, build_chain
from adcompiler.remat.chain_dp import Tables
from adcompiler.remat.chain_solve import solve_chain
from adcompiler.remat.dag import build_problem
from adcompiler.remat.explain import remat_stats
from adcompiler.remat.milp import _Progress, objective
from adcompiler.remat.saved import chen_saved, clones_for
from adcompiler.remat.schedule import schedule
from adcompiler.remat.straight import _apply, _flops
from adcompiler.remat.tapes import TapeOption


def random_chain(rng: random.Random, K: int) -> Chain:
    out = [rng.choice((100, 200, 300)) for _ in range(K - 1)] + [0]
    abar = [o + rng.choice((0, 100, 200)) for o in out]
    fwn = [max(o, rng.choice((100, 200))) for o in out]
    ch = Chain(stages=[[i] for i in range(K)], cut=[None] * K, a=[0] + out, abar=abar,
               fwn=fwn, fwt=[max(f, b) for f, b in zip(fwn, abar)],
               over=[rng.choice((1000, 1100, 1300)) for _ in range(K)], start=[0] * K)
    ch.uf = [float(rng.randint(1, 9)) for _ in range(K)]
    ch.ut = [float(rng.randint(1, 9)) for _ in range(K)]
    ch.ua = [max(f, t) + rng.randint(0, 3) for f, t in zip(ch.uf, ch.ut)]
    if K > 2 and rng.random() < 0.3:       # a segment that cannot be run forward again
        ch.uf[rng.randrange(K)] = INF
    # tape options: the whole tape, then up to 3 that keep less and recompute more
    for i in range(K):
        opts = [TapeOption((), (), abar[i], abar[i], ch.fwt[i], ch.ua[i], ch.ut[i], 0.0)]
        for _ in range(rng.randint(0, 3)):
            kept = rng.choice((0, 100)) + out[i]
            opts.append(TapeOption((), (), kept, kept + rng.choice((0, 100, 200)),
                                   max(fwn[i], kept), ch.ua[i] + rng.randint(-1, 1),
                                   max(0.0, ch.ut[i] - rng.randint(0, 2)),
                                   float(rng.randint(1, 5))))
        ch.options.append(opts)
    return ch


def reference(tab: Tables, ch: Chain):
    """The recurrences of the module docstring, one state at a time, with every tape
    option of a segment (`tapes`) where the whole tape is kept."""
    a, abar, over, fwn, fwt, K = tab.a, tab.abar, tab.over, tab.fwn, tab.fwt, ch.size
    unit = tab.unit
    near = lambda b: min(tab.Q + 1, max(int(b > 0), (int(b) + unit // 2) // unit))  # noqa
    opts = [[(near(o.abar), near(o.rev), near(o.fwt), o.ua, o.ut, o.extra) for o in row]
            for row in ch.options]

    @functools.lru_cache(maxsize=None)
    def C(s, t, m):
        if m < 0:
            return INF
        if s == t:
            return min((ut + ex for ab, rv, fw, ua, ut, ex in opts[s]
                        if m >= max(fw, rv) + over[s]), default=INF)
        best = INF
        for ab, rv, fw, ua, ut, ex in opts[s]:
            if m >= max(rv + over[s], fw + over[t]):
                best = min(best, ua + ex + C(s + 1, t, m - ab))
        for sp in range(s + 1, t + 1):
            if m >= max(fwn[s:sp]) + over[t]:
                best = min(best, sum(ch.uf[s:sp]) + C(sp, t, m - a[sp]) + C(s, sp - 1, m))
        return best

    @functools.lru_cache(maxsize=None)
    def D(s, m):
        if m < 0:
            return INF
        if s == K:
            return 0.0
        best = min((ex + D(s + 1, m - ab) for ab, rv, fw, ua, ut, ex in opts[s]
                    if m >= rv + over[s]), default=INF)
        for sp in range(s + 1, K + 1):
            best = min(best, D(sp, m - a[sp]) + C(s, sp - 1, m))
        for sp in range(s + 1, K):       # s..sp-1 again, right before the reverse of sp
            need = max(max(sum(abar[s:j + 1]) + over[j] for j in range(s, sp + 1)),
                       max(fwt[s:sp]) + over[sp])
            if m >= need:
                best = min(best, sum(ch.ua[s:sp]) + D(sp + 1, m - abar[sp]))
        return best
    return C, D


@pytest.mark.parametrize("seed", range(12))
def test_tables_match_the_plain_recursion(seed):
    rng = random.Random(seed)
    ch = random_chain(rng, rng.randint(1, 7))
    tab = Tables(ch, 2600, units=30)
    C, D = reference(tab, ch)
    for m in range(tab.Q + 1):
        assert tab.D[0, m] == D(0, m)
        for s in range(ch.size):
            for t in range(s, ch.size):
                assert tab.C[s, t, m] == C(s, t, m)
    assert np.isfinite(tab.D[0]).any() == (tab.least() is not None)


def residual_blocks(n, rows=20, width=4):
    """h <- h + tanh(h @ W_k): cut points between blocks, a DAG inside each."""
    args = ", ".join(f"param W{k}: f64[{width}, {width}]" for k in range(n))
    body = "".join(f"    h{k + 1} = h{k} + tanh(h{k} @ W{k})\n" for k in range(n))
    return (f"def f(x: f64[{rows}, {width}], {args}) -> f64 {{\n    h0 = x\n{body}"
            f"    return sum(h{n} * h{n})\n}}\n")


def two_branches(n, rows=20, width=4):
    """Two chains side by side from x, joined at the loss: no single live value between."""
    args = ", ".join(f"param A{k}: f64[{width}, {width}], param B{k}: f64[{width}, {width}]"
                     for k in range(n))
    body = "".join(f"    u{k + 1} = tanh(u{k} @ A{k})\n    v{k + 1} = sin(v{k} @ B{k})\n"
                   for k in range(n))
    return (f"def f(x: f64[{rows}, {width}], {args}) -> f64 {{\n    u0 = x\n    v0 = x\n"
            f"{body}    return sum(u{n} * v{n})\n}}\n")


def test_decomposition_of_a_chain(tmp_path):
    m, _ = compiled(tmp_path, test_remat_dag.chain(6))
    prob = build_problem(m, "f_grad", {})
    ch = build_chain(prob, m, {})
    assert ch.size == 7                                  # six layers and the loss
    assert [c.name for c in ch.cut[:6]] == [f"h{k}" for k in range(1, 7)] and ch.cut[6] is None
    assert ch.a == [0] + [640] * 6 + [0]                 # f64[20, 4]
    assert all(len(ch.need_c[i]) == 2 for i in range(6))   # matmul, tanh
    assert ch.start == sorted(ch.start, reverse=True)    # reverses run last segment first
    assert ch.uf[0] == (2 * 20 * 4 * 4 + 1) + (4 * 20 * 4 + 1)   # matmul, tanh (4 a value)


def test_decomposition_of_blocks_that_are_not_chains(tmp_path):
    m, inputs = compiled(tmp_path, residual_blocks(5))
    prob = build_problem(m, "f_grad", {})
    ch = build_chain(prob, m, {}, merge=False)
    # x is an input, so the first block is cut after its tanh too: 2 + 4 blocks + loss
    assert ch is not None and ch.size == 7
    assert [len(ops) for ops in ch.stages[2:6]] == [3] * 4    # matmul, tanh, add
    # merged: the one-op segment (the first add) joins the next, its output droppable
    assert [len(ops) for ops in ch.stages[:3]] == [2, 1, 3]
    merged = build_chain(prob, m, {})
    assert merged.stages == ch.stages[:1] + [ch.stages[1] + ch.stages[2]] + ch.stages[3:]
    ref, none_peak = measure(m, inputs)
    for policy in ("min-memory", f"budget:{none_peak * 3 // 4}"):
        sched = schedule(m, policy)
        outs, peak = measure(sched.module, inputs)
        assert same(outs, ref)
        stats = remat_stats(m, sched)
        assert peak == stats["peak_bytes_predicted"] < none_peak


def test_no_cut_points_leaves_it_to_the_milp(tmp_path):
    m, inputs = compiled(tmp_path, two_branches(3))
    prob = build_problem(m, "f_grad", {})
    ch = build_chain(prob, m, {})      # only the first layer is cut off: u1 alone is live
    assert ch.size == 2 and [len(ops) for ops in ch.stages] == [2, prob.boundary - 2]
    ref, none_peak = measure(m, inputs)
    sched = schedule(m, "min-memory", time_limit=60)
    stats = remat_stats(m, sched)
    assert stats["straight_line"]["status"] == "optimal"      # the MILP ran and proved it
    outs, peak = measure(sched.module, inputs)
    assert same(outs, ref) and peak == stats["peak_bytes_predicted"] < none_peak


def chain_plan(m, budget):
    prob = build_problem(m, "f_grad", {})
    ch = build_chain(prob, m, {})
    base = predict_peak(m, "f_grad", {}).peak_bytes
    got = solve_chain(ch, budget, base, lambda cl: _apply(m, "f_grad", cl, {})[3])
    return prob, got


@pytest.mark.parametrize("layers", [8, 16])
def test_dp_recomputes_no_more_than_chen_at_its_peak(tmp_path, layers):
    m, inputs = compiled(tmp_path, test_remat_dag.chain(layers))
    ref, _ = measure(m, inputs)
    prob = build_problem(m, "f_grad", {})
    chen = clones_for(prob, chen_saved(prob))
    chen_peak = _apply(m, "f_grad", chen, {})[3]
    prob, (plan, peak) = chain_plan(m, chen_peak)
    assert peak <= chen_peak
    assert _flops(prob, plan.clones) <= _flops(prob, chen)
    assert plan.flops == objective(prob, plan.clones)    # the clones are what the DP costed
    out = _apply(m, "f_grad", plan.clones, {})[0]
    outs, measured = measure(out, inputs)
    assert same(outs, ref) and measured == peak


def test_dp_sweep_holds_budgets_and_never_claims_a_proof_it_lacks(tmp_path, monkeypatch):
    from adcompiler.remat import straight
    monkeypatch.setattr(straight, "MILP_WHOLE", 0)      # the DP alone
    m, inputs = compiled(tmp_path, test_remat_dag.chain(12))
    ref, none_peak = measure(m, inputs)
    lo = schedule(m, "min-memory")
    floor = remat_stats(m, lo)["peak_bytes_predicted"]
    last = None
    for k in range(5):
        budget = floor + (none_peak - floor) * k // 4
        sched = schedule(m, f"budget:{budget}")
        stats = remat_stats(m, sched)
        outs, peak = measure(sched.module, inputs)
        assert same(outs, ref) and peak == stats["peak_bytes_predicted"] <= budget
        if stats["solver"] == "chain-dp":
            assert stats["guarantee"] == "heuristic" and stats["gap"] is None
            assert stats["straight_line"]["status"] == "not run"
            assert stats["straight_line"]["segments"] == 13
        assert last is None or stats["recompute_flops"] <= last
        last = stats["recompute_flops"]
    # below min-memory's peak: the error names that peak, the DP's least, not a baseline's
    with pytest.raises(AdcError, match=rf"smallest feasible peak found .* \({floor} bytes\)"):
        schedule(m, f"budget:{floor - 1}")


def test_dp_finds_the_milp_optimum_of_a_small_mlp(tmp_path):
    # tanh(h @ W + b), 8 layers, weights as large as activations: at this budget the MILP
    # proves 3 layers recomputed once the optimum (28,416 FLOPs): the first three, right
    # before the reverse of the fourth, and none of them held across the peak
    width = 16
    args = ", ".join(f"param W{k}: f32[{width}, {width}], param b{k}: f32[{width}]"
                     for k in range(8))
    body = "".join(f"    h{k + 1} = tanh(h{k} @ W{k} + b{k})\n" for k in range(8))
    text = (f"def f(x: f32[16, {width}], {args}) -> f32 {{\n    h0 = x\n{body}"
            f"    return mean(h8 * h8)\n}}\n")
    m, inputs = compiled(tmp_path, text)
    ref, none_peak = measure(m, inputs)
    assert none_peak == 18504
    prob, (plan, peak) = chain_plan(m, 15720)
    layer = 2 * 16 * 16 * 16 + 16 * 16 + 4 * 16 * 16        # matmul, add, tanh
    assert _flops(prob, plan.clones) == 3 * layer == 28416 and peak <= 15720
    outs, measured = measure(_apply(m, "f_grad", plan.clones, {})[0], inputs)
    assert same(outs, ref) and measured == peak


def test_small_chains_against_the_milp(tmp_path):
    # the MILP, given the DP's schedule as a cutoff, either finds a cheaper one or proves
    # there is none; the schedule taken is never dearer than either
    m, inputs = compiled(tmp_path, test_remat_dag.chain(4))
    ref, none_peak = measure(m, inputs)
    floor = remat_stats(m, schedule(m, "min-memory", time_limit=60))["peak_bytes_predicted"]
    for k in range(1, 4):
        budget = floor + (none_peak - floor) * k // 4
        prob, got = chain_plan(m, budget)
        sched = schedule(m, f"budget:{budget}", time_limit=60)
        stats = remat_stats(m, sched)
        assert stats["optimal"] and stats["solver"] in ("chain-dp", "highs-milp")
        if got is not None:
            assert stats["recompute_flops"] <= _flops(prob, got[0].clones)
        outs, peak = measure(sched.module, inputs)
        assert same(outs, ref) and peak == stats["peak_bytes_predicted"] <= budget


def test_mincut_never_worse_than_store_all(tmp_path):
    # tanh(h @ W + b): the cut saves the matmul results and recomputes add and tanh, which
    # peaks above storing everything here
    text = test_remat_dag.chain(3).replace("tanh(h0 @ W0)", "tanh(h0 @ W0 + 1.0)")
    m, inputs = compiled(tmp_path, text)
    ref, none_peak = measure(m, inputs)
    sched = schedule(m, "mincut")
    stats = remat_stats(m, sched)
    outs, peak = measure(sched.module, inputs)
    assert same(outs, ref) and peak == stats["peak_bytes_predicted"] <= none_peak
    if stats["straight_line"]["status"].startswith("store-all"):
        assert stats["recompute_flops"] == 0 and any("above storing" in n
                                                      for n in stats["notes"])


def test_progress_lines_after_a_second(capsys):
    import time
    with _Progress("chain DP (3 segments)", None):
        time.sleep(1.3)
    with _Progress("quick", 2.0):
        pass
    err = capsys.readouterr().err
    assert err.strip() == "remat: chain DP (3 segments): 1 s"


def _train(capsys, tmp_path, *opts):
    import re
    from adcompiler import cli
    code = cli.main([str(a) for a in ("train", tmp_path / "stack.tdsl", "--data",
                                      tmp_path / "d.npz", "--batch", 64, "--steps", 2,
                                      "--save", tmp_path / "out.npz", *opts)])
    err = capsys.readouterr().err
    assert code == 0, err
    peaks = re.search(r"predicted peak ([\d,]+) bytes .* measured peak ([\d,]+) bytes", err)
    with np.load(tmp_path / "out.npz") as z:
        params = {k: z[k] for k in z.files}
    return [int(g.replace(",", "")) for g in peaks.groups()] if peaks else None, params


def test_training_an_unrolled_transformer_under_half_its_peak(tmp_path, capsys):
    bench = test_remat_dag.remat_bench()
    (tmp_path / "stack.tdsl").write_text(bench.transformer(4, t="B", d=4))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((128, 4)).astype("f4"),
             target=rng.standard_normal((128, 4)).astype("f4"))
    (store_all, measured), ref = _train(capsys, tmp_path, "--memory-budget", "1GiB")
    assert measured == store_all
    budget = store_all // 2
    (predicted, measured), params = _train(capsys, tmp_path, "--memory-budget", budget)
    assert measured == predicted <= budget
    assert params.keys() == ref.keys()
    assert all(np.array_equal(params[k], ref[k]) for k in ref)   # the same two updates


def dominator_cuts(prob):
    """The dominators of the loss in the activation graph (networkx), computed apart from
    the liveness sweep of `saved.chain_boundaries`: forward values as nodes, function
    inputs left out (weights and data enter every layer: from them the dominator tree is
    flat), a source feeding the values read straight from inputs and constants, the
    primal results feeding the sink."""
    import networkx as nx
    from adcompiler.remat.saved import forward_values
    B, g = prob.boundary, nx.DiGraph()
    constant = set()
    for v in forward_values(prob):
        if all(u in constant for u in v.defining_op.operands):    # const ops and theirs
            constant.add(v)
            continue
        fwd = [u for u in v.defining_op.operands
               if prob.born.get(u, -1) >= 0 and u not in constant]
        for u in fwd or ["source"]:
            g.add_edge(u, v)
    ret = prob.ops[-1]
    for v in ret.operands[:1]:
        g.add_edge(v, "sink")
    idom = nx.immediate_dominators(g, "source")
    out, v = [], idom["sink"]
    while v != "source":
        out.append(v)
        v = idom[v]
    assert all(prob.born[v] < B for v in out)
    return out[::-1]


@pytest.mark.parametrize("program", ["mlp", "residual", "transformer"])
def test_cut_points_are_the_dominators_of_the_loss(tmp_path, program):
    text = {"mlp": lambda: test_remat_dag.chain(6),
            "residual": lambda: residual_blocks(4),
            "transformer": lambda: test_remat_dag.remat_bench().transformer(
                3, t=8, d=8).replace("def stack(", "def f(")}[program]()
    m, _ = compiled(tmp_path, text)
    prob = build_problem(m, "f_grad", {})
    from adcompiler.remat.saved import chain_boundaries, forward_values
    # the sweep's cut points are the dominators, the loss aside (no forward use after it:
    # never live), and, before the last value computed from the inputs alone (q, k, v of
    # the first attention read x), the program points where the inputs read later are free
    sweep, dom = chain_boundaries(prob), dominator_cuts(prob)[:-1]
    from_inputs = max(prob.born[v] for v in forward_values(prob)
                      if all(prob.born.get(u, -1) < 0 for u in v.defining_op.operands))
    assert [v for v in sweep if prob.born[v] >= from_inputs] == dom
    assert len(sweep) - len(dom) == {"mlp": 0, "residual": 0, "transformer": 4}[program]
