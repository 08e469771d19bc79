"""Buffer planning: one arena per function, with an offset for each value that a kernel can
write in place (``out=``), so that a step allocates nothing for those values and a second
step reuses the first one's memory.

A value is planned when its op writes it into a caller-given array (the backend's
`in_place_results`: ``matmul``, single-ufunc ops, reductions, constructors, scatters, a
loop's stacked outputs, and on CUDA the ``fused`` kernels) and neither it nor any value
that may share its memory leaves the block: a function's results, and a loop body's
carried values (the next iteration reads them). A loop body's stacked outputs may be
planned: the loop copies them into its stacks before the next iteration, or has the op write
straight into its stack's slot (`stacked_in_place`). A carried value
that the body writes in place gets two buffers instead, written by even and odd
iterations in turn (one holds the argument, the other takes the new value), unless some
carry may be a view of a carried argument; the loop copies its final carries out.

Values may share memory through ops that can return views of their operands (``reshape``,
``transpose``, ``index``, a loop's carried values, ...): every op that does not write a
fresh buffer and is not known to return new arrays (`returns_new`), a plugin's op too, is
taken to alias its operands, so a planned value's memory is held until the last use of
every value derived from it that way.

Offsets come from a linear scan over the lifetimes, as a memory allocator would place
them: values in order of their first op (the larger first among equals), each in the
smallest free block of the arena that holds it, a block freed when its value's lifetime
has ended (a heap by end) and merged with its free neighbours; the arena grows only when
no free block fits. This takes O(n log n) time for n values. Lifetimes are closed
intervals of op indices, so an op's output never shares memory with the operands it reads. A loop body is planned on its
own and its arena placed in the parent block as one buffer live only at the loop op; a
callee gets its own arena. Offsets are aligned to 256 bytes (the CUDA allocator's).
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

from .dims import eval_dim
from .liveness import last_uses

ALIGN = 256


def returns_new(op) -> bool:
    """Whether `op`'s kernel always returns a new array: the IR op says (``op.fresh``, from
    the op's definition in the compiler's registry)."""
    return op.fresh


ITEMSIZE = {"f16": 2, "f32": 4, "f64": 8, "i32": 4, "i64": 8, "bool": 1}


@dataclass
class BufferPlan:
    """Byte offsets of planned values in one arena of `arena_bytes` bytes."""

    arena_bytes: int = 0
    offsets: dict = field(default_factory=dict)   # Value -> offset in the arena
    planned_bytes: int = 0                        # the planned values' sizes, summed
    # a loop's carried value -> its two offsets, written in turn by even and odd iterations
    pairs: dict = field(default_factory=dict)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def value_nbytes(v, dims: Mapping[str, int]) -> int:
    """The bytes of `v` under `dims`; negative when a dimension is (a too-short slice such as
    T-1 with T = 0, which the run rejects with a named error when it reaches it)."""
    t = v.type
    sizes = [eval_dim(d, dims) for d in t.shape]
    return -1 if any(n < 0 for n in sizes) else ITEMSIZE[t.dtype] * math.prod(sizes)


def _pack(items: list[tuple[object, int, int, int]]) -> tuple[dict, int]:
    """Offsets for (key, size, start, end) items, in O(n log n) (see the module doc)."""
    order = sorted(range(len(items)), key=lambda i: (items[i][2], -items[i][1], i))
    ending: list[tuple[int, int, int, int]] = []  # heap of (end, seq, offset, size) in use
    free: list[tuple[int, int]] = []  # sorted (size, offset) of the free blocks below brk
    free_at: dict[int, int] = {}      # offset -> size of each free block
    free_to: dict[int, int] = {}      # end -> offset of each free block
    offsets, brk, top = {}, 0, 0

    def release(offset: int, size: int) -> None:
        nonlocal brk
        right = free_at.get(offset + size)
        if right is not None:  # merge with the free block just above
            free.pop(bisect.bisect_left(free, (right, offset + size)))
            del free_at[offset + size], free_to[offset + size + right]
            size += right
        left = free_to.get(offset)
        if left is not None:  # and with the one just below
            free.pop(bisect.bisect_left(free, (free_at[left], left)))
            del free_to[offset], free_at[left]
            offset, size = left, size + offset - left
        if offset + size == brk:  # the top of the used part shrinks instead
            brk = offset
            return
        free_at[offset], free_to[offset + size] = size, offset
        bisect.insort(free, (size, offset))

    for seq, i in enumerate(order):
        key, size, start, end = items[i]
        while ending and ending[0][0] < start:
            _, _, o, s = heapq.heappop(ending)
            release(o, s)
        need = _align(size)
        k = bisect.bisect_left(free, (need, -1))
        if k < len(free):  # the smallest free block that holds it
            have, offset = free.pop(k)
            del free_at[offset], free_to[offset + have]
            if have > need:
                free_at[offset + need], free_to[offset + have] = have - need, offset + need
                bisect.insort(free, (have - need, offset + need))
        else:
            offset, brk = brk, brk + need
        offsets[key] = offset
        top = max(top, offset + size)
        if need:
            heapq.heappush(ending, (end, seq, offset, need))
    return offsets, _align(top)


def _reads(op) -> set:
    """What `op` reads: its operands and the outer values its regions read."""
    return {v for inner in op.walk() for v in inner.operands}


def _roots(block, in_place: Callable) -> dict:
    """For each value of `block`: the block's arguments and the outer values whose memory it
    may share (empty for memory made inside the block)."""
    roots: dict = {a: {a} for a in block.args}
    for op in block.ops:
        if op.name in ("return", "yield"):
            continue
        for r, srcs in alias_sources(op, in_place).items():
            roots[r] = set().union(*(roots.get(v, {v}) for v in srcs))
    return roots


def alias_sources(op, in_place: Callable) -> dict:
    """For each result of `op`, the values read by `op` whose memory it may share.

    A loop's carried result may share the memory of its initial value, of a scanned input
    (a slice is a view) or of a captured value, through any chain of views in the body and
    across iterations; its stacked outputs are new. A fused group's result may be one of
    its operands through views. Any other op whose definition does not declare it fresh may
    return any operand."""
    written = set(in_place(op))
    if returns_new(op):
        return {r: set() for r in op.results}
    if op.name not in ("for", "fused"):
        reads = _reads(op)
        return {r: (set() if r in written else reads) for r in op.results}
    body = op.regions[0]
    roots = _roots(body, in_place)
    outs = body.ops[-1].operands
    if op.name == "fused":
        outer = dict(zip(body.args, op.operands))
        return {r: {outer.get(v, v) for v in roots.get(y, {y})} for r, y in zip(op.results, outs)}
    nc = op.attrs["n_carry"]
    inits, xs = op.operands[:nc], op.operands[nc:]
    carried = body.args[1:1 + nc]
    scanned = dict(zip(body.args[1 + nc:], xs))
    sources = [set() for _ in range(nc)]
    changed = True
    while changed:  # carry j may hold what carry m held an iteration before
        changed = False
        for j in range(nc):
            new = set()
            for v in roots.get(outs[j], {outs[j]}):
                if v in carried:
                    m = carried.index(v)
                    new |= {inits[m]} | sources[m]
                elif v in scanned:
                    new.add(scanned[v])
                elif v is not body.args[0]:
                    new.add(v)
            if not new <= sources[j]:
                sources[j] |= new
                changed = True
    result = {r: set() for r in op.results[nc:]}
    result.update(zip(op.results[:nc], sources))
    return result


def _sharing(block, in_place: Callable) -> Callable:
    """``closure(v)``: `v` and the values of `block` that may share its memory, through any
    chain of ops that may return views (`alias_sources`)."""
    index = {v for op in block.ops for v in op.results}
    derived: dict = {}  # v -> values defined in the block that may share v's memory directly
    for op in block.ops:
        if op.name in ("return", "yield"):
            continue
        for r, srcs in alias_sources(op, in_place).items():
            for v in srcs:
                if v in index:
                    derived.setdefault(v, set()).add(r)

    def closure(v) -> set:
        seen, todo = {v}, [v]
        while todo:
            for w in derived.get(todo.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen
    return closure


def plan_block(block, dims: Mapping[str, int], in_place: Callable,
               n_leaving: int | None = None) -> BufferPlan:
    """The plan of `block` and of the loop bodies nested in it (see the module doc).

    `in_place(op)` lists the results `op` can write into given arrays; the first
    `n_leaving` operands of the terminator (all when None) must outlive the block."""
    ops = block.ops
    index = {v: k for k, op in enumerate(ops) for v in op.results}
    planned = {op: in_place(op) for op in ops}
    closure = _sharing(block, in_place)
    last = {}
    for k, vs in last_uses(block).items():
        for v in vs:
            last[v] = k
    term = ops[-1] if ops and ops[-1].name in ("return", "yield") else None
    leaving = set(term.operands[:n_leaving]) if term is not None else set()
    carried = _double_buffered(block, n_leaving, planned, in_place) \
        if n_leaving is not None else []

    items, nested = [], {}
    for k, op in enumerate(ops):
        if op.name == "for":
            sub = plan_block(op.regions[0], dims, in_place, op.attrs["n_carry"])
            if sub.arena_bytes:
                nested[op] = sub
                items.append((op, sub.arena_bytes, k, k))
        for v in planned[op]:
            group = closure(v)
            if group & leaving or value_nbytes(v, dims) < 0:
                continue
            end = max(last.get(w, index[w]) for w in group)
            items.append((v, value_nbytes(v, dims), k, end))
    for v in carried:
        if closure(v) & leaving == {v} and value_nbytes(v, dims) >= 0:
            # both slots for the whole body: one holds the iteration's argument (the value
            # the last iteration wrote), the other takes the value this one writes
            for slot in (0, 1):
                items.append(((v, slot), value_nbytes(v, dims), 0, len(ops)))
    offsets, arena = _pack(items)
    plan = BufferPlan(arena, {}, 0)
    for key, off in offsets.items():
        sub = nested.get(key)
        if isinstance(key, tuple):
            plan.pairs.setdefault(key[0], [0, 0])[key[1]] = off
            plan.planned_bytes += value_nbytes(key[0], dims) if key[1] == 0 else 0
        elif sub is None:
            plan.offsets[key] = off
            plan.planned_bytes += value_nbytes(key, dims)
        else:
            plan.offsets.update({v: off + o for v, o in sub.offsets.items()})
            plan.pairs.update({v: [off + a, off + b] for v, (a, b) in sub.pairs.items()})
            plan.planned_bytes += sub.planned_bytes
    return plan


def _double_buffered(body, n_carry: int, planned: dict, in_place: Callable) -> list:
    """The carried values of a loop body that can live in two alternating buffers: each is
    written in place by an op of the body and yielded as one carry only, and no carry may
    share the memory of a carried argument (a view of the last iteration's value handed on
    would be overwritten by the iteration after)."""
    outs = body.ops[-1].operands[:n_carry]
    args = set(body.args[1:1 + n_carry])
    roots = _roots(body, in_place)
    if any(roots.get(v, {v}) & args for v in outs):
        return []
    written = {v for op in body.ops for v in planned[op] if op.name != "for"}
    return [v for v in outs if v in written and outs.count(v) == 1]


def stacked_in_place(body, n_carry: int, in_place: Callable) -> tuple[list, list]:
    """What a loop can write straight into its stacks instead of copying it there after
    each iteration: (1) the positions ``k`` of the stacked outputs that an op of `body`
    writes in place, yielded once, with no carried value that may share their memory (a
    carry must not become a view of a stack, which the parent plans as new memory); (2)
    ``(k, c)`` pairs where stacked output ``k`` is the carried argument of carry ``c``, and
    carry ``c`` is written in place and yielded once: that carry's next value can be
    written into the stack's next slot, which is then already filled when the next
    iteration hands its argument on. Positions count from the first stacked output."""
    outs = body.ops[-1].operands
    carries, stacked = outs[:n_carry], outs[n_carry:]
    written = {v for op in body.ops if op.name != "for" for v in in_place(op)}
    closure = _sharing(body, in_place)
    direct = [k for k, v in enumerate(stacked)
              if v in written and outs.count(v) == 1 and not closure(v) & set(carries)]
    args = body.args[1:1 + n_carry]
    ahead = [(k, args.index(v)) for k, v in enumerate(stacked)
             if v in args and stacked.count(v) == 1
             and carries[args.index(v)] in written and outs.count(carries[args.index(v)]) == 1]
    return direct, ahead


def donations(fn, in_place: Callable, elementwise: Callable) -> list:
    """(result value, input index) pairs: results that a run may write into the array of the
    input they replace (``fn.attrs["in_place"]``: input name -> result index), as a training
    step updates its parameters and optimizer state.

    A result qualifies when a top-level op of the body writes it in place (`in_place`), it
    has the input's type, is returned once, and no use of the input's memory (the input or a
    value that may share it) comes after that op. The op itself may read the input only
    directly and only when its kernel is elementwise (``elementwise(op)``): each element is
    read before the same element of the result is written."""
    spec = fn.attrs.get("in_place") or {}
    block = fn.body
    ops, ret = block.ops, block.ops[-1]
    position = {op: k for k, op in enumerate(ops)}
    roots = _roots(block, in_place)
    last: dict = {}
    for k, op in enumerate(ops):
        for inner in op.walk():
            for v in inner.operands:
                for a in roots.get(v, {v}):
                    last[a] = max(last.get(a, -1), k)
    out = []
    for name, ri in spec.items():
        j = next((i for i, a in enumerate(block.args) if a.name == name), None)
        if j is None or not 0 <= ri < len(ret.operands):
            continue
        a, r = block.args[j], ret.operands[ri]
        op = r.defining_op
        if op is None or op not in position or r not in in_place(op) or r.type != a.type \
                or ret.operands.count(r) != 1:
            continue
        k = position[op]
        readers = [v for inner in op.walk() for v in inner.operands if a in roots.get(v, {v})]
        if last.get(a, -1) > k or (readers and (not elementwise(op)
                                                or any(v is not a for v in readers))):
            continue
        out.append((r, j))
    return out
