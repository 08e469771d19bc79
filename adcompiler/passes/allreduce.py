"""The ``allreduce`` pass: place the gradient all-reduce of data-parallel training.

In a training step (the ``train-step`` pass) each gradient ``grad_<p>`` becomes final at one
op of the adjoint, and the reverse sweep finishes them last layer first. The pass walks the
gradients (and the loss, for the logged mean) in the order their values are made and packs
them into buckets of about `bucket_mb` MiB of one dtype (PyTorch DDP's default is 25). Each
bucket's ``allreduce_start`` goes right after its last gradient is made, so its
communication overlaps the rest of the backward pass; its ``allreduce_wait`` goes right
before the first op that reads any of its values (the gradient norms, clipping, the
optimizer update), and ``split``/``reshape`` unpack the means that every later op reads.
With ``overlap = false`` each start sits next to its wait, after the backward: the blocking
schedule, for comparison.

Buckets are ordinary values, so liveness, the memory prediction and remat count them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Op, Value, replace_all_uses
from ..ir.types import num_elements, resolve_dim
from .pipeline import ModulePass, register_pass

MIB = 1 << 20
ITEMSIZE = {"f16": 2, "f32": 4, "f64": 8}


@register_pass("allreduce")
@dataclass(frozen=True)
class AllReduce(ModulePass):
    """All-reduce the gradients of the training step `fn` (default: every training step)
    in buckets of `bucket_mb` MiB; `bind` gives sizes to symbolic dims (``B=32``)."""

    fn: str = ""
    bucket_mb: float = 25.0
    overlap: bool = True
    bind: tuple[str, ...] = ()

    def run(self, module: Module) -> Module:
        if not self.bucket_mb > 0:
            raise AdcError(f"allreduce: bucket_mb must be positive, got {self.bucket_mb}")
        steps = [f for f in module.functions.values() if "train_step_of" in f.attrs]
        if self.fn:
            if self.fn not in module or "train_step_of" not in module[self.fn].attrs:
                raise AdcError(f"allreduce: '{self.fn}' is not a training step (the "
                               f"train-step pass makes one)")
            steps = [module[self.fn]]
        env = {k: int(v) for k, v in (item.split("=", 1) for item in self.bind)}
        for f in steps:
            place(f, int(self.bucket_mb * MIB), self.overlap, env)
        return module


@dataclass
class Bucket:
    values: list[Value]
    start_after: int = -1   # index of the top-level op after which it starts
    wait_before: int = 0    # index of the top-level op before which it is waited for


def place(fn: Function, bucket_bytes: int, overlap: bool, env: dict) -> list[Bucket]:
    """Insert the buckets' start and wait ops into `fn` (in place); returns the buckets."""
    from .train_step import gradient_values
    ops = fn.body.ops
    loss = fn.returned[0]
    if loss.name is None:
        loss.name = "loss"
    values = [loss] + [g for g in gradient_values(fn).values() if g is not loss]
    made = {v: i for i, op in enumerate(ops) for v in op.results if v in set(values)}
    for v in values:
        if v not in made:
            raise AdcError(f"allreduce: '{v.name}' is not computed at the top level of "
                           f"'{fn.name}'", fn.loc)
    first_use = _first_uses(ops, set(values))
    buckets = _buckets(sorted(values, key=made.__getitem__), made, first_use, bucket_bytes,
                       env)
    for k, bucket in enumerate(buckets):
        bucket.start_after = max(made[v] for v in bucket.values)
        bucket.wait_before = min(first_use[v] for v in bucket.values)
    _insert(fn, buckets, overlap)
    fn.attrs["allreduce_buckets"] = tuple(tuple(v.name or "?" for v in b.values)
                                          for b in buckets)
    return buckets


def _first_uses(ops: list[Op], wanted: set[Value]) -> dict[Value, int]:
    """The index of the first top-level op that reads each of `wanted` (nested uses count
    at their top-level op)."""
    first: dict[Value, int] = {}
    for i, op in enumerate(ops):
        for inner in op.walk():
            for v in inner.operands:
                if v in wanted and v not in first:
                    first[v] = i
    return first


def _bytes(v: Value, env: dict) -> int | None:
    try:
        n = resolve_dim(num_elements(v.type.shape), env)
    except Exception:   # a symbolic size nothing binds: a bucket of its own
        return None
    return n * ITEMSIZE[v.type.dtype]


def _buckets(values: list[Value], made: dict, first_use: dict, limit: int, env: dict):
    """Greedy packing in the order values are made: a bucket closes when it reaches
    `limit` bytes, when the dtype changes, or when the next value is made only after one
    of the bucket's values is already read."""
    buckets: list[Bucket] = []
    cur: list[Value] = []
    size = 0
    for v in values:
        nb = _bytes(v, env)
        if cur and (nb is None or size >= limit or v.type.dtype != cur[0].type.dtype
                    or made[v] >= min(first_use[u] for u in cur)):
            buckets.append(Bucket(cur))
            cur, size = [], 0
        cur.append(v)
        size += nb if nb is not None else limit
    if cur:
        buckets.append(Bucket(cur))
    return buckets


def _insert(fn: Function, buckets: list[Bucket], overlap: bool) -> None:
    ops = fn.body.ops
    scratch = Block()
    b = Builder(scratch, fn.loc)
    before: dict[int, list[Op]] = {}
    after: dict[int, list[Op]] = {}
    mapping: dict[Value, Value] = {}
    starts: set[Op] = set()
    for k, bucket in enumerate(buckets):
        b.loc = ops[bucket.start_after].loc
        started = b.emit("allreduce_start", *bucket.values, bucket=k)
        started.name = f"bucket{k}"
        starts.add(started.defining_op)
        start_ops = list(scratch.ops)
        scratch.ops.clear()
        b.loc = ops[bucket.wait_before].loc
        reduced = b.emit("allreduce_wait", started, bucket=k)
        reduced.name = f"bucket{k}_mean"
        sizes = [num_elements(v.type.shape) for v in bucket.values]
        parts = b.emit("split", reduced, axis=0, shape=sizes) if len(sizes) > 1 else [reduced]
        for v, part in zip(bucket.values, parts):
            mean = b.emit("reshape", part, shape=v.type.shape)
            if v.name:
                mean.name = f"{v.name}_mean"
            mapping[v] = mean
        wait_ops = list(scratch.ops)
        scratch.ops.clear()
        if overlap:
            after.setdefault(bucket.start_after, []).extend(start_ops)
            before.setdefault(bucket.wait_before, []).extend(wait_ops)
        else:
            before.setdefault(bucket.wait_before, []).extend(start_ops + wait_ops)
    new_ops: list[Op] = []
    for i, op in enumerate(ops):
        new_ops += before.get(i, [])
        new_ops.append(op)
        new_ops += after.get(i, [])
    fn.body.ops = []
    for op in new_ops:
        fn.body.append(op)
    # every reader of a bucket's value, except the bucket's own start, reads the mean
    for op in fn.body.walk():
        if op not in starts:
            op.operands = [mapping.get(v, v) for v in op.operands]
