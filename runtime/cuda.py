"""The CuPy backend: the executor on device arrays, fused groups as generated kernels, and
measured peak device memory.

* Inputs are copied to the device once; every op then runs on device arrays (the kernel
  table with ``xp = cupy``: cuBLAS for ``matmul``/``einsum``), and outputs stay on the
  device until the caller copies them back.
* A ``fused`` op runs the ``cupy.ElementwiseKernel`` built from its `KernelSpec` (made by
  ``adcompiler.emit.cuda``; this package never imports the compiler), or the
  ``cupy.ReductionKernel`` where a reduction closes the group (``spec.kind ==
  "reduction"``). Kernels are built once per source text, which fixes the dtypes, and kept
  for the life of the process; CuPy compiles each for the ranks (and reduction axes) it
  meets and caches the binaries. Outputs are passed in at the shape the IR declares (their
  planned buffers, see below), so a group whose inputs are all literals still has its size;
  a reduction kernel
  gets its output the same way (CuPy checks its shape), with ``axis=`` and ``keepdims=``
  from the reduction op, and for ``sum_to`` the summed axes worked out from the run-time
  shapes as the NumPy kernel does, reduced with ``keepdims=True`` and reshaped.
* Buffers are planned (`adc_runtime.buffers`): the fused kernels, ``matmul`` (cuBLAS with
  ``out=``), the single-ufunc ops and loops' stacks write into one device arena per
  function, allocated on the executor's first call and reused by every later step.
* Scalar constants are uploaded once per executor, not once per use.
* A fused kernel that fails to build, compile or launch is reported at the group's first op
  (``FILE:LINE:COL``, the kernel's name, its ops and the compiler's first error): a
  `RunError` where the user's part is at fault (device memory exhausted, or a plugin op's
  formula in the group), else an `InternalError` (the generated source or its launch is
  adc's bug; the command line exits 3). CuPy launches asynchronously, so a fault inside a
  running kernel (an illegal address) surfaces at the next synchronisation, unlocated.
* `PeakMemoryHook` follows the memory pool's mallocs and frees (``MemoryPool`` keeps no
  high-water mark): ``peak_bytes_measured`` is the most device memory held by arrays at
  once, inputs included, next to ``peak_bytes`` (the executor's SSA accounting).

CUDA graphs: `adc_runtime.cuda_step` (generated step code) captures runs of generated
kernels between library calls, behind ``graphs=True``. CuPy refuses cuBLAS calls during
stream capture (``cublas.setStream`` raises NotImplementedError while the stream
captures), so the matrix products, and with them the whole step, stay outside.

CuPy is imported only by `load_cupy`, i.e. only when the CUDA device is asked for.
"""
from __future__ import annotations

import itertools
from typing import Any, Mapping

from .errors import InternalError
from .executor import Executor, Runner, RunError
from .kernels import BUILTIN, DTYPES, PLUGIN_OPS
from . import cuda_attention, cuda_row_groups, cuda_rows, row_fusion

_KERNELS: dict[tuple, Any] = {}
# ops that launch nothing themselves: views, constants, and ops that run other ops
NOT_LIBRARY = frozenset({"for", "repeat", "call", "fused", "const", "reshape", "expand_dims",
                         "squeeze", "transpose", "broadcast_to", "stop_gradient"})
_HOOK_IDS = itertools.count()
# ops with a kernel of their own here (`CudaExecutor.run_row`): the row kernels and the fused
# attention kernel
KERNEL_OPS = cuda_rows.ROW_OPS | {"attention"}


def load_cupy():
    """The `cupy` module when it imports and a CUDA GPU is usable, else a one-line RunError."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # ImportError, or a CUDA runtime error without a driver
        raise RunError(f"the CUDA device needs CuPy and a CUDA GPU ({type(e).__name__}: "
                       f"{e})") from None
    if count < 1:
        raise RunError("no CUDA GPU found")
    return cupy


def build_kernel(cupy, spec):
    """The ElementwiseKernel or ReductionKernel of `spec`, built once per source text."""
    kind = getattr(spec, "kind", "elementwise")
    key = (kind, spec.name, spec.in_params, spec.out_params, spec.operation, spec.preamble)
    if kind == "reduction":
        key += (spec.reduce_expr, spec.post_map_expr, spec.identity, spec.reduce_type)
    kern = _KERNELS.get(key)
    if kern is None:
        if kind == "reduction":
            kern = cupy.ReductionKernel(
                spec.in_params, spec.out_params, spec.operation, spec.reduce_expr,
                spec.post_map_expr, spec.identity, spec.name, reduce_type=spec.reduce_type,
                preamble=spec.preamble)
        else:
            kern = cupy.ElementwiseKernel(spec.in_params, spec.out_params, spec.operation,
                                          spec.name, preamble=spec.preamble)
        _KERNELS[key] = kern
    return kern


def kernel_error(cupy, op, spec, e: Exception) -> Exception:
    """The located error for the fused op `op` whose kernel (`spec`) raised `e` while being
    built, compiled or launched."""
    members = spec.where.split(": ", 1)[-1] if spec.where else "fused group"
    what = f"the CUDA kernel {spec.name} ({members})"
    if isinstance(e, _error_class(cupy, "memory", "OutOfMemoryError", MemoryError)):
        return RunError(f"{what} ran out of device memory: {e}", op.loc)
    if isinstance(e, _error_class(cupy, "compiler", "CompileException")):
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        first = next((line for line in lines if "error" in line), lines[0] if lines else "")
        text = f"{what} does not compile: {first}"
    else:
        text = f"{what} failed to launch ({type(e).__name__}: {e})"
    user = {o.name for o in op.regions[0].ops} & PLUGIN_OPS
    if user:
        return RunError(f"{text}; the group contains the plugin op "
                        f"'{sorted(user)[0]}'", op.loc)
    return InternalError(f"{text}; this is a bug in adc", op.loc)


def _error_class(cupy, module: str, name: str, default=()):
    """``cupy.cuda.<module>.<name>``, or `default` where this CuPy has no such class."""
    return getattr(getattr(getattr(cupy, "cuda", None), module, None), name, default)


def sum_to_axes(shape, target) -> tuple[int, ...]:
    """The axes that ``sum_to`` sums to take `shape` down to `target` (with keepdims)."""
    lead = len(shape) - len(target)
    return tuple(range(lead)) + tuple(lead + k for k, d in enumerate(target)
                                      if d == 1 and shape[lead + k] != 1)


def _check_extremum(red, resolve) -> None:
    """Raise RunError for a max or min over an empty axis, as NumPy does (the kernel would
    return its identity, -inf or +inf)."""
    if red.name not in ("max", "min"):
        return
    shape = resolve(red.operands[0].type.shape)
    axis = red.attrs.get("axis")
    axes = range(len(shape)) if axis is None else \
        [a % len(shape) for a in (axis if isinstance(axis, (list, tuple)) else [axis])]
    if any(shape[a] == 0 for a in axes):
        ufunc = "maximum" if red.name == "max" else "minimum"
        raise RunError(f"{red.name} cannot run on these values: zero-size array to reduction "
                       f"operation {ufunc} which has no identity", red.loc)


def peak_memory_hook(cupy):
    """A fresh `cupy.cuda.MemoryHook` tracking bytes in use and their high-water mark.

    CuPy keeps active hooks by name (a second hook of one name is refused), so each gets its
    own. Only blocks allocated while the hook is open count: a failed allocation (reported
    with ``mem_ptr=0``) adds nothing, and freeing a block allocated before the hook opened
    subtracts nothing, so ``used`` never goes below zero."""

    class PeakMemoryHook(cupy.cuda.MemoryHook):
        def __init__(self):
            super().__init__()
            self.name = f"adc_peak_memory_{next(_HOOK_IDS)}"
            self.used = 0
            self.peak = 0
            self._blocks: dict[int, int] = {}

        def malloc_postprocess(self, **kw):
            ptr = kw["mem_ptr"]
            if ptr:
                self._blocks[ptr] = kw["mem_size"]
                self.used += kw["mem_size"]
                self.peak = max(self.peak, self.used)

        def free_postprocess(self, **kw):
            size = self._blocks.pop(kw["mem_ptr"], 0)
            self.used -= size

    return PeakMemoryHook()


class CudaExecutor(Executor):
    """The executor with generated kernels for fused ops (`specs`: fused op -> KernelSpec)
    and, with `rows`, the row kernels of `adc_runtime.cuda_rows` for softmax, log_softmax,
    cross_entropy, layernorm and rmsnorm along a contiguous last axis and the fused kernel
    of `adc_runtime.cuda_attention` for attention (f32, f64); without `fused_attention`,
    attention runs CuPy's library (cuBLAS and the softmax), to compare the two.

    A fused op without a spec runs op by op, like on NumPy."""

    def __init__(self, module, cupy, dims: Mapping[str, int] | None = None,
                 specs: Mapping | None = None, rows: bool = True,
                 fused_attention: bool = True):
        super().__init__(module, cupy, dims)
        self.specs = dict(specs or {})
        # the row kernels and the attention kernel (RawModule)
        self.rows = rows and hasattr(cupy, "RawModule")
        self.fused_attention = fused_attention
        self._host_consts = None   # the module's 0-d constants on the host, for row_groups
        # kernels launched by this executor (``adc``: generated and row kernels) and ops
        # handed to CuPy's library (``library``: one or more kernels or a cuBLAS call each)
        self.launches = {"adc": 0, "library": 0}
        self._consts: dict[tuple, Any] = {}

    def run_op(self, op, env) -> list:
        if type(op) is GroupStep:
            return self.run_group(op.group, [env[v] for v in op.operands], env)
        if op.name == "const" and not op.operands:
            key = (repr(op.attrs["value"]), op.attrs["dtype"])
            if key not in self._consts:
                self._consts[key] = super().run_op(op, env)[0]
            return [self._consts[key]]
        if self.own_kernel(op):
            r = self.run_row(op, [env[v] for v in op.operands])
            if r is not None:
                return [r]
        if op.name not in NOT_LIBRARY:
            self.launches["library"] += 1
        return super().run_op(op, env)

    def row_groups(self, block) -> dict:
        """op index -> its row adjoint group (`adc_runtime.cuda_row_groups`) in `block`."""
        if self._host_consts is None:
            self._host_consts = cuda_row_groups.host_consts(
                op for fn in self.module.functions.values() for op in fn.walk())
        return row_fusion.plan(
            block, self._resolve, self._host_consts,
            skip=lambda op: op.name == "const" and not op.operands,
            exclude=lambda op: op.name not in BUILTIN or op.name == "fused",
            memory=lambda v: ("new", None), match=cuda_row_groups.match(self.xp))

    def run_group(self, group, args: list, env) -> list:
        """The row adjoint `group` on its input arrays `args` by its kernel into its
        outputs' planned buffers; where the kernel declines, its ops one by one (`env`
        holds the constants they read)."""
        got = group.run(*args, *[self._views.get(r) for r in group.outputs])
        if got is not None:
            self.launches["adc"] += 1
            return list(got)
        local = {**env, **dict(zip(group.inputs, args))}
        for op in group.ops:
            local.update(zip(op.results, CudaExecutor.run_op(self, op, local)))
        return [local[v] for v in group.outputs]

    def _schedule(self, block, borrowed=frozenset()):
        """The interpreter's schedule, each row adjoint group of `block` one step at its
        last op (its inputs freed after it, its inner values never made)."""
        dead_args, steps = super()._schedule(block, borrowed)
        groups = self.row_groups(block) if self.rows else {}
        if not groups:
            return dead_args, steps
        out, pending = [], []
        for k, (op, dead, keep) in enumerate(steps):
            group = groups.get(k)
            if group is None:
                out.append((op, dead, keep))
                continue
            pending += [v for v in dead if v not in group.inner]
            if k == group.last:
                out.append((GroupStep(group), tuple(pending), None))
                pending = []
        return dead_args, out

    def own_kernel(self, op) -> bool:
        """Whether `op` is tried by a kernel of this package (`run_row`) first."""
        return op.name in KERNEL_OPS and self.rows and (
            op.name != "attention" or self.fused_attention)

    def run_row(self, op, args):
        """`op` by its one-launch kernel (`adc_runtime.cuda_rows`, `adc_runtime.cuda_attention`)
        into its planned buffer, or None where that kernel does not apply."""
        res = op.results[0]
        if res.type.dtype not in ("f32", "f64"):
            return None
        out = self._views.get(res)
        if op.name == "attention":
            r = cuda_attention.run(self.xp, *args, bool(op.attrs.get("causal", False)),
                                   float(op.attrs.get("scale", 0.0)), out)
        else:
            r = cuda_rows.run_row_op(self.xp, op.name, args, op.attrs, out)
        if r is not None:
            self.launches["adc"] += 1
        return r

    def loop_counter(self, n: int):
        """Views of one device ``arange(n)``: no host-to-device copy per iteration."""
        counts = self.xp.arange(n, dtype="int64")
        return lambda i: counts[i:i + 1].reshape(())

    def in_place_results(self, op) -> list:
        """Also the results of fused kernels (a ``sum_to`` reduction writes a kept-dims
        array that it then reshapes, so its result is not planned)."""
        spec = self.specs.get(op) if op.name == "fused" else None
        if spec is not None:
            closed = getattr(spec, "kind", "elementwise") == "reduction"
            return [] if closed and spec.to_shape is not None else list(op.results)
        return super().in_place_results(op)

    def writes_elementwise(self, op) -> bool:
        """Also fused elementwise kernels: CuPy loads every input element of a thread before
        the operation writes its outputs."""
        spec = self.specs.get(op) if op.name == "fused" else None
        if spec is not None:
            return getattr(spec, "kind", "elementwise") == "elementwise"
        return super().writes_elementwise(op)

    def run_fused(self, op, env, args) -> list:
        spec = self.specs.get(op)
        if spec is None:
            return super().run_fused(op, env, args)
        captured = [env[v] for v in spec.captures]
        if getattr(spec, "kind", "elementwise") == "reduction":
            _check_extremum(op.regions[0].ops[-2], self._resolve)
            return [self._launch(op, spec, lambda kern: self._reduce(
                kern, spec, op.results[0], [*args, *captured]))]
        outs = [self.result_buffer(r) for r in op.results]
        self._launch(op, spec, lambda kern: kern(*args, *captured, *outs))
        return outs

    def _launch(self, op, spec, launch):
        """`launch(kernel)` with `spec`'s kernel (CuPy compiles it at its first launch); a
        failure becomes the located error of `kernel_error`."""
        self.launches["adc"] += 1
        try:
            return launch(build_kernel(self.xp, spec))
        except (RunError, InternalError):
            raise
        except Exception as e:
            raise kernel_error(self.xp, op, spec, e) from e

    def _reduce(self, kern, spec, result, ins):
        dtype = DTYPES[result.type.dtype]
        if spec.to_shape is None:
            out = self.result_buffer(result)
            kern(*ins, out, axis=tuple(spec.axis), keepdims=spec.keepdims)
            return out
        shape, target = self._resolve(spec.in_shape), self._resolve(spec.to_shape)
        axes = sum_to_axes(shape, target)
        kept = tuple(1 if k in axes else d for k, d in enumerate(shape))
        out = self.xp.empty(kept, dtype=dtype)
        kern(*ins, out, axis=axes, keepdims=True)
        return out.reshape(target)


class GroupStep:
    """A row adjoint group as one step of the interpreter's schedule."""
    name = "row_group"
    regions: tuple = ()

    def __init__(self, group):
        self.group, self.operands, self.results = group, group.inputs, group.outputs
        self.loc = group.ops[-1].loc


def runner(module, fn_name: str, specs: Mapping | None = None, cupy=None) -> Runner:
    """A `Runner` of `fn_name` on the GPU with the generated kernels `specs` (fused op ->
    ``adcompiler.emit.cuda.kernel_specs``); outputs stay on the device."""
    cp = cupy if cupy is not None else load_cupy()
    return Runner(module, fn_name, cp, lambda dims: CudaExecutor(module, cp, dims, specs))


def run_function(module, fn_name: str, inputs: Mapping[str, Any], specs: Mapping | None = None,
                 dims: Mapping[str, int] | None = None, cupy=None):
    """Run `fn_name` once on the GPU; returns (device outputs, stats).

    Stats: ``peak_bytes`` (SSA accounting, as on NumPy), ``peak_bytes_measured`` (the memory
    pool, by `PeakMemoryHook`: inputs, the buffer arena and every other allocation),
    ``arena_bytes``, ``dims``."""
    run = runner(module, fn_name, specs, cupy)
    hook = peak_memory_hook(run.xp)
    with hook:
        outs, stats = run(inputs, dims)
        run.xp.cuda.get_current_stream().synchronize()
    return outs, {**stats, "peak_bytes_measured": hook.peak}
