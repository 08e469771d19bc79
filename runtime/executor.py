"""Runs an IR function on an array module (NumPy or CuPy) through the kernel table.

The executor reads IR objects by duck typing (op.name, op.operands, op.attrs, op.regions,
block.args, block.ops), so the runtime does not import the compiler. Each value is dropped
as soon as its last use has run, and the bytes of live values are tracked: `stats` reports
``peak_bytes`` (the high-water mark of live arrays, inputs and outputs included). Every SSA
value counts its full size (views included); a loop's stacked outputs count from the loop's
start; `adcompiler.memory` predicts this figure from the IR alone.
"""
from __future__ import annotations

import operator
import sys
from collections import ChainMap
from typing import Any, Mapping

import numpy

from .dims import eval_dim, symbolic_slice
from .inputs import convert_input, dim_conflict, shape_error
from .errors import RunError, UnboundDimError  # noqa: F401  (raised here, imported from here)
from .buffers import donations, plan_block, stacked_in_place, value_nbytes
from .kernels import BUILTIN, DTYPES, ELEMENTWISE_OUT, KERNELS, OUT_KERNELS, OUT_RULES
from .liveness import borrowed_positions, borrows_args, frames_needed, last_uses
from .random import KEY_INPUT, seed_key

_dtype, _shape = operator.attrgetter("dtype"), operator.attrgetter("shape")
_signature = operator.attrgetter("dtype", "shape")
IR_DTYPES = {v: k for k, v in DTYPES.items()}  # "float32" -> "f32"
SHAPE_ATTRS = ("shape", "n")  # attributes that may hold symbolic dimensions
ANNOTATION_ATTRS = ("recompute",)  # marks for readers of the IR, not kernel options


def resolve_dim(d, dims: Mapping[str, int]) -> int:
    """`eval_dim`: an unbound symbol raises `UnboundDimError`, a `RunError`."""
    return eval_dim(d, dims)


def _is_symbol(d) -> bool:
    return isinstance(d, str) and d.isidentifier()


def check_slices(idx, shape, sizes) -> None:
    """Raise RunError unless each slice of a symbolic axis fits the axis's bound size: the
    compiler gave ``x[1:]`` on T the length T-1 on the premise that T >= 1."""
    for axis, (e, d, n) in enumerate(zip(idx, shape, sizes)):
        if not isinstance(d, str) or not isinstance(e, (list, tuple)) or e[2] not in (None, 1, -1):
            continue
        rule = symbolic_slice(*e)
        if rule is not None and n < rule[2]:
            written = ":".join("" if v is None else str(v) for v in e[:2]) + (
                "" if e[2] is None else f":{e[2]}")
            raise RunError(f"the slice [{written}] of axis {axis} needs {d} >= {rule[2]}, "
                           f"but {d} = {n}")


def bind_dims(fn, arrays: list, dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """Bind the symbolic dimensions of `fn`'s inputs from the arrays' shapes."""
    bound = dict(dims or {})
    where: dict[str, str] = {k: f"dims['{k}']" for k in bound}
    for arg, a in zip(fn.args, arrays):
        want = arg.type.shape
        if len(a.shape) != len(want):   # the wording of `adc run`'s input checks
            raise shape_error(arg.name, str(arg.type), a.shape)
        for d, n in zip(want, a.shape):
            if _is_symbol(d):  # a polynomial dim (T-1) is checked once its symbols are bound
                if d in bound and bound[d] != n:
                    raise dim_conflict(d, bound[d], where[d], n, f"input '{arg.name}'")
                bound[d], where[d] = n, f"input '{arg.name}'"
    for arg, a in zip(fn.args, arrays):
        want = tuple(resolve_dim(d, bound) for d in arg.type.shape)
        if tuple(a.shape) != want:
            raise shape_error(arg.name, str(arg.type), a.shape,
                              None if want == tuple(arg.type.shape) else want)
    return bound


def check_results(op, outs: list, dtypes: list, shapes: list) -> None:
    """A `RunError` at `op`'s line unless a plugin kernel returned one array per result of
    the shape and dtype its type rule declared (a wrong one would flow on unnoticed)."""
    def text(dtype, shape) -> str:
        return f"{IR_DTYPES.get(str(dtype), dtype)}[{', '.join(map(str, shape))}]"

    if len(outs) != len(op.results):
        raise RunError(f"the kernel of plugin op '{op.name}' returned {len(outs)} arrays "
                       f"for its {len(op.results)} results", op.loc)
    for k, (a, dtype, shape) in enumerate(zip(outs, dtypes, shapes)):
        got_dtype, got_shape = getattr(a, "dtype", None), getattr(a, "shape", None)
        if got_dtype == dtype and got_shape is not None and tuple(got_shape) == shape:
            continue
        what = "its result" if len(outs) == 1 else f"result {k}"
        got = (text(got_dtype, got_shape) if got_dtype is not None and got_shape is not None
               else f"a {type(a).__name__}, not an array")
        raise RunError(f"the kernel of plugin op '{op.name}' returned {got} for {what}, "
                       f"but its type rule gives {text(dtype, shape)}", op.loc)


class Executor:
    """Runs functions of `module` on `xp` with the symbolic dimensions bound by `dims`.

    With `plan_buffers`, each function gets one arena (`adc_runtime.buffers`), allocated on
    its first call and reused by later calls of the same executor, and the ops that can
    write in place write their results into it: a step then allocates nothing for them."""

    def __init__(self, module, xp=numpy, dims: Mapping[str, int] | None = None,
                 plan_buffers: bool = True):
        self.module = module
        self.xp = xp
        self.dims = dict(dims or {})
        self.live = 0
        self.peak = 0
        self.plan_buffers = plan_buffers
        self.arena_bytes = 0                 # the bytes of the arenas allocated so far
        self._schedules: dict[int, tuple] = {}  # id(block) -> `_schedule(block)`
        self._arenas: dict[int, Any] = {}    # id(function) -> its arena
        self._views: dict[Any, Any] = {}     # planned value -> its array in an arena
        self._pairs: dict[Any, list] = {}    # carried value -> its two alternating arrays
        self._stacked: dict[Any, tuple] = {}  # loop op -> `_stacked_in_place(op)`
        self._arena_views: dict[Any, Any] = {}  # a value written into stacks -> its own view
        self._prepared: dict[Any, tuple] = {}  # op -> what `run_op` needs (`_prepare`)
        self._donations: dict[int, list] = {}  # id(function) -> `buffers.donations`
        self._donors: dict[int, tuple] = {}   # id(function) -> (picker, arrays last donated)
        self._frames: int | None = None       # Python frames the deepest chain of calls needs

    # -- execution ------------------------------------------------------------------------
    def call(self, fn, arrays: list, borrowed: frozenset = frozenset()) -> list:
        """Run `fn` on `arrays`; `borrowed`: the positions of the arguments its frame does
        not count (a function that borrows its arguments, `liveness`)."""
        if self.plan_buffers and id(fn) not in self._arenas:
            self._allocate_arena(fn)
        self.room_for_calls()
        env: dict = {}
        return self.run_block(fn.body, env, arrays, keep_results=True, borrowed=borrowed)

    def room_for_calls(self) -> None:
        """Chains of calls recurse in the interpreter: raise Python's recursion limit, once,
        to what the module's longest chain needs (`liveness.frames_needed`)."""
        if self._frames is None:
            self._frames = frames_needed(self.module)
            if self._frames > sys.getrecursionlimit():
                sys.setrecursionlimit(self._frames)

    # -- planned buffers ------------------------------------------------------------------
    def in_place_results(self, op) -> list:
        """The results of `op` that it can write into given arrays: the result of an op
        with an in-place kernel, for the operand types its rule allows (`OUT_RULES`: those
        where both forms compute in the same type, with the same bits), and the stacked
        outputs of a loop."""
        if op.name == "for":
            return op.results[op.attrs["n_carry"]:]
        rule = OUT_RULES.get(op.name)
        if rule is None or len(op.results) != 1:
            return []
        result = op.results[0].type.dtype
        dtypes = {v.type.dtype for v in op.operands}
        if rule == "first":
            ok = bool(op.operands) and op.operands[0].type.dtype == result
        elif rule == "any":
            ok = True
        else:
            ok = len(dtypes) == 1 and result in dtypes | {"bool"}
            ok = ok and (rule == "same" or result in ("f32", "f64"))
        return list(op.results) if ok else []

    def donate(self, fn, arrays: list) -> None:
        """Let this call of `fn` write the results that replace inputs into those inputs'
        arrays (`buffers.donations`). An executor that donates once must donate on every
        call: its ops keep the in-place kernels."""
        pairs = self._donations.get(id(fn))
        if pairs is None:
            pairs = self._donations[id(fn)] = donations(
                fn, self.in_place_results, self.writes_elementwise)
            self._donors[id(fn)] = (picker([j for _, j in pairs]), None)
        pick, last = self._donors[id(fn)]
        given = pick(arrays)
        # the arrays of the last call again (a training step's): their views are in place
        if last is not None and len(given) == len(last) and all(map(operator.is_, given, last)):
            return
        for v, j in pairs:
            self._views[v] = arrays[j]
        # kept once the arena is made (its views may not replace the donated ones after)
        self._donors[id(fn)] = (pick, given if id(fn) in self._arenas else None)

    def writes_elementwise(self, op) -> bool:
        """Whether `op`'s in-place kernel reads each element of its operands before it writes
        the same element of its result (so the result may overwrite an operand)."""
        return op.name in ELEMENTWISE_OUT and not op.regions

    def result_buffer(self, v):
        """The array that an op writing in place fills for `v`: its planned buffer, or a
        new one when `v` has none."""
        buf = self._views.get(v)
        if buf is None:
            buf = self.xp.empty(self._resolve(v.type.shape), dtype=DTYPES[v.type.dtype])
        return buf

    def _allocate_arena(self, fn) -> None:
        plan = plan_block(fn.body, self.dims, self.in_place_results)
        arena = self.xp.empty(plan.arena_bytes, dtype="uint8")
        self._arenas[id(fn)] = arena
        self.arena_bytes += plan.arena_bytes
        def view(v, off):
            nbytes = value_nbytes(v, self.dims)
            return arena[off:off + nbytes].view(DTYPES[v.type.dtype]).reshape(
                self._resolve(v.type.shape))

        for v, off in plan.offsets.items():
            self._views[v] = view(v, off)
        for v, offs in plan.pairs.items():
            self._pairs[v] = [view(v, off) for off in offs]
            self._views[v] = self._pairs[v][0]

    def _schedule(self, block, borrowed=frozenset()):
        """`block`'s ops, each with the values that die after it (the `last_uses` rule) and,
        for a call of a function that borrows its arguments, the operands that stay this
        frame's (`liveness.borrowed_positions`; None for other ops); `borrowed` arguments
        are the caller's to free, never this frame's."""
        dead = last_uses(block, borrowed)
        steps = []
        for k, op in enumerate(block.ops):
            keep = None
            if op.name == "call" and borrows_args(self.module.functions[op.attrs["callee"]]):
                keep = borrowed_positions(op, set(dead.get(k, ())))
            steps.append((op, dead.get(k, ()), keep))
        return dead.get(-1, ()), steps

    def run_block(self, block, env, args, keep_results=False, borrowed=frozenset()) -> list:
        key = (id(block), borrowed) if borrowed else id(block)
        sched = self._schedules.get(key)
        if sched is None:
            sched = self._schedules[key] = self._schedule(block, borrowed)
        dead_args, steps = sched
        live = self.live
        for j, (v, a) in enumerate(zip(block.args, args)):
            env[v] = a
            if j not in borrowed:
                live += a.nbytes
        self.peak = max(self.peak, live)
        for v in dead_args:
            live -= env.pop(v).nbytes
        self.live = live
        for op, dead, keep in steps:
            if op.name in ("return", "yield"):
                out = [env[v] for v in op.operands]
                for v in dead:
                    if not keep_results or v not in op.operands:
                        self.live -= env.pop(v).nbytes
                return out
            # a loop or a call counts its own frame
            results = self.run_op(op, env) if keep is None else self.run_call(op, env, keep)
            live = self.live
            for v, r in zip(op.results, results):
                env[v] = r
                live += r.nbytes
            if live > self.peak:
                self.peak = live
            for v in dead:
                live -= env.pop(v).nbytes
            self.live = live
        return []

    def _fix(self, r, v):
        """Make `r` an array of `v`'s declared dtype (NumPy returns scalars and upcasts)."""
        want = DTYPES[v.type.dtype]
        if not hasattr(r, "dtype") or r.dtype != want:
            r = self.xp.asarray(r, dtype=want)
        return r

    def _prepare(self, op) -> tuple:
        """What running `op` needs, worked out once per executor: its kernel (the in-place
        form when its result has a planned buffer), its attributes with the dimensions
        resolved, the planned buffer, and the result dtypes."""
        attrs = {k: (self._resolve(v) if k in SHAPE_ATTRS else v) for k, v in op.attrs.items()
                 if k not in ANNOTATION_ATTRS}
        planned = op.results[0] if op.results and op.results[0] in self._views else None
        kern = OUT_KERNELS[op.name] if planned is not None else KERNELS.get(op.name)
        if kern is None:
            raise RunError(f"no kernel for op '{op.name}'")
        dtypes = [numpy.dtype(DTYPES[v.type.dtype]) for v in op.results]
        shapes = None if op.name in BUILTIN else [self._resolve(v.type.shape)
                                                  for v in op.results]
        return kern, attrs, planned, dtypes, shapes

    def run_op(self, op, env) -> list:
        args = [env[v] for v in op.operands]
        name = op.name
        if name == "for":
            return self.run_for(op, env, args)
        if name == "repeat":
            return self.run_repeat(op, env, args)
        if name == "fused":
            return self.run_fused(op, env, args)
        if name == "call":
            outs = self.call(self.module.functions[op.attrs["callee"]], args)
            # the callee's results stay counted by its frame; the caller counts them again
            self.live -= sum(a.nbytes for a in outs)
            return outs
        prep = self._prepared.get(op)
        if prep is None:
            prep = self._prepared[op] = self._prepare(op)
        kern, attrs, planned, dtypes, shapes = prep
        if name == "index":
            check_slices(op.attrs["idx"], op.operands[0].type.shape, args[0].shape)
        elif name == "index_grad":
            check_slices(op.attrs["idx"], op.attrs["shape"], attrs["shape"])
        try:
            if planned is not None:  # an in-place write (a carried value's buffer alternates)
                out = self._views[planned]
                kern(self.xp, *args, out=out, **attrs)
                return [out]
            r = kern(self.xp, *args, **attrs)
        except (ValueError, IndexError) as e:  # data the op cannot take: an empty max, ...
            raise RunError(f"{name} cannot run on these values: {e}", op.loc) from None
        outs = list(r) if isinstance(r, (tuple, list)) else [r]
        if shapes is not None:
            check_results(op, outs, dtypes, shapes)
        for k, (a, want) in enumerate(zip(outs, dtypes)):
            if getattr(a, "dtype", None) != want:
                outs[k] = self.xp.asarray(a, dtype=want)
        return outs

    def run_call(self, op, env, keep: frozenset) -> list:
        """A call of a function that borrows its arguments: the operands not in `keep` move
        into its frame for the call (this frame counts them again once it returns, until
        its schedule frees them, as for any op)."""
        args = [env[v] for v in op.operands]
        moved = sum(a.nbytes for j, a in enumerate(args) if j not in keep)
        self.live -= moved
        outs = self.call(self.module.functions[op.attrs["callee"]], args, keep)
        self.live += moved - sum(a.nbytes for a in outs)
        return outs

    def _resolve(self, value):
        if isinstance(value, (list, tuple)):
            return tuple(resolve_dim(d, self.dims) for d in value)
        return resolve_dim(value, self.dims)

    def run_fused(self, op, env, args) -> list:
        """A fused group, op by op: the same kernels in the same order as unfused.

        The group is one kernel on a GPU, so its intermediates count as kernel temporaries
        (not SSA values): only its results are accounted, as `adcompiler.memory` predicts.
        A backend with generated kernels overrides this method.
        """
        body = op.regions[0]
        local = ChainMap(dict(zip(body.args, args)), env)  # the region may capture values
        for inner in body.ops:
            if inner.name == "yield":
                return [local[v] for v in inner.operands]
            local.maps[0].update(zip(inner.results, self.run_op(inner, local)))
        return []

    def loop_counter(self, n: int):
        """i -> the ``i64[]`` array a loop body receives as its counter."""
        return lambda i: self.xp.asarray(i, dtype="int64")

    def run_for(self, op, env, args) -> list:
        n, nc = self._resolve(op.attrs["n"]), op.attrs["n_carry"]
        body = op.regions[0]
        carry, xs = args[:nc], args[nc:]
        ny = len(op.results) - nc
        ys = [self.result_buffer(r) for r in op.results[nc:]]
        # the stacked outputs occupy memory from the first iteration on
        ys_bytes = sum(buf.nbytes for buf in ys)
        self.live += ys_bytes
        self.peak = max(self.peak, self.live)
        order = range(n - 1, -1, -1) if op.attrs.get("reverse") else range(n)
        counter = self.loop_counter(n)
        outs = body.ops[-1].operands
        pairs = [(v, self._pairs[v]) for v in outs[:nc] if v in self._pairs]
        direct, ahead = self._stacked_in_place(op, ys)
        slots = [None] * ny  # the slot of each stack that this iteration's value is in
        for t, i in enumerate(order):
            for v, bufs in pairs:  # this iteration writes the buffer its argument is not in
                self._views[v] = bufs[t % 2]
            for k in direct:   # written into its stack's slot (`buffers.stacked_in_place`)
                self._views[outs[nc + k]] = slots[k] = ys[k][i, ...]
            if t + 1 < n:      # the carry written into the slot its stack keeps it in
                for k, c in ahead:
                    self._views[outs[c]] = ys[k][order[t + 1], ...]
            slices = [x[i] for x in xs]
            out = self.run_block(body, env, [counter(i)] + carry + slices)
            carry = [self._fix(c, v) for c, v in zip(out[:nc], op.results[:nc])]
            for k, (buf, y) in enumerate(zip(ys, out[nc:nc + ny])):
                if y is not slots[k]:
                    buf[i] = y
            for k, c in ahead:  # the next iteration's argument, already in its slot
                slots[k] = self._views[outs[c]] if t + 1 < n else None
        for k in direct:
            self._views[outs[nc + k]] = self._arena_views[outs[nc + k]]
        if n <= 0:
            # the buffer plan takes a carried result to be memory the body made (or a view
            # of what it reads), never the initial value itself: a loop that ran no
            # iteration hands back copies, or a planned init's buffer would be reused
            # under a value that is still live
            carry = [self._fix(c, v).copy() for c, v in zip(carry, op.results[:nc])]
        elif pairs:  # the loop's results outlive the body's buffers
            held = {id(b) for _, bufs in pairs for b in bufs}
            carry = [c.copy() if id(c) in held else c for c in carry]
        self.live -= ys_bytes  # counted again as the loop's results
        return carry + ys

    def _stacked_in_place(self, op, ys) -> tuple[list, list]:
        """`buffers.stacked_in_place` of `op`'s body, kept to the values with a planned
        buffer (the carries: two) whose stack slots have their type."""
        found = self._stacked.get(op)
        if found is None:
            nc, body = op.attrs["n_carry"], op.regions[0]
            outs = body.ops[-1].operands
            direct, ahead = stacked_in_place(body, nc, self.in_place_results)
            fits = lambda k, v: (v in self._views and ys[k].dtype == self._views[v].dtype  # noqa: E731
                                 and ys[k].shape[1:] == self._views[v].shape)
            direct = [k for k in direct if fits(k, outs[nc + k])]
            ahead = [(k, c) for k, c in ahead if outs[c] in self._pairs and fits(k, outs[c])]
            for k in direct:
                self._arena_views[outs[nc + k]] = self._views[outs[nc + k]]
            found = self._stacked[op] = (direct, ahead)
        return found

    def run_repeat(self, op, env, args) -> list:
        """A ``repeat``: ``a*i + b`` iterations, ``i`` the enclosing loop's index (its first
        operand)."""
        a, b = op.attrs["count"]
        n = a * int(args[0]) + b
        body, carry = op.regions[0], list(args[1:])
        counter = self.loop_counter(n)
        for i in range(n):
            out = self.run_block(body, env, [counter(i)] + carry)
            carry = [self._fix(c, v) for c, v in zip(out, op.results)]
        if n <= 0:  # as a loop that ran no iteration: copies, never the initial arrays
            carry = [self._fix(c, v).copy() for c, v in zip(carry, op.results)]
        return carry


class Runner:
    """One function run again and again: inputs converted and checked, symbolic dimensions
    bound, and one executor kept per binding, so that later calls with the same shapes reuse
    its buffer arena and its per-op preparation. `make_executor(dims)` builds an executor
    (default: an `Executor` on `xp`)."""

    # executors kept, one per binding of the dimensions, the least recently used going
    # first: each holds its arena (e.g. a full batch and the last, shorter one)
    KEEP = 2
    BINDINGS = 64  # sets of input shapes whose binding is remembered

    def __init__(self, module, fn_name: str, xp=numpy, make_executor=None,
                 donate: bool = False):
        self.module, self.fn, self.xp = module, module.functions[fn_name], xp
        # with `donate`, the results that replace inputs (a training step's parameters and
        # optimizer state, ``attrs["in_place"]``) are written into the input arrays: the
        # caller hands over arrays it owns, distinct from each other and writeable
        self.donate = donate
        self.make_executor = make_executor or (lambda dims: Executor(module, xp, dims))
        self._executors: dict[tuple, Executor] = {}
        self._declared = None  # the inputs' dtypes, made on the first call
        self._bindings: dict[tuple, tuple] = {}  # input shapes, dims -> (bound, its key)
        # checks of the converted inputs, ``check(inputs by name, dims)``, each raising a
        # RunError (the library adds the class-label ranges its ops declare)
        self.checks: list = []
        # the seed of the key input of a function that draws random values, when the
        # inputs give no key (`adc_runtime.random`)
        self.seed = 0

    def __call__(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None):
        """Run on named `inputs`; returns (outputs, stats). A function that draws random
        values gets the key of `seed` unless the inputs hold its key input."""
        if self._declared is None:
            self._declare()
        if self._key is not None and self._key not in inputs:
            inputs = {**inputs, self._key: self.xp.asarray(seed_key(self.seed), dtype="int64")}
        try:
            arrays = [inputs[name] for name in self._names]
        except KeyError:
            missing = [name for name in self._names if name not in inputs]
            raise RunError(f"missing input '{missing[0]}'") from None
        return self.run(arrays, dims)

    def _declare(self) -> None:
        self._declared = [(a, a.name, self.xp.dtype(DTYPES[a.type.dtype])) for a in self.fn.args]
        self._names = [a.name for a in self.fn.args]
        self._key = next((KEY_INPUT for a in self.fn.args if a.name == KEY_INPUT and
                          a.type.dtype == "i64" and tuple(a.type.shape) == (2,)), None)
        self._wants = [want for _, _, want in self._declared]
        self._last: tuple = (None, None, None)   # (dtypes and shapes, dims, binding) of `_checked`
        self._array_types = {self.xp.ndarray}

    def _checked(self, arrays: list, dims) -> tuple:
        """``(bound dims, executor key)`` of `arrays` (converted in place where their type
        or dtype differ from the declared ones), remembered for the next call."""
        ndarray = self.xp.ndarray
        # as given, checked in two passes: the common case (NumPy's built-in dtypes are one
        # object each, which the list comparison takes as equal without comparing them)
        if set(map(type, arrays)) != self._array_types or \
                list(map(_dtype, arrays)) != self._wants:
            for j, (a, name, want) in enumerate(self._declared):
                v = arrays[j]
                if type(v) is not ndarray or (v.dtype is not want and v.dtype != want):
                    arrays[j] = convert_input(name, v, a.type.dtype, str(a.type), self.xp)
        # the binding is a function of the input shapes and `dims`: worked out once per
        # set of shapes (the common case: every step has the same)
        shapes = (tuple(map(_shape, arrays)), tuple(dims.items()) if dims else ())
        known = self._bindings.get(shapes)
        if known is None:
            bound = bind_dims(self.fn, arrays, dims)
            if len(self._bindings) >= self.BINDINGS:
                self._bindings.clear()
            known = self._bindings[shapes] = (bound, tuple(sorted(bound.items())))
        self._last = (list(map(_signature, arrays)), dict(dims) if dims else dims, known)
        return known

    def run(self, arrays: list, dims: Mapping[str, int] | None = None):
        """`__call__` on the inputs in the function's order, a list this call may change:
        what a caller that knows the order saves (no dict of inputs built and read)."""
        fn = self.fn
        if self._declared is None:
            self._declare()
        ndarray = self.xp.ndarray
        # the common case first: arrays of the last call's dtypes and shapes, and the same
        # `dims`, have its checks passed and its binding (one pass over the arrays)
        try:
            sig = list(map(_signature, arrays))
        except AttributeError:   # not all arrays: converted below
            sig = None
        if sig is not None and sig == self._last[0] and dims == self._last[1] \
                and set(map(type, arrays)) == self._array_types:
            bound, key = self._last[2]
        else:
            bound, key = self._checked(arrays, dims)
        if self.checks:
            named = dict(zip(self._names, arrays))
            for check in self.checks:
                check(named, bound)
        ex = self._executors.get(key)
        if ex is None or next(reversed(self._executors)) != key:
            ex = self._executors.pop(key, None) or self.make_executor(dict(bound))
            self._executors[key] = ex
            if len(self._executors) > self.KEEP:
                del self._executors[next(iter(self._executors))]
        ex.live = ex.peak = 0
        if self.donate:
            ex.donate(fn, arrays)
        outs = ex.call(fn, arrays)
        if set(map(type, outs)) != self._array_types:  # no NumPy scalars
            asarray = self.xp.asarray
            outs = [o if type(o) is ndarray else asarray(o) for o in outs]
        return outs, {"peak_bytes": ex.peak, "arena_bytes": ex.arena_bytes, "dims": dict(bound)}


def run_function(module, fn_name: str, inputs: Mapping[str, Any], xp=numpy,
                 dims: Mapping[str, int] | None = None, plan_buffers: bool = True,
                 executor=None):
    """Run `module.functions[fn_name]` once on named `inputs`; returns (outputs, stats).
    `executor` is the `Executor` class to run it with (e.g. `anomaly.AnomalyExecutor`)."""
    cls = executor or Executor
    return Runner(module, fn_name, xp,
                  lambda bound: cls(module, xp, bound, plan_buffers))(inputs, dims)


def picker(places: list):
    """``items -> [items[j] for j in places]`` as a list, in one C call (`places`: indices
    of a sequence or keys of a mapping)."""
    if len(places) < 2:
        return lambda items: [items[j] for j in places]
    get = operator.itemgetter(*places)
    return lambda items: list(get(items))
