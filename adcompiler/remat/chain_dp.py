"""The dynamic program over a `chain.Chain` (Beaumont et al.'s heterogeneous-chain
recurrences, vectorized in NumPy over the memory left).

The DP, with ``m`` the bytes left for held values (in units that divide the checkpoints'
sizes when they can, counted from the least ``over``; sizes rounded to units):

* ``C[s, t, m]``: the least FLOPs to run the reverse of segments t..s with ``c_{s-1}`` held;
  a single segment recomputes its tape; otherwise either recompute all of segment s and
  keep its tape (``C[s+1, t, m - abar_s] + ua_s``), or run forward to a later ``c_{s'-1}``,
  keep it, and solve both sides (``uf_s..uf_{s'-1} + C[s', t, m - a_{s'-1}] + C[s, s'-1, m]``);
* ``D[s, m]``: the same in the original forward pass, where running forward is free, and
  one more choice: keep nothing of s..s'-1 and recompute all of it from ``c_{s-1}`` right
  before the reverse of s' (``ua_s..ua_{s'-1} + D[s'+1, m - abar_{s'}]``), so that none of
  it is held while the reverse of the later segments runs (the reverse of s' reads
  ``c_{s'-1}``, which Rotor's chains would keep from the forward pass).

Where the DP keeps segment s's tape (in ``C``, ``D`` and for one segment), it chooses
among the segment's tape options (`tapes`): keep part of the tape (``abar`` of the option
held instead) and recompute the rest during the reverse of s (the option's FLOPs added, its
bytes there counted), so that inside a segment that is not a chain (attention beside a
residual branch) cheap values are recomputed and costly ones kept.

The DP is optimal for its chain model (checkpoints only at the segments' ends, a segment's
tape kept as one of its options).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .chain import INF, Chain
from .tapes import TapeOption

UNITS = 128            # memory resolution of the DP: the budget in this many units
COARSE = 32            # ... when looking for the least peak first


@dataclass
class Plan:
    """What the DP found: its FLOPs (chain model), the clones, the units it worked in."""
    flops: float
    clones: dict[int, list[int]]
    unit: int


class Tables:
    """The DP tables for one budget (in units of `unit` bytes)."""

    def __init__(self, ch: Chain, budget: int, units: int = UNITS):
        K, Q = ch.size, units
        self.ch, self.Q = ch, Q
        # every condition reads m >= bytes + over[.]: count from the least `over` up, in
        # units that divide the sizes of the checkpoints when they allow it
        self.floor = floor = min(ch.over)
        room = max(budget - floor, 1)
        g = 0
        for x in ch.a[1:] + ch.abar:
            g = math.gcd(g, x)
        q = -(-room // Q)
        if g:
            q = g * -(-q // g) if q > g else g // (g // q)
        self.unit = q
        near = lambda b: min(Q + 1, max(int(b > 0), (int(b) + q // 2) // q))              # noqa: E731
        up = lambda b: min(Q + 1, max(0, -(-(int(b) - floor) // q)))     # noqa: E731
        a = [near(x) for x in ch.a]
        abar = [near(x) for x in ch.abar]
        over = [up(x) for x in ch.over]                 # over[s] - floor, rounded up
        fwn = [near(x) for x in ch.fwn]
        fwt = [near(x) for x in ch.fwt]
        self.a, self.abar, self.over, self.fwn, self.fwt = a, abar, over, fwn, fwt
        # tape options (`tapes`): per segment and option, in units; padding never wins
        opts = [ch.options[i] if ch.options else
                [TapeOption((), (), ch.abar[i], ch.abar[i], ch.fwt[i], ch.ua[i], ch.ut[i], 0.0)]
                for i in range(K)]
        O = max(len(o) for o in opts)
        oab = np.full((K, O), Q + 1, dtype=np.int64)
        orv, ofw = oab.copy(), oab.copy()
        oua, out, oex = np.full((K, O), INF), np.full((K, O), INF), np.full((K, O), INF)
        for i, row in enumerate(opts):
            for o, op in enumerate(row):
                oab[i, o], orv[i, o], ofw[i, o] = near(op.abar), near(op.rev), near(op.fwt)
                oua[i, o], out[i, o], oex[i, o] = op.ua, op.ut, op.extra
        self.opts, self.oab = opts, oab
        m = np.arange(Q + 1)
        C = np.full((K, K, Q + 1), INF)      # C[s, t] (0-based, s <= t)
        SH = np.full((K, K, Q + 1), INF)     # SH[t, s'][m] = C[s', t][m - a_{s'}]
        Cc = np.full((K, K, Q + 1), -1, dtype=np.int16)   # -1: keep s's tape; s': split
        uf = np.array(ch.uf)
        cum = np.concatenate([[0.0], np.cumsum(np.where(np.isinf(uf), 0.0, uf))])
        cinf = np.concatenate([[0], np.cumsum(np.isinf(uf))])   # uf_s + .. + uf_{s'-1}:
        # cum[s'] - cum[s], or INF when a segment between cannot be recomputed
        a_, abar_, over_ = np.array(a), np.array(abar), np.array(over)
        fwt_, ua = np.array(fwt), np.array(ch.ua)
        FM = np.zeros((K, K), dtype=np.int64)          # FM[s, e] = max fwn[s..e]
        for s in range(K):
            FM[s, s:] = np.maximum.accumulate(np.array(fwn[s:]))

        def shifted(rows, by):
            """rows[i][m - by[i]] (INF below 0), for a stack of rows."""
            idx = m[None, :] - by[:, None]
            out = np.take_along_axis(rows, np.clip(idx, 0, Q), axis=1)
            out[idx < 0] = INF
            return out
        ks = np.arange(K)
        # one segment: its tape (an option's kept values, then its clones) from c_{s-1}
        need = np.maximum(ofw, orv) + over_[:, None]
        diag = np.where(m[None, None, :] >= need[:, :, None], (out + oex)[:, :, None], INF)
        C[ks, ks] = diag.min(axis=1)
        Cc[ks, ks] = -1 - diag.argmin(axis=1)
        SH[ks, ks] = shifted(C[ks, ks], a_[:K])
        for d in range(1, K):
            s = np.arange(K - d)
            t = s + d
            # keep the tape of s (an option of it): recompute all of s, then t..s+1, then
            # the reverse of s (with the option's clones); -1 - option in Cc
            b = shifted(np.repeat(C[s + 1, t], O, axis=0), oab[s].ravel())
            b = b.reshape(K - d, O, Q + 1) + (oua[s] + oex[s])[:, :, None]
            thr = np.maximum(orv[s] + over_[s][:, None], ofw[s] + over_[t][:, None])
            b[m[None, None, :] < thr[:, :, None]] = INF
            arg = b.argmin(axis=1)
            best = np.take_along_axis(b, arg[:, None, :], axis=1)[:, 0, :]
            keep = (-1 - arg).astype(np.int16)
            # forward to c_{s'-1} and keep it: s' = s + 1 + j, j in 0..d-1
            j = np.arange(d)
            sp = s[:, None] + 1 + j[None, :]
            cand = SH[t[:, None], sp] + C[s[:, None], sp - 1]
            run = np.where(cinf[sp] > cinf[s][:, None], INF, cum[sp] - cum[s][:, None])
            cand += run[:, :, None]
            fw = FM[s[:, None], sp - 1] + over_[t][:, None]
            cand[m[None, None, :] < fw[:, :, None]] = INF
            arg = cand.argmin(axis=1)
            val = np.take_along_axis(cand, arg[:, None, :], axis=1)[:, 0, :]
            better = val < best
            Cc[s, t] = np.where(better, arg + s[:, None] + 1, keep)
            C[s, t] = np.minimum(val, best)
            SH[t, s] = shifted(C[s, t], a_[s])
        # the original forward pass: D[s][m], s..K-1 left, running forward free. Besides
        # Rotor's two choices, a third: store nothing of s..s'-1 and recompute all of it
        # from c_{s-1} right before the reverse of s' (whose tape the forward keeps), so
        # that none of it is held while the later segments' reverse runs (choice K + s')
        D = np.full((K + 1, Q + 1), INF)
        Dc = np.zeros((K + 1, Q + 1), dtype=np.int16)
        DS = np.full((K + 1, Q + 1), INF)      # DS[s'] = D[s' + 1][m - abar_{s'}]
        D[K] = 0.0
        cua = np.concatenate([[0.0], np.cumsum(np.where(np.isinf(ua), 0.0, ua))])
        cuinf = np.concatenate([[0], np.cumsum(np.isinf(ua))])
        for s in range(K - 1, -1, -1):
            DS[s] = shifted(D[s + 1:s + 2], abar_[s:s + 1])[0]      # the whole tape kept
            # keep an option of s's tape: -1 - option
            b = shifted(np.repeat(D[s + 1:s + 2], O, axis=0), oab[s]) + oex[s][:, None]
            b[m[None, :] < (orv[s] + over[s])[:, None]] = INF
            arg = b.argmin(axis=0)
            best = b[arg, m]
            choice = (-1 - arg).astype(np.int16)
            sp = np.arange(s + 1, K + 1)
            cand = shifted(D[sp], a_[sp]) + C[s, sp - 1]
            k = np.argmin(cand, axis=0)
            val = cand[k, m]
            better = val < best
            best = np.where(better, val, best)
            choice = np.where(better, sp[k], choice)
            if s + 1 < K:
                jp = np.arange(s + 1, K)                  # s'
                held = np.cumsum(abar_[s:]) + over_[s:]   # during the reverse of s + j
                thr = np.maximum.accumulate(held)[1:]     # ... for every j up to s'
                thr = np.maximum(thr, np.maximum.accumulate(fwt_[s:K - 1]) + over_[jp])
                again = np.where(cuinf[jp] > cuinf[s], INF, cua[jp] - cua[s])
                jc = DS[jp] + again[:, None]
                jc[m[None, :] < thr[:, None]] = INF
                k = np.argmin(jc, axis=0)
                val = jc[k, m]
                better = val < best
                best = np.where(better, val, best)
                choice = np.where(better, K + jp[k], choice)
            D[s], Dc[s] = best, choice
        self.C, self.Cc, self.D, self.Dc = C, Cc, D, Dc

    def units(self, budget: int) -> int:
        """The units of `budget` (at most Q)."""
        return max(0, min(self.Q, (budget - self.floor) // self.unit))

    def least(self) -> int | None:
        """The fewest units at which the chain has a schedule."""
        ok = np.nonzero(np.isfinite(self.D[0]))[0]
        return int(ok[0]) if len(ok) else None

    def plan(self, m: int) -> Plan | None:
        """The clones of the DP's schedule with `m` units."""
        if not np.isfinite(self.D[0, m]):
            return None
        ch, a, abar = self.ch, self.a, self.abar
        passes: dict[int, set[int]] = {}

        def add(t, ops):
            if t is not None and ops:
                passes.setdefault(t, set()).update(ops)

        def again(i, o):
            """The clones of option `o` during the reverse of segment i."""
            for p, dt in self.opts[i][o].again:
                add(ch.start[i] + dt, [ch.stages[i][p]])

        def ops_of(i, o, field):
            return [ch.stages[i][p] for p in getattr(self.opts[i][o], field)]
        work = [("D", 0, ch.size - 1, m)]
        while work:
            kind, s, t, mm = work.pop()
            if kind == "D":
                if s >= ch.size:
                    continue
                c = int(self.Dc[s, mm])
                if c > ch.size:       # all of s..c'-1 again, right before the reverse of c'
                    c -= ch.size
                    add(ch.start[c], [k for i in range(s, c)
                                      for k in set(ch.need_c[i]) | set(ch.need_t[i])])
                    work.append(("D", c + 1, t, mm - abar[c]))
                    continue
                if c < 0:
                    again(s, -1 - c)
                    work.append(("D", s + 1, t, mm - self.oab[s, -1 - c]))
                else:       # C(s, c-1) runs after D(c): pushed first
                    work.append(("C", s, c - 1, mm))
                    work.append(("D", c, t, mm - a[c]))
                continue
            c = int(self.Cc[s, t, mm])
            if s == t:
                o = -1 - c
                add(ch.start[s], ops_of(s, o, "ut_ops") if o else ch.need_t[s])
                again(s, o)
                continue
            if c < 0:
                o = -1 - c
                add(ch.start[t], ops_of(s, o, "ua_ops") if o else
                    set(ch.need_c[s]) | set(ch.need_t[s]))
                again(s, o)
                work.append(("C", s + 1, t, mm - self.oab[s, o]))
            else:
                add(ch.start[t], [k for i in range(s, c) for k in ch.need_c[i]])
                work.append(("C", s, c - 1, mm))
                work.append(("C", c, t, mm - a[c]))
        clones = {t: sorted(ops) for t, ops in passes.items()}
        return Plan(float(self.D[0, m]), clones, self.unit)
