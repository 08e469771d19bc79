"""Fusion of elementwise ops into ``fused`` region ops (one generated kernel each).

    %h, %m = fused(%0, %b1) : f32[B, 8], bool[B, 8] {
    ^(%a: f32[B, 8], %b: f32[8]):
      %1 = add(%a, %b) : f32[B, 8]
      %h = relu(%1) : f32[B, 8]
      %c = const() {value = 0.0, dtype = "f32"} : f32[]
      %m = gt(%1, %c) : bool[B, 8]
      yield(%h, %m)
    }

A ``fused`` op is structural like ``for``: its block arguments receive its operands (the
group's external inputs), its region holds the original ops in their original order, and
its ``yield`` returns the group's values that are used outside it. Running the region op by
op computes exactly what the unfused ops computed; the CUDA emitter turns the region into
one ``cupy.ElementwiseKernel``.

Grouping, per block (function bodies and loop bodies, each on its own), in block order: an
op with a CUDA formula (`OpDef.cuda`) joins the groups of the elementwise ops that produce its
operands when the union stays

* convex: no path leaves the group and comes back into it through an outside op (the group
  becomes one op, so such a path would be a cycle);
* one iteration space: every member whose shape is smaller than the group's broadcast shape
  is used only inside the group (a kernel writes outputs of its full shape; a smaller
  intermediate is recomputed per element, which broadcasting makes exact);
* in place: no member's result is used outside the group before its last member. The fused
  op then runs where its last member ran, and no value is computed earlier than before, so
  fusion never lengthens a live range by hoisting (say) an adjoint op into the forward
  sweep, where its result would be held until the reverse sweep reads it.

A reduction closes a group. A reduction op with ``cuda_reduce`` facts (``sum``, ``mean``,
``max``, ``min`` over ``axis`` with ``keepdims``, and ``sum_to``, the adjoint's
unbroadcast) joins
the group that produces its operand as its last member when

* its operand has rank 1 or more and the group's full broadcast shape (the kernel maps
  every point of the group's iteration space and reduces the mapped values; a smaller
  operand would be one that broadcasting repeats, and reducing it would count it again);
* no elementwise member's result is used outside the group or returned: only the
  reduction's result leaves it (a reduction kernel writes reduced outputs only);
* the group is convex with it (as above) and has no reduction yet.

A closed group takes no further members: an op that reads the reduction's result starts a
group of its own. The region still runs op by op to exactly the unfused result; the CUDA
emitter turns a closed group into one ``cupy.ReductionKernel`` (the elementwise members are
its map, the reduction its reduce step). ``var`` and ``logsumexp`` do not close groups.

Scalar ``const`` operands are copied into the region, so kernels see literals. Groups of
fewer than `min_ops` members (elementwise ops and a closing reduction; consts not counted)
are left alone, as are groups none of whose values is read after them or returned (dead code
in a module that no dce pass ran on: a kernel would have nothing to write). A group stops
growing at `MAX_MEMBERS` ops: a kernel of thousands of ops compiles slowly and gains
nothing, and each merge checks every member, so an unbounded group makes grouping quadratic
in a long chain of ops.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from ..diagnostics import ShapeError
from ..ir.core import Block, Function, Module, Op, Value
from ..ir.types import broadcast_shapes
from ..ops import registry
from ..ops.control import FUSED, YIELD
from ..ops.registry import has_trait
from .clone import clone_op
from .pipeline import FunctionPass, register_pass

MAX_MEMBERS = 256


def fusable(op: Op) -> bool:
    """An op that a generated elementwise kernel can compute: one with a CUDA formula and
    operands (a constant is copied into the group instead)."""
    opdef = registry.REGISTRY.get(op.name)
    return (opdef is not None and opdef.cuda is not None and not op.regions
            and len(op.results) == 1 and bool(op.operands))


def closes(op: Op) -> bool:
    """A reduction that may end a group (its operand produced inside the group): one with
    ``cuda_reduce`` facts."""
    opdef = registry.REGISTRY.get(op.name)
    return (opdef is not None and opdef.cuda_reduce is not None and not op.regions
            and len(op.operands) == 1 and len(op.results) == 1
            and op.operands[0].type.rank > 0)


def _is_const(v: Value) -> bool:
    d = v.defining_op
    return d is not None and not d.operands and registry.lookup(d.name) is not None \
        and registry.lookup(d.name).cuda is not None


class _Group:
    __slots__ = ("members", "mask", "shape", "ext", "closer")

    def __init__(self, k: int, shape, producers: set[int]):
        self.members = [k]          # op indices, ascending
        self.mask = 1 << k
        self.shape = shape          # the broadcast shape of every elementwise member's result
        self.ext = set(producers)   # indices of outside ops that produce members' operands
        self.closer: int | None = None  # the closing reduction, always the last member


class _BlockFuser:
    def __init__(self, block: Block, exclude: frozenset = frozenset()):
        self.block = block
        self.exclude = exclude     # ops left out of every group
        ops = block.ops
        self.index = {op: k for k, op in enumerate(ops)}
        self.def_at: dict[Value, int] = {v: k for k, op in enumerate(ops) for v in op.results}
        # producers (ops of this block) of what each op reads, nested regions included
        self.producers: list[set[int]] = []
        self.users: dict[Value, set[int]] = {}
        for k, op in enumerate(ops):
            prods = set()
            for inner in op.walk():
                for v in inner.operands:
                    self.users.setdefault(v, set()).add(k)
                    j = self.def_at.get(v)
                    if j is not None and j != k:
                        prods.add(j)
            self.producers.append(prods)
        # dep[k]: bitmask of the ops that op k depends on, transitively
        self.dep: list[int] = []
        for k in range(len(ops)):
            m = 0
            for j in self.producers[k]:
                m |= self.dep[j] | (1 << j)
            self.dep.append(m)
        self.group_of: dict[int, _Group] = {}

    # -- grouping ----------------------------------------------------------------------
    def legal(self, members: list[int], mask: int, shape, ext: set[int],
              closer: int | None = None) -> bool:
        if any(self.dep[y] & mask for y in ext):
            return False
        ops, last = self.block.ops, members[-1]
        for m in members:
            if m == closer:
                continue  # the reduction's result is the group's only result
            v = ops[m].result
            outside = [u for u in self.users.get(v, ()) if not (mask >> u) & 1]
            if outside and (closer is not None or v.type.shape != shape
                            or min(outside) < last):
                return False
        return True

    def merge(self, g: _Group, k: int) -> _Group | None:
        """`g` with the op `k` (already in its own group `h`) merged in, if legal."""
        h = self.group_of[k]
        if g.closer is not None or h.closer is not None \
                or len(g.members) + len(h.members) > MAX_MEMBERS:
            return None
        try:
            shape = broadcast_shapes(g.shape, h.shape)
        except ShapeError:
            return None
        members = sorted(g.members + h.members)
        mask = g.mask | h.mask
        ext = {y for y in g.ext | h.ext if not (mask >> y) & 1}
        if not self.legal(members, mask, shape, ext):
            return None
        g.members, g.mask, g.shape, g.ext = members, mask, shape, ext
        for m in members:
            self.group_of[m] = g
        return g

    def close(self, k: int) -> None:
        """Let the reduction `k` close the group that produces its operand, if legal."""
        ops = self.block.ops
        j = self.def_at.get(ops[k].operands[0])
        g = self.group_of.get(j) if j is not None else None
        if g is None or g.closer is not None or ops[j].result.type.shape != g.shape \
                or len(g.members) >= MAX_MEMBERS or not self.users.get(ops[k].result):
            return   # (an unused reduction would leave its kernel with nothing to write)
        members, mask = g.members + [k], g.mask | (1 << k)
        ext = {y for y in g.ext | self.producers[k] if not (mask >> y) & 1}
        if not self.legal(members, mask, g.shape, ext, closer=k):
            return
        g.members, g.mask, g.ext, g.closer = members, mask, ext, k
        self.group_of[k] = g

    def group(self) -> list[_Group]:
        ops = self.block.ops
        for k, op in enumerate(ops):
            if op in self.exclude:
                continue
            if closes(op):
                self.close(k)
                continue
            if not fusable(op):
                continue
            g = _Group(k, op.result.type.shape, self.producers[k])
            self.group_of[k] = g
            if not self.legal(g.members, g.mask, g.shape, g.ext):
                continue  # cannot happen for a single op; kept for clarity
            # join producer groups, largest first (a greedy choice; any legal order is valid)
            cands = {id(self.group_of[j]): self.group_of[j] for j in self.producers[k]
                     if j in self.group_of}
            for other in sorted(cands.values(), key=lambda c: (-len(c.members), c.members[0])):
                if other is self.group_of[k]:
                    continue
                self.merge(other, k)
        seen, out = set(), []
        for k in sorted(self.group_of):
            g = self.group_of[k]
            if id(g) not in seen:
                seen.add(id(g))
                out.append(g)
        return out

    # -- rewriting ---------------------------------------------------------------------
    def outputs(self, g: _Group) -> list[Value]:
        """The members' results read outside the group or returned."""
        return [v for m in g.members for v in self.block.ops[m].results
                if v in self.returned or any(not (g.mask >> u) & 1
                                             for u in self.users.get(v, ()))]

    def build(self, g: _Group) -> tuple[Op, dict[Value, Value]]:
        """The ``fused`` op of `g` and the map from members' results to its results."""
        ops = self.block.ops
        members = [ops[m] for m in g.members]
        inside = {v for op in members for v in op.results}
        inputs: list[Value] = []
        consts: list[Value] = []
        for op in members:
            for v in op.operands:
                if v in inside or v in inputs or v in consts:
                    continue
                (consts if _is_const(v) else inputs).append(v)
        outputs = self.outputs(g)
        body = Block([v.type for v in inputs], [v.name for v in inputs])
        vmap: dict[Value, Value] = dict(zip(inputs, body.args))
        for c in consts:
            body.append(clone_op(c.defining_op, vmap))
        for op in members:
            body.append(clone_op(op, vmap))
        body.append(Op(YIELD, [vmap[v] for v in outputs], [], loc=members[-1].loc))
        fused = Op(FUSED, inputs, [v.type for v in outputs], regions=[body],
                   loc=members[0].loc, result_names=[v.name for v in outputs])
        return fused, dict(zip(outputs, fused.results))

    def run(self, min_ops: int) -> None:
        block = self.block
        term = block.terminator
        self.returned = set(term.operands) if term is not None else set()
        # a group that yields nothing (dead code, without dce) would be a kernel with no
        # output: its ops stay as they are
        groups = [g for g in self.group() if len(g.members) >= min_ops and self.outputs(g)]
        if not groups:
            return
        # units in a new order: each group becomes one op; the rest stay as they are
        grouped = {m: g for g in groups for m in g.members}
        units: list[tuple[int, Op]] = []
        mapping: dict[Value, Value] = {}
        for g in groups:
            fused, vmap = self.build(g)
            mapping.update(vmap)
            units.append((g.members[-1], fused))
        units += [(k, op) for k, op in enumerate(block.ops) if k not in grouped]
        for _, op in units:
            for inner in op.walk():
                inner.operands = [mapping.get(v, v) for v in inner.operands]
        kept = self._drop_dead_consts(units)
        block.ops = []
        for op in _stable_topo(kept):
            block.append(op)

    def _drop_dead_consts(self, units):
        used = {v for _, op in units for inner in op.walk() for v in inner.operands}
        return [(k, op) for k, op in units
                if not (len(op.results) == 1 and op.result not in used and _is_const(op.result))]


def _stable_topo(units: list[tuple[int, Op]]) -> list[Op]:
    """Ops in dependency order, earliest original position first among the ready ones."""
    def_of = {v: n for n, (_, op) in enumerate(units) for v in op.results}
    succs: list[list[int]] = [[] for _ in units]
    indeg = [0] * len(units)
    for n, (_, op) in enumerate(units):
        deps = {def_of[v] for inner in op.walk() for v in inner.operands
                if v in def_of and def_of[v] != n}
        for d in deps:
            succs[d].append(n)
        indeg[n] = len(deps)
    heap = [(units[n][0], n) for n in range(len(units)) if indeg[n] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, n = heapq.heappop(heap)
        order.append(units[n][1])
        for s in succs[n]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (units[s][0], s))
    assert len(order) == len(units), "fusion made a cycle"
    return order


def fuse_block(block: Block, min_ops: int = 2, keep_rows: bool = False,
               consts: dict | None = None) -> None:
    """Fuse the elementwise ops of `block` and, first, of the loop bodies inside it; with
    `keep_rows`, not the ops of row adjoints (see `Fuse`), whose constants are among
    `consts` (``adc_runtime.cuda_row_groups.host_consts`` of the function)."""
    for op in block.ops:
        if not has_trait(op, "group"):
            for r in op.regions:
                fuse_block(r, min_ops, keep_rows, consts)
    exclude: frozenset = frozenset()
    if keep_rows:   # the CUDA runtime's own patterns, which it matches again at run time
        from adc_runtime.cuda_row_groups import host_consts, structural_members
        exclude = frozenset(structural_members(
            block, host_consts(block.ops) if consts is None else consts))
    _BlockFuser(block, exclude).run(min_ops)


@register_pass("fuse")
@dataclass(frozen=True)
class Fuse(FunctionPass):
    """Group chains and DAGs of elementwise ops into ``fused`` ops (see the module doc).
    With `keep_rows`, the ops of the softmax, layernorm and rmsnorm adjoints, which the
    CUDA runtime runs as one row kernel each (``adc_runtime.cuda_row_groups``), stay out of
    groups."""

    min_ops: int = 2
    keep_rows: bool = False

    def run_on_function(self, fn: Function, module: Module) -> None:
        consts = None
        if self.keep_rows:
            from adc_runtime.cuda_row_groups import host_consts
            consts = host_consts(fn.walk())
        fuse_block(fn.body, self.min_ops, self.keep_rows, consts)
