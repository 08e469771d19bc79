"""The ``batch`` pass: a function over one example becomes a function over a batch of them.

``batch{fn=f inputs=x,y axis=0 size=N}`` adds ``<f>_batched``: the inputs named in `inputs`
(default: every input) gain a batch axis of size `size` (a symbolic dimension, default a
fresh name) at position `axis`; the others are shared by every example. Every result comes
back with the examples on axis 0. It is `jax.vmap` done once, on the IR:

* a value is *batched* (its examples on a leading axis) or *shared*; an op none of whose
  operands is batched is copied as it is, so shared work is done once;
* any other op is rewritten by the batching rule declared with it (``batch=`` in
  `adcompiler.ops.registry`): elementwise ops broadcast, matmul gains batch axes,
  reductions shift their axes, and so on (`adcompiler.ops.batching`);
* a structural op is rewritten by its own ``batch`` rule (`adcompiler.ops.structural`): a
  ``for`` loop batches its carries (a carry becomes batched when its update is, found by
  iterating to a fixed point), scans batched inputs with the examples moved behind the
  iteration axis, and returns batched stacked outputs with the examples in front again;
* calls are inlined first (a function with a custom derivative rule included).

The batched function is an ordinary function: it can be differentiated (per-example
gradients are ``batch`` applied to ``f_grad``), scheduled, emitted and run.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Op, Value
from ..ir.types import TensorType, dim_symbols
from ..ops import registry
from .clone import clone_module
from .inline import Inline
from .pipeline import ModulePass, register_pass


def _symbols(fn: Function) -> set[str]:
    seen: set[str] = set()
    types = [a.type for a in fn.args] + [r.type for op in fn.walk() for r in op.results]
    for t in types:
        for d in t.shape:
            seen.update(dim_symbols(d))
    return seen


class Batcher:
    """Rewrites the ops of one function, keeping for each original value its new value and
    whether it is batched."""

    def __init__(self, n):
        self.n = n
        self.env: dict[Value, tuple[Value, bool]] = {}

    def materialize(self, b: Builder, v: Value) -> Value:
        return b.emit("broadcast_to", v, shape=(self.n,) + tuple(v.type.shape))

    def block(self, b: Builder, block: Block) -> None:
        """Rewrite every op of `block` but its terminator into `b`'s block."""
        for op in block.ops[:-1]:
            with b.at(op.loc):
                structural = registry.STRUCTURAL.get(op.name)
                if structural is not None and structural.batch is not None:
                    structural.batch(self, b, op)
                else:
                    self.op(b, op)

    def op(self, b: Builder, op: Op) -> None:
        if op.regions or registry.has_trait(op, "calls"):
            raise AdcError(f"batch: cannot batch '{op.name}' (calls are inlined first)",
                           op.loc)
        args = [self.env[v] for v in op.operands]
        values, flags = [a for a, _ in args], [f for _, f in args]
        if not any(flags):
            new = b.create(op.name, values, dict(op.attrs),
                           names=[r.name for r in op.results])
            results, batched = list(new.results), False
        else:
            rule = registry.get(op.name).batch
            if rule is None:
                raise AdcError(f"batch: op '{op.name}' has no batching rule", op.loc)
            results, batched = list(rule(b, op, values, flags, self.n)), True
            for old, new_v in zip(op.results, results):
                want = (self.n,) + tuple(old.type.shape)
                if tuple(new_v.type.shape) != want or new_v.type.dtype != old.type.dtype:
                    raise AssertionError(f"batching rule of {op.name} gave {new_v.type}, "
                                         f"expected {old.type.dtype}{list(want)}")
                if new_v.name is None:
                    new_v.name = old.name
        for old, new_v in zip(op.results, results):
            self.env[old] = (new_v, batched)

    def batched_type(self, t: TensorType) -> TensorType:
        return t.with_shape((self.n,) + tuple(t.shape))

    def iteration_first(self, b: Builder, v: Value) -> Value:
        """A batched scanned input [batch, n_iter, ...] as [n_iter, batch, ...]."""
        return b.emit("transpose", v, perm=[1, 0] + list(range(2, v.type.rank)))


def batch_function(fn: Function, inputs: list[str], axis: int, n, name: str) -> Function:
    """`fn` (calls already inlined) over a batch of `n` examples of `inputs`."""
    for x in inputs:
        if x not in fn.arg_names:
            raise AdcError(f"batch: '{x}' is not an input of '{fn.name}' "
                           f"(inputs: {', '.join(fn.arg_names)})", fn.loc)
    types = []
    for a in fn.args:
        t = a.type
        if a.name in inputs:
            if not -t.rank - 1 <= axis <= t.rank:
                raise AdcError(f"batch: axis {axis} is out of range for input '{a.name}' "
                               f"of type {t}", fn.loc)
            k = axis % (t.rank + 1)
            t = t.with_shape(tuple(t.shape[:k]) + (n,) + tuple(t.shape[k:]))
        types.append(t)
    body = Block(types, fn.arg_names)
    b = Builder(body, fn.loc)
    batcher = Batcher(n)
    for old, new in zip(fn.args, body.args):
        if old.name in inputs:
            k = axis % (old.type.rank + 1)
            if k:
                perm = [k] + [j for j in range(new.type.rank) if j != k]
                new = b.emit("transpose", new, perm=perm)
            batcher.env[old] = (new, True)
        else:
            batcher.env[old] = (new, False)
    batcher.block(b, fn.body)
    results = []
    for v in fn.returned:
        new, f = batcher.env[v]
        results.append(new if f else batcher.materialize(b, new))
    b.ret(results)
    out = Function(name, body, [r.type for r in results], set(fn.params), loc=fn.loc)
    out.attrs = {"batch_of": fn.name, "batched": tuple(inputs), "axis": axis}
    for key in ("adjoint_of", "wrt", "seed", "stacked"):   # what a batched adjoint returns
        if key in fn.attrs:
            out.attrs[key] = fn.attrs[key]
    return out


@register_pass("batch")
@dataclass(frozen=True)
class Batch(ModulePass):
    """Add ``<fn>_batched``, `fn` (default: the main function) over a batch of examples of
    `inputs` (default: all), each with its batch axis at `axis`, of size `size` (default: a
    fresh symbolic dimension, ``N`` unless taken)."""

    fn: str = ""
    inputs: tuple[str, ...] = ()
    axis: int = 0
    size: str = ""

    def __call__(self, module: Module) -> Module:
        fn_name = self.fn or module.main.name
        if fn_name not in module:
            raise AdcError(f"batch: no function '{fn_name}' "
                           f"(functions: {', '.join(module.functions)})")
        m = clone_module(Inline(fn=fn_name, keep_custom=False)(module))
        fn = m[fn_name]
        n = self.size
        if not n:
            taken, n, k = _symbols(fn), "N", 0
            while n in taken:
                k += 1
                n = f"N{k}"
        elif n.isdigit():
            n = int(n)
        inputs = list(self.inputs) or fn.arg_names
        m.add(batch_function(fn, inputs, self.axis, n, f"{fn_name}_batched"))
        return m
