"""What a schedule stores and recomputes, and what it costs: the stats dict and its text.

Keys of `remat_stats` (also written by ``--stats-json``): ``policy``, ``function``,
``peak_bytes_predicted``, ``peak_bytes_store_all`` (the peak under ``none``),
``stored_bytes_peak`` and ``stored_bytes_peak_store_all`` (the peak of the bytes kept for the
reverse sweep alone: residual stacks and checkpoints), ``forward_flops`` (the primal
function), ``recompute_flops`` (ops marked ``recompute``), ``recompute_fraction``,
``stored_values``, ``recomputed_values``, ``loops``, ``notes``; what is proven about the
whole schedule: ``guarantee`` (``optimal``, ``gap`` or ``heuristic``), ``optimal`` (the
same, as a flag), ``gap`` (a relative bound, or null) and ``guarantee_why``; and from the
straight-line code (``budget``, ``min-memory``, ``mincut``) ``solver`` (``chain-dp``,
``highs-milp``, ``chen``, ``mincut``, or null when nothing ran) and ``straight_line``
(solver, status, optimal, gap, seconds, variables, model peak, segments of the chain DP,
what the MILPs of its segments did: that part alone).
"""
from __future__ import annotations

from typing import Mapping

from ..ir.core import Module, Value
from ..memory.flops import block_flops, function_flops, op_flops
from ..memory.liveness import predict_peak
from ..memory.sizes import format_bytes, value_bytes
from .binomial import Leaf, Plan, advances, checkpoint_steps, slots, tape_length
from .loop_pairs import find_loop_pairs
from .schedule import Schedule


def _name(v: Value) -> str:
    if v.name:
        return v.name
    op = v.defining_op
    return f"{op.name} result" if op is not None else "value"


def _loc(v: Value) -> str:
    op = v.defining_op
    return str(op.loc) if op is not None and op.loc is not None else ""


def remat_stats(reversed_module: Module, sched: Schedule,
                dims: Mapping[str, int] | None = None) -> dict:
    """Stats of `sched` against storing everything (`reversed_module`, the input of remat)."""
    dims = dict(dims or {})
    fn = sched.fn
    base_pairs = find_loop_pairs(reversed_module[fn])
    base_stored = {p.fwd.results[k] for p in base_pairs for k in p.residual}
    stored = {v for r in sched.rewrites for v in r.checkpoints + r.residual_stacks}
    if not sched.rewrites:
        stored = base_stored
    now = predict_peak(sched.module, fn, dims, tracked=stored)
    before = predict_peak(reversed_module, fn, dims, tracked=base_stored)
    primal = reversed_module[fn].attrs.get("adjoint_of")
    fwd = function_flops(reversed_module[primal], dims, reversed_module) if primal else 0
    rec = function_flops(sched.module[fn], dims, sched.module, only_recompute=True)
    stats = {
        "policy": str(sched.policy), "function": fn,
        "peak_bytes_predicted": now.peak_bytes, "peak_bytes_store_all": before.peak_bytes,
        "stored_bytes_peak": now.tracked_peak, "stored_bytes_peak_store_all": before.tracked_peak,
        "forward_flops": fwd, "recompute_flops": rec,
        "recompute_fraction": rec / fwd if fwd else 0.0,
        "stored_values": [], "recomputed_values": [], "loops": [], "notes": list(sched.notes),
    }
    for pair, plan in zip(base_pairs, sched.plans or [None] * len(base_pairs)):
        _explain_loop(stats, pair, plan, dims, reversed_module)
    _explain_straight(stats, sched, dims)
    if not base_pairs and sched.straight is None:
        stats["notes"].append("no loop with a static trip count feeds the reverse sweep; "
                              "straight-line values are stored (budget:SIZE and min-memory "
                              "recompute them)")
    return stats


def _guarantee(sched: Schedule) -> tuple[str, float | None, str]:
    """What is proven about `sched`, under the memory model: ``optimal``, ``gap`` (a
    relative bound) or ``heuristic``, and why."""
    kind, sl = sched.policy.kind, sched.straight
    loops = any(p is not None and not isinstance(p, Leaf) for p in sched.plans)
    if kind == "none":
        return "optimal", 0.0, "stores everything: nothing is recomputed"
    if kind == "sqrt":
        return "heuristic", None, "about √n segments per loop (Chen et al.): no optimality claim"
    if kind == "revolve":
        return "optimal", 0.0, ("binomial checkpointing: the fewest recomputed loop steps "
                                "with these slots (Griewank & Walther)")
    if kind == "mincut":
        if sl is not None and sl.fallback_peak is not None:
            return "heuristic", None, (f"the minimum cut's schedule peaked at "
                                       f"{sl.fallback_peak:,} bytes, above store-all's: "
                                       f"everything is stored instead")
        return "heuristic", None, ("the fewest saved bytes by a minimum cut (AOTAutograd's "
                                   "partitioner), not the least peak or recomputation")
    if loops:
        return "heuristic", None, ("loops first (binomial plans, closed-form costs), then "
                                   "straight-line code: not optimized jointly")
    if sl is None or sl.status == "store-all fits":
        return "optimal", 0.0, "storing everything fits: nothing is recomputed"
    if sl.solver == "chain-dp":
        dp = (f"the chain DP over {sl.segments} segments (optimal for its chain model, its "
              f"peak exact{_segment_milp(sl.segment_milp)})")
        why = {"optimal": f"{dp}; the MILP proved no schedule of the straight-line model "
                          f"cheaper",
               "gap": f"{dp}; the MILP stopped at its deadline with a bound: the relative "
                      f"gap bounds the excess",
               "heuristic": f"{dp}; not proven against the straight-line model (the MILP: "
                            f"{sl.status})"}
        return sl.guarantee, sl.gap, why[sl.guarantee]
    why = {"optimal": f"{sl.solver} proved it optimal for the straight-line model",
           "gap": f"{sl.solver} stopped at its deadline; the relative gap bounds the excess",
           "heuristic": f"the {sl.solver} baseline; the MILP ({sl.status}) found nothing "
                        f"better"}
    return sl.guarantee, sl.gap, why[sl.guarantee]


def _segment_milp(rep: dict | None) -> str:
    """What the segments' MILPs did, for `guarantee_why`."""
    if not rep or not rep["solves"]:
        return ""
    stopped = (f", {rep['stopped']} stopped at their deadline"
               + (f" within a gap of {rep['gap']:.1%}" if rep["gap"] else "")
               if rep["stopped"] else "")
    return (f"; tape options of {rep['segments']} segment structure(s) from their MILP: "
            f"{rep['proven']} of {rep['solves']} solves proven{stopped}")


def _explain_straight(stats: dict, sched: Schedule, dims) -> None:
    sl = sched.straight
    ran = sl is not None and sl.status != "store-all fits"
    guarantee, gap, why = _guarantee(sched)
    stats.update({"solver": sl.solver if ran else None, "guarantee": guarantee,
                  "optimal": guarantee == "optimal", "gap": gap, "guarantee_why": why})
    stats["straight_line"] = None       # the same keys for every policy
    if sl is None:
        return
    stats["straight_line"] = {"solver": sl.solver, "status": sl.status,
                              "optimal": sl.optimal, "gap": sl.gap,
                              "seconds": round(sl.seconds, 3),
                              "variables": sl.variables, "model_peak": sl.model_peak,
                              "segments": sl.segments, "segment_milp": sl.segment_milp}
    if sl.fallback_peak is not None:
        stats["notes"].append(f"the {sl.solver} schedule would peak at {sl.fallback_peak:,} "
                              f"bytes, above storing everything: everything is stored")
    for v in sl.stored:
        if v.defining_op is None:    # a function input: held by the caller anyway
            continue
        stats["stored_values"].append({
            "name": _name(v), "type": str(v.type), "loc": _loc(v), "kind": "value",
            "count": 1, "bytes": value_bytes(v, dims),
            "why": "read by the reverse sweep; kept from the forward pass"})
    for op, clones in sl.recomputed:
        v = op.results[0]
        where = sorted({str(c.loc) for c in clones if c.loc is not None})
        stats["recomputed_values"].append({
            "name": _name(v), "type": str(v.type), "loc": _loc(v), "kind": "value",
            "steps": len(clones), "flops": len(clones) * op_flops(op, dims, sched.module),
            "why": f"freed after its last forward use and recomputed {len(clones)} time(s) in "
                   f"the reverse sweep: holding it {format_bytes(value_bytes(v, dims))} "
                   f"across the peak would not fit"})


def _explain_loop(stats: dict, pair, plan: Plan | None, dims, module: Module) -> None:
    n, body = pair.n, pair.fwd.regions[0]
    nc = pair.fwd.attrs["n_carry"]
    yields = body.ops[-1].operands
    where = str(pair.fwd.loc) if pair.fwd.loc else "loop"
    steps = advances(plan) if plan is not None else 0
    L = tape_length(plan) if plan is not None else n
    step_flops = block_flops(body, dims, module)
    ckpts = checkpoint_steps(plan) if plan is not None else []
    stats["loops"].append({"loc": where, "steps": n, "slots": slots(plan) if plan else n,
                           "tape_steps": L, "checkpoint_steps": ckpts,
                           "recomputed_steps": steps, "step_flops": step_flops})
    held = max(slots(plan) - 1, 1) if ckpts else 0
    for v in body.args[1:1 + nc] if ckpts else ():
        stats["stored_values"].append({
            "name": _name(v), "type": str(v.type), "loc": where, "kind": "checkpoint",
            "count": held, "bytes": value_bytes(v, dims) * held,
            "why": f"the loop state taken at steps {_short(ckpts)}, at most {held} held at "
                   f"once besides the initial state: recomputations start from them"})
    for k in pair.residual:
        v = yields[k]
        one = value_bytes(v, dims)
        stats["stored_values"].append({
            "name": _name(v), "type": str(v.type), "loc": _loc(v) or where, "kind": "residual",
            "count": L, "bytes": one * L,
            "why": (f"read by the reverse loop; recorded {L} step(s) at a time, right before "
                    f"their reverse" if L < n else
                    f"read by the reverse loop; stored for all {n} steps")})
        if steps:
            stats["recomputed_values"].append({
                "name": _name(v), "type": str(v.type), "loc": _loc(v) or where,
                "steps": steps, "flops": 0,
                "why": f"storing it for all {n} steps would take {format_bytes(one * n)}; "
                       f"recomputed from the nearest checkpoint instead"})
    if steps and stats["recomputed_values"]:
        stats["recomputed_values"][-1]["flops"] = steps * step_flops


def _short(xs: list[int]) -> str:
    return ", ".join(map(str, xs)) if len(xs) <= 8 else \
        ", ".join(map(str, xs[:6])) + f", ... ({len(xs)} in all)"


def format_stats(stats: dict) -> str:
    """The readable report printed by ``adc compile --remat``."""
    p, s = stats["peak_bytes_predicted"], stats["peak_bytes_store_all"]
    lines = [f"remat {stats['policy']} on @{stats['function']}",
             f"  predicted peak:     {p:>14,} bytes ({format_bytes(p)})",
             f"  peak under none:    {s:>14,} bytes ({format_bytes(s)})"
             + (f", {p / s:.1%} of it" if s else ""),
             f"  stored for reverse: {stats['stored_bytes_peak']:>14,} bytes at most "
             f"(none: {stats['stored_bytes_peak_store_all']:,})",
             f"  recomputed FLOPs:   {stats['recompute_flops']:>14,} "
             f"({stats['recompute_fraction']:.2f} of a forward pass of "
             f"{stats['forward_flops']:,} FLOPs)"]
    for lp in stats["loops"]:
        lines.append(f"  loop at {lp['loc']}: {lp['steps']} steps, {lp['slots']} checkpoint "
                     f"slot(s), tape of {lp['tape_steps']} step(s), "
                     f"{lp['recomputed_steps']} steps recomputed")
    for v in stats["stored_values"]:
        lines.append(f"    stored     {v['name']}: {v['type']} x{v['count']} "
                     f"({format_bytes(v['bytes'])}) - {v['why']}")
    for v in stats["recomputed_values"]:
        times = f"x{v['steps']}" if v.get("kind") == "value" else f"in {v['steps']} steps"
        lines.append(f"    recomputed {v['name']}: {v['type']} {times} - {v['why']}")
    sl = stats.get("straight_line")
    if stats.get("solver") and sl:
        state = "optimal" if sl["optimal"] else \
            f"gap {sl['gap']:.1%} (deadline)" if sl["gap"] is not None else "heuristic"
        lines.append(f"  straight-line code: {stats['solver']}, {state}")
    gap = f" (gap {stats['gap']:.1%})" if stats["guarantee"] == "gap" else ""
    lines.append(f"  schedule: {stats['guarantee']}{gap} - {stats['guarantee_why']}")
    for note in stats["notes"]:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
