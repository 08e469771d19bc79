"""The MILP inside one chain segment (remat/segment_milp.py): its options are never worse
than the enumerated ones it starts from, each applied alone keeps and recomputes what it
claims with bit-identical gradients, it finds options the enumeration cannot (less held
during the segment's reverse at the same kept bytes), a deadline keeps the warm start and
the stats say what was not proven, and schedules of transformer blocks stay bit-identical
to storing everything with the predicted peak measured."""
import pytest

from test_remat_baselines import consistent
from test_remat_dag import compiled, measure, remat_bench, same

from adcompiler.memory import predict_peak
from adcompiler.remat import milp, segment_milp
from adcompiler.remat.chain import build_chain
from adcompiler.remat.chain_solve import solve_chains
from adcompiler.remat.dag import build_problem
from adcompiler.remat.explain import remat_stats
from adcompiler.remat.schedule import schedule
from adcompiler.remat.straight import _apply, _flops

# the segment q, q @ C, r, r * p: its reverse reads r, then q @ C, then q; the enumeration
# recomputes a dropped value right before its first use and holds it to its last
LATE = remat_bench().late_reads("f64")


@pytest.fixture(autouse=True)
def fresh_cache():
    segment_milp._CACHE.clear()
    yield
    segment_milp._CACHE.clear()


def _segment(prob, ch, i):
    from adcompiler.memory.flops import op_flops
    tape = {r for k in ch.stages[i] for r in prob.ops[k].results} & set(prob.reverse_uses)
    cost = {k: float(prob.cost.get(prob.ops[k].result, op_flops(prob.ops[k], {}, None)) + 1)
            for k in ch.stages[i]}
    return segment_milp.SegmentModel(prob, ch.stages[i], ch.cut[i], tape, ch.start[i], cost)


def _clones(ch, i, o):
    out = {}
    for p, dt in o.again:
        out.setdefault(ch.start[i] + dt, []).append(ch.stages[i][p])
    return out


def test_the_milp_never_does_worse_than_the_enumerated_option(tmp_path):
    m, _ = compiled(tmp_path, LATE)
    prob = build_problem(m, "f_grad", {})
    plain = build_chain(prob, m, {}, segment_milp=False)
    solved = 0
    for i, opts in enumerate(plain.options):
        if len(opts) < 2:
            continue
        model = _segment(prob, plain, i)
        assert model.size == len(model.lb) > 0      # counted before it is built
        for o in opts:
            # within the option's own bytes: never more FLOPs than it (it is a point of
            # the model), with it as the cutoff the same optimum
            res = model.solve(o.abar, o.rev, None, 10.0)
            assert res.status == "optimal"
            got = model.option(res.x)
            assert got.extra <= o.extra and got.abar <= o.abar and got.rev <= o.rev
            cut = model.solve(o.abar, o.rev, o.extra, 10.0)
            assert cut.status == "optimal" and model.option(cut.x).extra == got.extra
            below = model.solve(o.abar, o.rev, got.extra - 1, 10.0)
            assert below.status == "infeasible" and below.x is None
            solved += 1
    assert solved >= 5


def test_a_segment_past_the_size_limit_is_counted_not_built(tmp_path, monkeypatch):
    m, _ = compiled(tmp_path, LATE)
    prob = build_problem(m, "f_grad", {})
    plain = build_chain(prob, m, {}, segment_milp=False)
    i = next(i for i, opts in enumerate(plain.options) if len(opts) >= 2)
    size = _segment(prob, plain, i).size
    monkeypatch.setattr(segment_milp, "MAX_VARIABLES", size - 1)
    big = _segment(prob, plain, i)
    assert big.size == size and big.lb == [] and big.rows == []
    opts, rep = segment_milp.refine(prob, big.ops, big.cut, big.tape, big.start, big.cost,
                                    plain.options[i])
    assert opts == plain.options[i] and rep.segments == 0 and rep.solves == 0


def test_the_milp_holds_less_in_the_reverse_and_the_dp_fits_lower(tmp_path):
    m, inputs = compiled(tmp_path, LATE)
    ref, none_peak = measure(m, inputs)
    prob = build_problem(m, "f_grad", {})
    plain = build_chain(prob, m, {}, segment_milp=False)
    rich = build_chain(prob, m, {})
    assert rich.milp.solves > 0 and rich.milp.stopped == 0 and rich.milp.improved >= 1
    i = next(i for i, st in enumerate(rich.stages) if len(st) == 5)      # q, r, r * p
    new = [o for o in rich.options[i] if o.quantities not in
           {p.quantities for p in plain.options[i]}]
    assert new
    for o in new:
        # not beaten by any enumerated option: less held in the reverse, or fewer FLOPs
        assert not any(p.abar <= o.abar and p.rev <= o.rev and p.extra <= o.extra
                       for p in plain.options[i])
        clones = _clones(rich, i, o)
        assert milp.objective(prob, clones) == o.extra
        out, _, _, peak, _ = _apply(m, "f_grad", clones, {})
        outs, measured = measure(out, inputs)
        assert same(outs, ref) and measured == peak
    # less held during the reverse than any enumerated option keeping as few bytes
    assert any(o.rev < min(p.rev for p in plain.options[i] if p.abar <= o.abar) for o in new)
    # the DP with these options fits budgets it had no schedule for
    floor = remat_stats(m, schedule(m, "min-memory"))["peak_bytes_predicted"]

    def exact(clones):
        return _apply(m, "f_grad", clones, {})[3]
    gained = 0
    for k in range(1, 8):
        budget = floor + (none_peak - floor) * k // 8
        segment_milp._CACHE.clear()
        old = solve_chains(prob, m, {}, budget, none_peak, exact, segment_milp=False)[1]
        now = solve_chains(prob, m, {}, budget, none_peak, exact)[1]
        if now is not None:
            assert now[1] <= budget
        if old is None and now is not None:
            gained += 1
        elif old is not None:
            assert now is not None
    assert gained >= 1


def test_a_deadline_keeps_the_warm_start_and_says_so(tmp_path, monkeypatch):
    from adcompiler.remat import straight
    monkeypatch.setattr(straight, "MILP_WHOLE", 0)       # the DP alone after its segments
    m, inputs = compiled(tmp_path, LATE)
    ref, none_peak = measure(m, inputs)
    prob = build_problem(m, "f_grad", {})
    plain = build_chain(prob, m, {}, segment_milp=False)
    i = next(i for i, st in enumerate(plain.stages) if len(st) == 5)
    monkeypatch.setattr(segment_milp, "SECONDS", 0.0)     # every solve stopped at once
    ch = build_chain(prob, m, {})
    assert ch.milp.stopped >= 1 and ch.milp.proven + ch.milp.stopped == ch.milp.solves
    for o in plain.options[i]:         # the enumerated options (the incumbents) all stay
        assert any(p.abar <= o.abar and p.rev <= o.rev and p.extra <= o.extra
                   for p in ch.options[i])
    floor = remat_stats(m, schedule(m, "min-memory"))["peak_bytes_predicted"]
    sched = schedule(m, f"budget:{(floor + none_peak) // 2}")
    stats = consistent(remat_stats(m, sched))
    rep = stats["straight_line"]["segment_milp"]
    assert rep["stopped"] >= 1 and rep["solves"] == rep["proven"] + rep["stopped"]
    assert stats["solver"] == "chain-dp" and stats["guarantee"] == "heuristic"
    assert not stats["optimal"] and "stopped at their deadline" in stats["guarantee_why"]
    outs, peak = measure(sched.module, inputs)
    assert same(outs, ref) and peak == stats["peak_bytes_predicted"]


def test_transformer_blocks_stay_bit_identical_at_the_predicted_peak(tmp_path, monkeypatch):
    from adcompiler.remat import straight
    monkeypatch.setattr(straight, "MILP_WHOLE", 0)
    text = remat_bench().transformer(3, t=8, d=8).replace("def stack(", "def f(")
    m, inputs = compiled(tmp_path, text)
    ref, none_peak = measure(m, inputs)
    floor = remat_stats(m, schedule(m, "min-memory"))["peak_bytes_predicted"]
    ran = 0
    for k in range(0, 5):
        budget = floor + (none_peak - floor) * k // 4
        sched = schedule(m, f"budget:{budget}")
        stats = consistent(remat_stats(m, sched))
        outs, peak = measure(sched.module, inputs)
        assert same(outs, ref) and peak == stats["peak_bytes_predicted"] <= budget
        rep = (stats["straight_line"] or {}).get("segment_milp")
        if rep:
            ran += rep["solves"]
            assert rep["proven"] + rep["stopped"] == rep["solves"]
    assert ran > 0
    assert predict_peak(m, "f_grad", {}).peak_bytes == none_peak


def test_a_segment_holding_a_loops_results(tmp_path):
    # the char RNN's loop is one op of several results, in a segment with a tape option
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "samples" / "char_rnn.tdsl").read_text()
    m, inputs = compiled(tmp_path, text.replace("def char_rnn(", "def f(")
                         .replace("i64[B, 32]", "i64[2, 32]"))
    ref, none_peak = measure(m, inputs)
    sched = schedule(m, "min-memory")
    stats = consistent(remat_stats(m, sched))
    outs, peak = measure(sched.module, inputs)
    assert same(outs, ref) and peak == stats["peak_bytes_predicted"] < none_peak
