"""NumPy's shape functions and array constructors as TDSL (see `numpy_table`)."""
from __future__ import annotations

import numpy as np

from .calls import method, numpy_fn
from .values import Tensor, as_dtype, has_tensor, is_number, plain_number

# ---- reshaping ------------------------------------------------------------------------------


def _shape_arg(self, shape, call):
    shape = (shape,) if is_number(shape) else shape
    if has_tensor(shape) or not isinstance(shape, (tuple, list)) or not all(
            is_number(d) and isinstance(plain_number(d), int) for d in shape):
        raise self.src.error(f"{call.name}(): the shape must be integers known at compile "
                             "time", call.node)
    return tuple(int(d) for d in shape)


@numpy_fn(np.reshape, sig="a, newshape")
def _reshape(self, a, call):
    return self.op("reshape", [self.array(a["a"], call)], call,
                   shape=_shape_arg(self, a["newshape"], call))


@method("reshape", sig="a, *shape")
def _reshape_method(self, a, call):
    shape = a["shape"]
    if len(shape) == 1:
        shape = shape[0]
    return self.op("reshape", [a["a"]], call, shape=_shape_arg(self, shape, call))


@numpy_fn(np.ravel, sig="a")
def _ravel(self, a, call):
    return self.op("reshape", [self.array(a["a"], call)], call, shape=(-1,))


method("ravel", "flatten", sig="a")(_ravel)


@numpy_fn(np.transpose, sig="a, axes=None")
def _transpose(self, a, call):
    x = self.array(a["a"], call)
    axes = a["axes"]
    if axes is None:
        return self.op("transpose", [x], call)
    return self.op("transpose", [x], call, perm=self.perm(x, axes, call))


@method("transpose", sig="a, *axes")
def _transpose_method(self, a, call):
    axes = a["axes"]
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = axes[0]
    return _transpose(self, {"a": a["a"], "axes": tuple(axes) or None}, call)


@numpy_fn(np.swapaxes, sig="a, axis1, axis2")
def _swapaxes(self, a, call):
    x = self.array(a["a"], call)
    n = self.rank(x, call)
    perm = list(range(n))
    i, j = (self.axis_index(a[k], n, call) for k in ("axis1", "axis2"))
    perm[i], perm[j] = perm[j], perm[i]
    return self.op("transpose", [x], call, perm=tuple(perm))


method("swapaxes", sig="a, axis1, axis2")(_swapaxes)


@numpy_fn(np.moveaxis, sig="a, source, destination")
def _moveaxis(self, a, call):
    x = self.array(a["a"], call)
    n = self.rank(x, call)
    src, dst = self.axis_index(a["source"], n, call), self.axis_index(a["destination"], n, call)
    perm = [k for k in range(n) if k != src]
    perm.insert(dst, src)
    return self.op("transpose", [x], call, perm=tuple(perm))


@numpy_fn(np.expand_dims, sig="a, axis")
def _expand_dims(self, a, call):
    x = self.array(a["a"], call)
    axes = a["axis"] if isinstance(a["axis"], (tuple, list)) else (a["axis"],)
    n = self.rank(x, call) + len(axes)
    for ax in sorted(self.axis_index(ax, n, call) for ax in axes):
        x = self.op("expand_dims", [x], call, axis=ax)
    return x


@numpy_fn(np.squeeze, sig="a, axis=None")
def _squeeze(self, a, call):
    x = self.array(a["a"], call)
    axis = a["axis"]
    if axis is None:
        axis = tuple(k for k, d in enumerate(self.shape(x, call)) if d == 1)
        if not axis:
            return x
    return self.op("squeeze", [x], call, axis=self.axes(axis, call))


method("squeeze", sig="a, axis=None")(_squeeze)


@numpy_fn(np.broadcast_to, sig="array, shape")
def _broadcast_to(self, a, call):
    return self.op("broadcast_to", [self.array(a["array"], call)], call,
                   shape=_shape_arg(self, a["shape"], call))


def _sequence(self, seq, call):
    if isinstance(seq, Tensor) or not isinstance(seq, (tuple, list)) or not seq:
        raise self.src.error(f"{call.name}() takes a non-empty tuple or list of arrays",
                             call.node)
    return [self.array(x, call) for x in seq]


@numpy_fn(np.concatenate, sig="arrays, axis=0")
def _concatenate(self, a, call):
    xs = _sequence(self, a["arrays"], call)
    if a["axis"] is None:
        xs = [self.op("reshape", [x], call, shape=(-1,)) for x in xs]
        return self.op("concat", xs, call, axis=0)
    return self.op("concat", xs, call, axis=self.int_option(a["axis"], call))


@numpy_fn(np.stack, sig="arrays, axis=0")
def _stack(self, a, call):
    return self.op("stack", _sequence(self, a["arrays"], call), call,
                   axis=self.int_option(a["axis"], call))


@numpy_fn(np.vstack, sig="tup")
def _vstack(self, a, call):
    xs = _sequence(self, a["tup"], call)
    if all(self.rank(x, call) == 1 for x in xs):
        return self.op("stack", xs, call, axis=0)
    return self.op("concat", xs, call, axis=0)


@numpy_fn(np.hstack, sig="tup")
def _hstack(self, a, call):
    xs = _sequence(self, a["tup"], call)
    axis = 0 if all(self.rank(x, call) == 1 for x in xs) else 1
    return self.op("concat", xs, call, axis=axis)


# ---- constructors -----------------------------------------------------------------------------

def _dtype(self, d, default, call):
    if d is None:
        return np.dtype(default)
    out = as_dtype(d)
    if out is None:
        raise self.src.error(f"{call.name}(): unsupported dtype {d!r}", call.node)
    return out


def _filled(op: str):
    def handler(self, a, call):
        shape = _shape_arg(self, a["shape"], call)
        return self.op(op, [], call, shape=shape, dtype=_dtype(self, a["dtype"], np.float64,
                                                                   call))
    return handler


numpy_fn(np.zeros, sig="shape, dtype=None")(_filled("zeros"))
numpy_fn(np.ones, sig="shape, dtype=None")(_filled("ones"))


@numpy_fn(np.full, sig="shape, fill_value, dtype=None")
def _full(self, a, call):
    v = a["fill_value"]
    if has_tensor(v):
        return self.op("broadcast_to", [self.cast_default(v, a["dtype"], call)], call,
                       shape=_shape_arg(self, a["shape"], call))
    if not is_number(v) and not isinstance(v, (bool, np.bool_)):
        raise self.src.error("np.full: the fill value must be a number", call.node)
    v = plain_number(v)
    default = np.float64 if isinstance(v, float) else np.bool_ if isinstance(v, bool) \
        else np.int64
    d = _dtype(self, a["dtype"], default, call)
    return self.op("full", [], call, shape=_shape_arg(self, a["shape"], call),
                   value=v if d.kind != "b" else int(v), dtype=d)


def _like(op: str, value=None):
    def handler(self, a, call):
        x = self.array(a["a"], call)
        if a["dtype"] is None and value is None:
            return self.op(op, [x], call)
        t = self.tensor_type(x, call.node)
        from .values import NUMPY_DTYPE
        d = _dtype(self, a["dtype"], NUMPY_DTYPE[t.dtype], call)
        if value is None:
            return self.op(op.replace("_like", ""), [], call, shape=tuple(t.shape), dtype=d)
        v = a[value]
        if has_tensor(v):
            return self.op("broadcast_to", [self.cast(self.array(v, call), d, call)], call,
                           shape=tuple(t.shape))
        return self.op("full", [], call, shape=tuple(t.shape), value=plain_number(v), dtype=d)
    return handler


numpy_fn(np.zeros_like, sig="a, dtype=None")(_like("zeros_like"))
numpy_fn(np.ones_like, sig="a, dtype=None")(_like("ones_like"))
numpy_fn(np.full_like, sig="a, fill_value, dtype=None")(_like("full", "fill_value"))


@numpy_fn(np.empty, np.empty_like, sig="*args")
def _empty(self, a, call):
    raise self.src.error(f"{call.name}() leaves its values undefined; use np.zeros",
                         call.node)


@numpy_fn(np.arange, sig="start, stop=None, step=None, dtype=None")
def _arange(self, a, call):
    bounds = [a["start"]] if a["stop"] is None else [a["start"], a["stop"]]
    if a["step"] is not None:
        bounds.append(a["step"])
    if any(has_tensor(b) or not is_number(b) for b in bounds):
        raise self.src.error("np.arange needs numbers known at compile time", call.node)
    bounds = [plain_number(b) for b in bounds]
    r = np.arange(*bounds)
    d = _dtype(self, a["dtype"], r.dtype if r.dtype in (np.int64, np.float64) else np.float64,
               call)
    start = bounds[0] if len(bounds) > 1 else 0
    step = bounds[2] if len(bounds) > 2 else 1
    out = self.op("arange", [], call, n=len(r), dtype=d if d.kind in "iu" else np.int64)
    if d.kind == "f":
        out = self.cast(out, d, call)
    if step != 1:
        out = self.op("mul", [out, step], call)
    if start != 0:
        out = self.op("add", [out, start], call)
    return out


@numpy_fn(np.eye, sig="N, M=None, k=0, dtype=None")
def _eye(self, a, call):
    n, m = a["N"], a["M"] if a["M"] is not None else a["N"]
    if a["k"] != 0 or not all(is_number(v) for v in (n, m)):
        raise self.src.error("np.eye: only N, M and dtype are supported", call.node)
    d = _dtype(self, a["dtype"], np.float64, call)
    idx = self.op("arange", [], call, n=int(n), dtype=np.int64)
    return self.op("one_hot", [idx], call, n=int(m), dtype=d)


numpy_fn(np.identity, sig="N, dtype=None")(
    lambda self, a, call: _eye(self, {"N": a["N"], "M": None, "k": 0, "dtype": a["dtype"]},
                               call))
