"""A stand-in for CuPy on the CPU: NumPy arrays, and kernel classes with CuPy's own surface.

`ElementwiseKernel` and `ReductionKernel` take CuPy's constructor arguments in CuPy's order
(with its defaults), check a call's arguments as CuPy does before it touches a device (the
argument count, unknown keywords, a fixed parameter dtype against the array's, broadcasting,
the output's shape, ``out=`` beside a positional output, axis normalisation, a zero-size
reduction without identity) and return what CuPy returns (the output array, a tuple for
several, None with ``no_return``). Only the arithmetic differs: a kernel does not compile
its source on a GPU, its `compute` method gets the checked arguments (`fake_cupy`'s kernels:
the fused op's region run by the NumPy executor; a subclass may run the source otherwise). `MemoryHook` keeps CuPy's registry of active hooks
by name, with CuPy's six callbacks. tests/test_cuda_runtime.py compares this surface with
the installed `cupy` module, so that a drift fails there.
"""
from __future__ import annotations

import re
import types
from collections import ChainMap, OrderedDict

import numpy as np

from adc_runtime.executor import Executor

# CuPy's C names of the dtypes (cupy._core._scalar.get_typename)
CTYPE = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
         "int64": "long long", "uint8": "unsigned char", "float16": "float16",
         "float32": "float", "float64": "double"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ParameterInfo:
    """One kernel parameter as CuPy parses it: ``[raw] TYPE NAME``."""

    def __init__(self, param: str, is_const: bool):
        words = param.split()
        if len(words) < 2:
            raise Exception(f"Syntax error: {param}")
        t, self.name = words[-2:]
        self.raw, self.is_const = False, is_const
        self.dtype = self.ctype = None
        if len(t) == 1:
            self.ctype = t                    # a type placeholder, as in 'T x'
        elif t != "CIndexer":
            self.dtype = np.dtype(t)
            self.ctype = CTYPE[self.dtype.name]
        for word in words[:-2]:
            if word == "raw":
                self.raw = True
            elif word == "_non_const":
                self.is_const = False
            else:
                raise Exception(f'Unknown keyword "{word}"')


def _params(text: str, is_const: bool) -> tuple:
    return tuple(ParameterInfo(p, is_const) for p in text.strip().split(",")) if text else ()


def _decide_types(in_params, out_params, ins, outs) -> None:
    """CuPy's `_decide_params_type`: a fixed parameter dtype must equal the array's."""
    bound: dict = {}
    for group, args in ((out_params, outs), (in_params, ins)):
        for p, a in zip(group, args):
            if not isinstance(a, np.ndarray):
                continue
            want = p.dtype if p.dtype is not None else bound.setdefault(p.ctype, a.dtype)
            if a.dtype != want:
                raise TypeError(f"Type is mismatched. {p.name} {a.dtype} {want}")


def _broadcast(args) -> tuple:
    try:
        return np.broadcast_shapes(*(a.shape for a in args if isinstance(a, np.ndarray)))
    except ValueError:
        shapes = " ".join(str(a.shape) for a in args if isinstance(a, np.ndarray))
        raise ValueError(f"operands could not be broadcast together with shapes {shapes}") \
            from None


def _check_out(out, shape) -> None:
    if not isinstance(out, np.ndarray):
        raise TypeError("Output arguments type must be cupy.ndarray")
    if out.shape != tuple(shape):
        raise ValueError("Out shape is mismatched")


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f'Invalid kernel name: "{name}"')


class ElementwiseKernel:
    """`cupy.ElementwiseKernel`; a subclass computes in `compute`."""

    def __init__(self, in_params, out_params, operation, name="kernel", reduce_dims=True,
                 preamble="", no_return=False, return_tuple=False, **kwargs):
        _check_name(name)
        self.in_params = _params(in_params, True)
        self.out_params = _params(out_params, False)
        self.nin, self.nout = len(self.in_params), len(self.out_params)
        self.nargs = self.nin + self.nout
        self.params = self.in_params + self.out_params + _params("CIndexer _ind", False)
        self.operation, self.name, self.reduce_dims = operation, name, reduce_dims
        self.preamble, self.no_return, self.return_tuple = preamble, no_return, return_tuple
        self.kwargs = kwargs
        if "i" in [p.name for p in self.in_params + self.out_params]:
            raise ValueError("Can not use 'i' as a parameter name")

    def __call__(self, *args, **kwargs):
        size = kwargs.pop("size", -1)
        kwargs.pop("stream", None)
        block_size = kwargs.pop("block_size", 128)
        if kwargs:
            raise TypeError(f"Wrong arguments {kwargs}")
        if block_size <= 0:
            raise ValueError("block_size must be greater than zero")
        if len(args) not in (self.nin, self.nargs):
            raise TypeError(f"Wrong number of arguments for {self.name!r}. It must be either "
                            f"{self.nin} or {self.nargs} (with outputs), but given "
                            f"{len(args)}.")
        if size != -1:
            raise NotImplementedError("the stand-in has no raw parameters, hence no size=")
        shape = _broadcast(args)
        ins, outs = list(args[:self.nin]), list(args[self.nin:])
        _decide_types(self.in_params, self.out_params, ins, outs)
        if outs:
            for out in outs:
                _check_out(out, shape)
        else:
            outs = [np.empty(shape, p.dtype) for p in self.out_params]
        if 0 not in shape:
            self.compute(ins, outs)
        if self.no_return:
            return None
        return outs[0] if self.nout == 1 and not self.return_tuple else tuple(outs)

    def compute(self, ins: list, outs: list) -> None:
        """Write the kernel's results into `outs` (checked: CuPy's dtypes, the broadcast
        shape of `ins` and `outs`) from `ins` (as given, not broadcast)."""
        raise NotImplementedError


class ReductionKernel:
    """`cupy.ReductionKernel`; a subclass computes in `compute`."""

    def __init__(self, in_params, out_params, map_expr, reduce_expr, post_map_expr, identity,
                 name="reduce_kernel", reduce_type=None, reduce_dims=True, preamble="",
                 options=()):
        self.name = name
        self.identity = "" if identity is None else str(identity)
        self.in_params = _params(in_params, True)
        self.out_params = _params(out_params, False)
        self._params = self.in_params + self.out_params + _params(
            "CIndexer _in_ind, CIndexer _out_ind", False) + _params("int32 _block_stride", True)
        self.params = None  # as in CuPy, whose reductions keep their parameters in _params
        self.nin, self.nout = len(self.in_params), len(self.out_params)
        self.nargs = self.nin + self.nout
        self.map_expr, self.reduce_expr, self.post_map_expr = map_expr, reduce_expr, \
            post_map_expr
        self.options, self.reduce_dims, self.preamble = options, reduce_dims, preamble
        self.reduce_type = self.out_params[0].ctype if reduce_type is None else reduce_type

    def __call__(self, *args, **kwargs):
        out = kwargs.pop("out", None)
        axis = kwargs.pop("axis", None)
        keepdims = kwargs.pop("keepdims", False)
        kwargs.pop("stream", None)
        if kwargs:
            raise TypeError(f"Wrong arguments {kwargs}")
        if len(args) not in (self.nin, self.nargs):
            raise TypeError(f"Wrong number of arguments for {self.name}")
        outs = list(args[self.nin:])
        if out is not None:
            if self.nout != 1:
                raise NotImplementedError("")
            if outs:
                raise ValueError("cannot specify 'out' as both a positional and keyword "
                                 "argument")
            outs = [out]
        ins = list(args[:self.nin])
        shape = _broadcast(ins)
        _decide_types(self.in_params, self.out_params, ins, outs)
        reduce_axis = _get_axis(axis, len(shape))
        out_shape = tuple(1 if k in reduce_axis else d for k, d in enumerate(shape)) \
            if keepdims else tuple(d for k, d in enumerate(shape) if k not in reduce_axis)
        if outs:
            for o in outs:
                _check_out(o, out_shape)
        else:
            outs = [np.empty(out_shape, p.dtype) for p in self.out_params]
        if outs[0].size == 0:
            return outs[0]
        if self.identity == "" and 0 in shape:
            raise ValueError(f"zero-size array to reduction operation {self.name} which has "
                             "no identity")
        self.compute(ins, outs[0], reduce_axis, keepdims)
        return outs[0]

    def compute(self, ins: list, out, axis: tuple, keepdims: bool) -> None:
        """Write the reduction of `ins` (as given, not broadcast) over `axis` (normalised
        and sorted, as CuPy's `_get_axis` gives it) into `out` (checked: its dtype and
        shape)."""
        raise NotImplementedError


def _get_axis(axis, ndim: int) -> tuple:
    """CuPy's `_get_axis`: the reduced axes, normalised and sorted."""
    if axis is None:
        return tuple(range(ndim))
    axis = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    reduce_axis = tuple(sorted(_normalize_axis_index(a, ndim) for a in axis))
    if len(set(reduce_axis)) != len(reduce_axis):
        raise ValueError("duplicate value in 'axis'")
    return reduce_axis


def _normalize_axis_index(a: int, ndim: int) -> int:
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(f"axis {a} is out of bounds for array of dimension "
                                      f"{ndim}")
    return a % ndim


class MemoryHook:
    """`cupy.cuda.MemoryHook`: active hooks by name (a second of one name is refused with
    CuPy's KeyError), six callbacks that do nothing by default."""

    name = "MemoryHook"
    _active: OrderedDict = OrderedDict()

    def __enter__(self):
        if self.name in self._active:
            raise KeyError(f"memory hook {self.name} already exists")
        self._active[self.name] = self
        return self

    def __exit__(self, *exc):
        del self._active[self.name]

    def alloc_preprocess(self, **kwargs):
        pass

    def alloc_postprocess(self, **kwargs):
        pass

    def malloc_preprocess(self, **kwargs):
        pass

    def malloc_postprocess(self, **kwargs):
        pass

    def free_preprocess(self, **kwargs):
        pass

    def free_postprocess(self, **kwargs):
        pass


def get_memory_hooks() -> OrderedDict:
    return MemoryHook._active


class CompileException(Exception):
    """`cupy.cuda.compiler.CompileException`: NVRTC's message, the source, the kernel name."""

    def __init__(self, msg, source, name, options, backend="nvrtc"):
        self._msg, self.source, self.name = msg, source, name
        self.options, self.backend = options, backend
        super().__init__()

    def __str__(self):
        return self._msg


class OutOfMemoryError(MemoryError):
    """`cupy.cuda.memory.OutOfMemoryError`."""

    def __init__(self, size, total, limit=0):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: "
                         f"{total:,} bytes{f', limit set to: {limit:,} bytes' if limit else ''}).")


# ---- computing with the fused op's region ------------------------------------------------

def _region_inputs(op) -> list:
    """The fused op's block arguments, then the outer values its region reads (captures), in
    the kernel's parameter order (see `adcompiler.emit.cuda`)."""
    body = op.regions[0]
    defined = set(body.args) | {r for o in body.ops for r in o.results}
    captures: list = []
    for o in body.ops:
        captures += [v for v in o.operands if v not in defined and v not in captures]
    return list(body.args) + captures


def numpy_compute(fused_by_name: dict, calls: list):
    """(elementwise, reduction) compute functions running the fused op named like the kernel
    with NumPy, op by op; each launch is logged in `calls`."""

    def elementwise(kern, ins, outs):
        calls.append(("launch", kern.name))
        op = fused_by_name[kern.name]
        env = ChainMap(dict(zip(_region_inputs(op), ins)))
        got = Executor(None, np).run_fused(op, env, ins[:len(op.regions[0].args)])
        for o, g in zip(outs, got):
            assert g.dtype == o.dtype, (kern.name, g.dtype, o.dtype)
            o[...] = g

    def reduction(kern, ins, out, axis, keepdims):
        calls.append(("launch", kern.name, axis, keepdims))
        op = fused_by_name[kern.name]
        body = op.regions[0]
        env = ChainMap(dict(zip(_region_inputs(op), ins)))
        ex = Executor(None, np)
        for inner in body.ops[:-2]:  # the map: every op before the reduction
            env.maps[0].update(zip(inner.results, ex.run_op(inner, env)))
        red = body.ops[-2]
        x = np.broadcast_to(env[red.operands[0]], np.broadcast_shapes(*(a.shape for a in ins)))
        reduce = {"sum": np.sum, "sum_to": _sum_to, "mean": np.mean, "max": np.max,
                  "min": np.min}[red.name]
        out[...] = np.asarray(reduce(x, axis=axis, keepdims=keepdims), dtype=out.dtype)

    return elementwise, reduction


def _sum_to(x, axis, keepdims):
    """A ``sum_to`` reduction over `axis`, added in the NumPy table kernel's order."""
    from adc_runtime.kernels import KERNELS
    axes = {a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis)}
    kept = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
    r = KERNELS["sum_to"](np, x, shape=kept)
    return r if keepdims else r.reshape([d for k, d in enumerate(x.shape) if k not in axes])


def fake_cupy(fused_by_name: dict, calls: list, compute=None):
    """NumPy dressed as CuPy. Kernels compute with `compute` (a pair of functions, see
    `numpy_compute`, the default: the fused op named like the kernel, run with NumPy);
    each kernel built is logged as ``("build", name)`` in `calls`."""
    elementwise, reduction = compute or numpy_compute(fused_by_name, calls)

    class Elementwise(ElementwiseKernel):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            calls.append(("build", self.name))

        def compute(self, ins, outs):
            elementwise(self, ins, outs)

    class Reduction(ReductionKernel):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            calls.append(("build", self.name))

        def compute(self, ins, out, axis, keepdims):
            reduction(self, ins, out, axis, keepdims)

    cp = types.ModuleType("numpy")  # kernels take NumPy's paths for a module named numpy
    cp.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    cp.ElementwiseKernel, cp.ReductionKernel = Elementwise, Reduction
    cp.asnumpy = np.asarray
    stream = types.SimpleNamespace(synchronize=lambda: None)
    cp.cuda = types.SimpleNamespace(
        MemoryHook=MemoryHook, get_current_stream=lambda: stream,
        memory_hook=types.SimpleNamespace(MemoryHook=MemoryHook,
                                          get_memory_hooks=get_memory_hooks),
        compiler=types.SimpleNamespace(CompileException=CompileException),
        memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
    return cp
