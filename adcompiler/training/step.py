"""`train_step`: a program's training step, compiled once (the ``train-step`` pass) and
called once per step over dicts keyed by name::

    step = adc.train_step("samples/mlp.tdsl", adc.optim.adam(1e-3), clip=1.0)
    state = step.init(params)                       # the optimizer state, by name
    params, state, metrics = step(params, state, batch)

Like ``optimizer.step()``, a call updates the parameters and the optimizer state in place
where the runtime can: the arrays it returns are the ones it was given, written over. It
never writes into arrays it did not make: the first call copies the caller's parameters
once, and later calls update the arrays earlier calls returned (copy them to keep a
snapshot).

On the CPU, the step's runs of elementwise ops (its optimizer update above all) can run as
one compiled loop each (`adc_runtime.fused_runs`, with numba installed): up to 2.7 times
the speed of the update's NumPy calls (for large parameters; little for small ones), at
the price of numba's import and compilation, 1.5 s for a small MLP's step on a busy
2-core machine. By default a step pays that only once its calls have taken `FUSE_AFTER_S`
seconds in all: a short run never does, and a run that stops right after the switch takes
about 15% longer; ``fuse=True`` fuses from the first call, ``fuse=False`` never.
"""
from __future__ import annotations

import operator
import time
import weakref
from typing import Any, Mapping, Sequence

import numpy

from ..api.program import DEFAULT_PASSES, Source, _array_module, runner
from ..diagnostics import AdcError
from ..ir.core import Module
from .optim import Optimizer, option_fields, parse_optimizer

__all__ = ["train_step", "CompiledStep"]

FUSE_AFTER_S = 10.0  # seconds of calls after which a step with ``fuse=None`` fuses its runs


def train_step(program: Source, optimizer: Optimizer | str, clip: float | None = None,
               accumulate: int = 1, fn: str | None = None,
               wrt: str | Sequence[str] | None = None, dtype: str | None = None,
               remat: str | None = None, device: str = "cpu", *,
               passes: str = DEFAULT_PASSES, dims: Mapping[str, int] | None = None,
               comm=None, bucket_mb: float = 25.0, overlap: bool = True,
               fuse: bool | None = None, seed: int = 0) -> "CompiledStep":
    """Compile the training step of the loss `fn` (default: the main function).

    `optimizer`: an `adcompiler.training.optim` optimizer or its text (``"adam:lr=1e-3,wd=0.01"``).
    `clip`: the max global gradient norm (``clip_grad_norm_``). `accumulate`: K
    micro-batches per step; each call's batch then holds K times the rows, split along axis
    0. `wrt`: the trained inputs (default: the ``param`` inputs). `dtype`: make every float
    this dtype first (``"f64"``). `remat`: a checkpointing policy for the adjoint.
    `comm`: a communicator of data-parallel training (`adcompiler.training.distributed`): the
    ``allreduce`` pass averages the loss and gradients over its processes in buckets of
    `bucket_mb` MiB, overlapped with the backward pass unless `overlap` is false.
    `fuse`: compile the update's elementwise runs into loops from the first call (True),
    never (False), or once the calls have taken `FUSE_AFTER_S` seconds (None; module doc).
    `seed`: the seed of the program's random ops; step N draws from it folded with N, so
    every step draws anew and a resumed run draws what an uninterrupted one did.
    """
    from ..passes.pipeline import parse_pipeline, run_pipeline
    from ..passes.scan_inputs import ScanInputs
    from ..passes.train_step import TrainStep
    from ..api.derive import primal
    if isinstance(optimizer, str):
        optimizer = parse_optimizer(optimizer)
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"optimizer must be an adc.optim optimizer or its text, "
                        f"got {type(optimizer).__name__}")
    module, f = primal(program, fn, dtype)
    names = (wrt,) if isinstance(wrt, str) else tuple(wrt or ())
    bind = tuple(f"{k}={v}" for k, v in (dims or {}).items())
    step_pass = TrainStep(fn=f.name, wrt=names, clip=clip, accumulate=accumulate,
                          remat=remat or "none", bind=bind, **option_fields(optimizer))
    pipeline = [*parse_pipeline(passes), ScanInputs(), step_pass]
    if comm is not None:
        from ..passes.allreduce import AllReduce
        pipeline.append(AllReduce(fn=f"{f.name}_step", bucket_mb=bucket_mb, overlap=overlap,
                                  bind=bind))
    module = run_pipeline(module, pipeline + parse_pipeline(f"dce{{fn={f.name}_step}}"))
    return CompiledStep(module, f"{f.name}_step", optimizer, device, dims, comm, fuse, seed)


def _mappings(**given) -> None:
    """Refuse an argument that is not a dict (a list of arrays, say) by its name."""
    for what, value in given.items():
        if not isinstance(value, Mapping):
            raise TypeError(f"{what} must be a dict of arrays by name (or nested dicts and "
                            f"lists by path), got {type(value).__name__}")


class CompiledStep:
    """A compiled training step: ``init(params) -> state`` and
    ``(params, state, batch) -> (params, state, metrics)``, all dicts keyed by name.

    `metrics`: ``loss``, ``grad_norm`` (before clipping), ``grad_norm_<param>`` and ``lr``
    (the rate this step used), as 0-d arrays. `module` and `fn_name` show what runs.
    """

    def __init__(self, module: Module, fn_name: str, optimizer: Optimizer, device: str = "cpu",
                 dims: Mapping[str, int] | None = None, comm=None, fuse: bool | None = None,
                 seed: int = 0):
        fn = module[fn_name]
        self.seed = seed
        # the program's state inputs (running statistics...): threaded with the optimizer's
        self.model_state = list(fn.attrs.get("model_state", ()))
        self.module, self.fn_name, self.optimizer = module, fn_name, optimizer
        self.device, self.dims = device, dict(dims or {})
        self.comm = comm
        self.params = list(fn.attrs["params"])
        self.state_names = list(fn.attrs["state"])
        self.batch_names = list(fn.attrs["batch"])
        self.accumulate = fn.attrs["accumulate"]
        self.outputs = list(fn.attrs["outputs"])
        self._types = {a.name: a.type for a in fn.args}
        self._xp = _array_module(device)
        self._runner = self._made = None  # the runner in use, and the one made here
        self.fuse = fuse
        self._unfused_s = 0.0 if fuse is None and device == "cpu" else None  # time to switch
        self.stats: dict = {}   # the last call's run statistics (``peak_bytes``, ...)
        self._owned: dict[int, weakref.ref] = {}  # arrays this step made: id -> ref
        self._held_names = self.params + self.state_names  # the arrays a call writes over
        self._dtypes = {n: numpy.dtype(_np_dtype(self._types[n].dtype))
                        for n in self._held_names}
        self._keys = {"params": frozenset(self.params), "state": frozenset(self.state_names),
                      "batch": frozenset(self.batch_names)}
        self._last: list[weakref.ref] = []  # what the last call returned, in that order
        # the outputs by place: the parameters and the state, then the metrics
        self._metric_names = [k for k in self.outputs if k not in self._dtypes]
        from adc_runtime.executor import picker
        self._pick_params = picker(self.params)  # (the keys are checked first)
        self._pick_state = picker(self.state_names)
        # NumPy arrays: their flag read in one C call (another array module: `_writeable`)
        self._writeable = _writeable if self._xp is not numpy else \
            operator.attrgetter("flags.writeable")
        self._pick_held = picker([self.outputs.index(n) for n in self._held_names])
        self._pick_metrics = picker([self.outputs.index(n) for n in self._metric_names])
        # the runner's inputs in the function's order, from the parameters, the state and
        # the batch in that order
        given = self._held_names + self.batch_names
        order = [a.name for a in fn.args]
        self._arrange = picker([given.index(n) for n in order]) \
            if sorted(order) == sorted(given) else None

    def init(self, params: Mapping[str, Any],
             model_state: Mapping[str, Any] | None = None) -> dict:
        """The initial state for `params`: the counter ``step`` = 0, zeros for every
        optimizer slot (torch's lazily created state, made up front), and each state input
        of the program at its declared initial value unless `model_state` gives it."""
        from ..files.paths import is_nested
        if is_nested(params):   # nested dicts and lists: the state mirrors them
            return self.state_tree(self.init(self._flat(params), model_state))
        params = self._flat(params)
        self._check("params", params, self.params)
        attrs = self.module[self.fn_name].attrs
        xp, slot_of, given = self._xp, attrs["slot_of"], dict(model_state or {})
        unknown = [k for k in given if k not in self.model_state]
        if unknown:
            raise TypeError(f"{self.fn_name}: unknown state {', '.join(map(repr, unknown))} "
                            f"(the program's state: {', '.join(self.model_state) or 'none'})")
        state = {self.state_names[0]: self._own(xp.zeros((), dtype="int64"))}
        for name in self.state_names[1:]:
            dtype = _np_dtype(self._types[name].dtype)
            if name in given:
                state[name] = self._own(xp.array(given[name], dtype=dtype, copy=True))
            elif name in self.model_state:
                shape = self._state_shape(name, params)
                state[name] = self._own(xp.full(shape, attrs.get("state_init", {}).get(name, 0),
                                                dtype=dtype))
            else:
                shape = xp.asarray(params[slot_of[name]]).shape
                state[name] = self._own(xp.zeros(shape, dtype=dtype))
        return state

    def _state_shape(self, name: str, params: Mapping[str, Any]) -> tuple:
        """The shape of state input `name`, its symbolic dims bound by `dims` or by the
        parameters' shapes."""
        env = dict(self.dims)
        for p in self.params:
            for d, size in zip(self._types[p].shape, numpy.shape(params[p])):
                if isinstance(d, str):
                    env.setdefault(d, size)
        try:
            return tuple(d if isinstance(d, int) else env[d] for d in self._types[name].shape)
        except KeyError as e:
            raise TypeError(f"{self.fn_name}: the shape of state '{name}' "
                            f"{self._types[name]} needs {e.args[0]}: give dims= or its "
                            f"initial value (init(params, {{'{name}': ...}}))") from None

    def __call__(self, params: Mapping[str, Any], state: Mapping[str, Any],
                 batch: Mapping[str, Any]) -> tuple[dict, dict, dict]:
        keys = self._keys
        if type(params) is not dict or type(state) is not dict or type(batch) is not dict:
            _mappings(params=params, state=state, batch=batch)
        if params.keys() != keys["params"]:
            from ..files.paths import is_nested
            if is_nested(params):
                return self._call_tree(params, state, batch)
            self._check("params", params, self.params)
        if state.keys() != keys["state"]:
            from .state_tree import is_tree, layout
            if is_tree(state, layout(self)):
                new, state, metrics = self(params, self.state_flat(state), batch)
                return new, self.state_tree(state), metrics
            self._check("state", state, self.state_names)
        if batch.keys() != keys["batch"]:
            self._check("batch", batch, self.batch_names)
        held = self._pick_params(params) + self._pick_state(state)
        again = self._returned_last(held)
        if not again:
            held = self._take(held)
        if self.accumulate == 1:
            given = held + [batch[name] for name in self.batch_names]
        else:
            given = held + [self._split(name, batch[name]) for name in self.batch_names]
        if self._runner is None:
            self._runner = self._made = runner(self.module, self.fn_name, self.device,
                                               donate=True, fuse=self.fuse is True)
            self._runner.seed = self.seed
        if self._arrange is not None:
            run, inputs = self._runner.run, self._arrange(given)
        else:
            run, inputs = self._runner, dict(zip(self._held_names + self.batch_names, given))
        start = time.perf_counter() if self._unfused_s is not None else None
        if self.comm is None:
            outs, self.stats = run(inputs, self.dims)
        else:
            from adc_runtime.collectives import using
            with using(self.comm):
                outs, self.stats = run(inputs, self.dims)
        if start is not None:
            self._count_unfused(time.perf_counter() - start)
        returned = self._pick_held(outs)
        if not (again and all(map(operator.is_, returned, held))):  # else known already
            self._remember(returned)
        n = len(self.params)
        return (dict(zip(self.params, returned[:n])), dict(zip(self.state_names, returned[n:])),
                dict(zip(self._metric_names, self._pick_metrics(outs))))

    def _flat(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """`params` by input name: nested dicts and lists by path (`files.paths`) joined."""
        from ..files.paths import flat_paths, is_nested, join
        _mappings(params=params)
        if not is_nested(params):
            return params
        return join(self.module[self.fn_name], flat_paths(params), "params", self.params)

    def _call_tree(self, params, state, batch) -> tuple:
        """A step on parameters given as nested dicts and lists, returned the same way."""
        new, state, metrics = self(dict(self._flat(params)), state, batch)
        return self._regroup(new), state, metrics

    def _regroup(self, arrays: dict):
        """Arrays by input name as the params' tree (each layer of a stack a leaf)."""
        from ..files.paths import nest, split, stacks_of
        return nest(split(stacks_of(self.module[self.fn_name]), arrays))

    def state_tree(self, state: Mapping[str, Any]) -> dict:
        """The state keyed by input name as a tree mirroring the params' (`state_tree`):
        ``{"step": ..., "exp_avg": <params' tree>, ..., "model": <state inputs>}``."""
        from .state_tree import layout, to_tree
        return to_tree(state, layout(self), self._regroup)

    def state_flat(self, tree: Mapping[str, Any]) -> dict:
        """`state_tree`'s inverse: the state keyed by the step's input names."""
        from ..files.paths import flat_paths, join
        from .state_tree import from_tree, layout
        fn = self.module[self.fn_name]
        return from_tree(tree, layout(self),
                         lambda t, what, names: join(fn, flat_paths(t), what, names))

    def _count_unfused(self, seconds: float) -> None:
        """Add a call's time; past `FUSE_AFTER_S`, later calls run a fusing runner (a new
        executor: its own arena and generated code; the arrays held stay the caller's)."""
        self._unfused_s += seconds
        if self._unfused_s >= FUSE_AFTER_S:
            self._unfused_s = None
            from adc_runtime import fused_runs
            # a runner set from outside (one that stops at non-finite values) stays
            if self._runner is self._made and fused_runs.enabled():
                self._runner = runner(self.module, self.fn_name, self.device, donate=True,
                                      fuse=True)
                self._runner.seed = self.seed

    # -- inputs --------------------------------------------------------------------------
    def _check(self, what: str, given: Mapping[str, Any], names: list[str]) -> None:
        missing = [n for n in names if n not in given]
        extra = [n for n in given if n not in names]
        if missing or extra:
            parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + \
                    ([f"unknown {', '.join(map(repr, extra))}"] if extra else [])
            raise TypeError(f"{self.fn_name}: {what} {'; '.join(parts)} "
                            f"(expected: {', '.join(names) or 'none'})")

    def _own(self, a):
        self._owned[id(a)] = weakref.ref(a)
        return a

    def _returned_last(self, held: list) -> bool:
        """Whether `held` are the arrays the last call returned, in their places (the
        common case, checked in one pass): the step may write over them again."""
        last = self._last
        return (len(last) == len(held) and all(map(operator.is_, held, [r() for r in last]))
                and all(map(self._writeable, held)))

    def _remember(self, returned: list) -> None:
        """Keep weak references to the arrays returned for the parameters and the state,
        when they are distinct arrays of their declared dtypes (else every one is checked
        by `_mine` on the next call)."""
        if len(set(map(id, returned))) == len(returned) and all(
                getattr(a, "dtype", None) == self._dtypes[n]
                for a, n in zip(returned, self._held_names)):
            self._last = [weakref.ref(self._own(a)) for a in returned]
        else:
            self._last = []
            for a in returned:
                self._own(a)

    def _take(self, held: list) -> list:
        """The arrays of a call whose parameters or state are not those the last call
        returned: each one this step made kept, the others copied (`_mine`)."""
        taken: dict[str, Any] = {}
        for name, a in zip(self._held_names, held):
            taken[name] = self._mine(a, name, taken)
        return list(taken.values())

    def _mine(self, a, name: str, taken: Mapping[str, Any]):
        """`a` when this step made it and may write over it (and no other input of this
        call is the same array), else a copy of its own."""
        ref = self._owned.get(id(a))
        want = self._dtypes[name]
        if ref is not None and ref() is a and a.dtype == want and self._writeable(a) and \
                not any(b is a for b in taken.values()):
            return a
        return self._own(self._xp.array(a, dtype=want, copy=True))

    def _split(self, name: str, a):
        """A batch input, its rows split into the K micro-batches of one step."""
        k, t = self.accumulate, self._types[name]
        if k == 1 or t.rank == 0:
            return a
        a = self._xp.asarray(a)
        if a.ndim != t.rank - 1 or a.shape[0] % k:
            raise AdcError(f"batch input '{name}' has shape {tuple(a.shape)}: with accumulate="
                           f"{k} it needs rank {t.rank - 1} and a multiple of {k} rows")
        return a.reshape((k, a.shape[0] // k) + tuple(a.shape[1:]))

    def __repr__(self) -> str:
        return (f"<CompiledStep {self.fn_name}(params: {', '.join(self.params)}; "
                f"batch: {', '.join(self.batch_names)})>")


def _writeable(a) -> bool:
    return getattr(a.flags, "writeable", True)


def _np_dtype(dtype: str) -> str:
    from adc_runtime.kernels import DTYPES
    return DTYPES[dtype]

