"""Whole derivative matrices and derivative checks for the library: `jacfwd`, `jacrev`,
`auto_jacobian` (whichever of the two needs fewer sweeps, as ``adc jacobian``), `hessian` and
`check_grads`.

Each matrix is assembled from the compiled one-direction programs of `transforms`: `jacfwd`
runs the tangent program once per differentiated input element, `jacrev` the pullback once
per output element, `hessian` the Hessian-vector product once per input element. A block
has shape ``result.shape + input.shape`` (``input.shape + input.shape`` for the Hessian).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .program import DEFAULT_PASSES, Source
from ..diagnostics import AdcError
from .derive import primal
from .transforms import hvp, jvp, vjp
from .wrt import Wrt, require_scalar, wrt_shape

__all__ = ["jacfwd", "jacrev", "auto_jacobian", "hessian", "check_grads"]


def _basis(shape: tuple, dtype) -> Any:
    """The unit arrays of `shape`, one per element, in C order."""
    n = int(np.prod(shape, dtype=np.int64))
    for i in range(n):
        e = np.zeros(n, dtype=dtype)
        e[i] = 1
        yield e.reshape(shape)


def _float_dtype(a) -> np.dtype:
    a = np.asarray(a)
    return a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)


class Matrix:
    """A callable assembling a derivative matrix from a compiled one-direction program
    (`inner`, a `Compiled`); `.mode` says which sweeps it runs."""

    def __init__(self, inner, assemble, mode: str, names: list[str], inputs: list[str]):
        self.inner, self._assemble, self.mode = inner, assemble, mode
        self.wrt, self.inputs = names, inputs

    @property
    def module(self):
        return self.inner.module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .transforms import Compiled
        named = Compiled.bind(self, args, kwargs)   # the same checks as any call
        return self._assemble(named)

    fn_name = property(lambda self: self.inner.fn_name)

    def __repr__(self) -> str:
        return f"<{self.mode} Jacobian of {self.inner.fn_name}>"


def _nest(blocks: dict, results: list[int], wrt_single: bool, n_results: int, names):
    """Blocks keyed (result, input) -> one array, a tuple over inputs, a tuple over results
    of those (as JAX's jacfwd/jacrev of a function with several results)."""
    def per_result(k):
        row = [blocks[(k, w)] for w in names]
        return row[0] if wrt_single else tuple(row)
    if n_results == 1:
        return per_result(results[0])
    return tuple(per_result(k) if k in results else None for k in range(n_results))


def jacfwd(program: Source, fn: str | None = None, wrt: Wrt = None, *,
           argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
           dtype: str | None = None, device: str = "cpu",
           dims: Mapping[str, int] | None = None) -> Matrix:
    """The Jacobian by forward mode: one JVP per differentiated input element."""
    module, f = primal(program, fn, dtype)
    shape = wrt_shape(f, wrt, argnums)
    tangent = jvp(module, f.name, shape.names, passes=passes, device=device, dims=dims)
    n = len(f.result_types)
    floats = [k for k, t in enumerate(f.result_types) if t.is_float]

    def assemble(named):
        x = {w: np.asarray(named[w]) for w in shape.names}
        zeros = {f"t_{w}": np.zeros(x[w].shape, _float_dtype(x[w])) for w in shape.names}
        value, _ = tangent(**named, **zeros)     # the results' shapes, for empty inputs too
        shapes = [np.shape(o) for o in (value if n > 1 else (value,))]
        blocks = {}
        for w in shape.names:
            columns = []
            for e in _basis(x[w].shape, _float_dtype(x[w])):
                _, t = tangent(**named, **{**zeros, f"t_{w}": e})
                columns.append(t if n > 1 else (t,))
            for k in floats:
                cols = [np.asarray(c[k]) for c in columns]
                stacked = np.stack(cols, axis=-1) if cols else np.zeros(shapes[k] + (0,))
                blocks[(k, w)] = stacked.reshape(shapes[k] + x[w].shape)
        return _nest(blocks, floats, shape.style == "one", n, shape.names)
    return Matrix(tangent, assemble, "forward", shape.names, f.arg_names)


def jacrev(program: Source, fn: str | None = None, wrt: Wrt = None, *,
           argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
           remat: str | None = None, dtype: str | None = None, device: str = "cpu",
           dims: Mapping[str, int] | None = None) -> Matrix:
    """The Jacobian by reverse mode: one VJP per float output element."""
    module, f = primal(program, fn, dtype)
    shape = wrt_shape(f, wrt, argnums)
    pull = vjp(module, f.name, shape.names, passes=passes, remat=remat, device=device,
               dims=dims)
    n = len(f.result_types)
    floats = [k for k, t in enumerate(f.result_types) if t.is_float]

    def assemble(named):
        x = {w: np.asarray(named[w]) for w in shape.names}
        outs, pullback = pull(**named)
        outs = [np.asarray(o) for o in (outs if n > 1 else (outs,))]
        zeros = [np.zeros_like(outs[k]) for k in floats]
        blocks = {}
        for j, k in enumerate(floats):
            rows = []
            for e in _basis(outs[k].shape, outs[k].dtype):
                cts = list(zeros)
                cts[j] = e
                g = pullback(*cts)
                rows.append(g if shape.style == "tuple" else (g,))
            for i, w in enumerate(shape.names):
                r = [np.asarray(row[i]) for row in rows]
                stacked = np.stack(r) if r else np.zeros((0,) + x[w].shape)
                blocks[(k, w)] = stacked.reshape(outs[k].shape + x[w].shape)
        return _nest(blocks, floats, shape.style == "one", n, shape.names)
    return Matrix(pull, assemble, "reverse", shape.names, f.arg_names)


def auto_jacobian(program: Source, fn: str | None = None, wrt: Wrt = None, *,
             argnums: int | Sequence[int] | None = None, mode: str | None = None,
             inputs: Mapping[str, Any] | None = None, **options) -> Matrix:
    """`jacfwd` or `jacrev`, whichever needs fewer runs (`adcompiler.api.jacobian.choose_mode`,
    as ``adc jacobian``): it counts the differentiated input elements against the output
    elements, so it needs example `inputs` to size them (or `mode` to force one)."""
    from .jacobian import choose_mode
    if mode is None:
        if inputs is None:
            raise TypeError("auto_jacobian needs mode='forward'|'reverse', or example inputs= "
                            "to choose by the sizes")
        from .transforms import function
        module, f = primal(program, fn)
        shape = wrt_shape(f, wrt, argnums)
        outs = function(module, f.name)(**inputs)
        outs = outs if len(f.result_types) > 1 else (outs,)
        n_in = sum(np.size(inputs[w]) for w in shape.names)
        n_out = sum(np.size(o) for o, t in zip(outs, f.result_types) if t.is_float)
        mode, _ = choose_mode(n_in, n_out)
    if mode not in ("forward", "reverse"):
        raise ValueError(f"mode must be 'forward' or 'reverse', got {mode!r}")
    build = jacfwd if mode == "forward" else jacrev
    return build(program, fn, wrt, argnums=argnums, **options)


def hessian(program: Source, fn: str | None = None, wrt: Wrt = None, *,
            argnums: int | Sequence[int] | None = None, passes: str = DEFAULT_PASSES,
            remat: str | None = None, dtype: str | None = None, device: str = "cpu",
            dims: Mapping[str, int] | None = None) -> Matrix:
    """The Hessian of a scalar float result: forward over reverse, one Hessian-vector
    product per differentiated input element. For one input, an array of shape
    ``x.shape + x.shape``; for several, ``H[i][j]`` of shape ``x_i.shape + x_j.shape``."""
    module, f = primal(program, fn, dtype)
    require_scalar(f, "hessian")
    shape = wrt_shape(f, wrt, argnums)
    h = hvp(module, f.name, shape.names, passes=passes, remat=remat, device=device, dims=dims)

    def assemble(named):
        x = {w: np.asarray(named[w]) for w in shape.names}
        zeros = {f"t_{w}": np.zeros(x[w].shape, _float_dtype(x[w])) for w in shape.names}
        blocks = {}
        for wj in shape.names:
            cols = []
            for e in _basis(x[wj].shape, _float_dtype(x[wj])):
                out = h(**named, **{**zeros, f"t_{wj}": e})
                cols.append(out if shape.style == "tuple" else (out,))
            for i, wi in enumerate(shape.names):
                c = [np.asarray(col[i]) for col in cols]
                stacked = np.stack(c, axis=-1) if c else np.zeros(x[wi].shape + (0,))
                blocks[(wi, wj)] = stacked.reshape(x[wi].shape + x[wj].shape)
        if shape.style == "one":
            return blocks[(shape.names[0], shape.names[0])]
        return tuple(tuple(blocks[(wi, wj)] for wj in shape.names) for wi in shape.names)
    return Matrix(h, assemble, "forward-over-reverse", shape.names, f.arg_names)


# ---- checks -----------------------------------------------------------------------------

def _rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.max(np.abs(a), initial=0.0), np.max(np.abs(b), initial=0.0), 1e-3)
    return float(np.max(np.abs(a - b), initial=0.0) / scale)


def check_grads(program: Source, inputs: Mapping[str, Any], order: int = 1, *,
                fn: str | None = None, wrt: Wrt = None, eps: float = 1e-6,
                rtol: float = 1e-5, seed: int = 0) -> dict[str, float]:
    """Check the derivatives of `fn` at `inputs` in float64, as JAX's ``check_grads``.

    Along seeded random directions `v` (inputs) and `u` (results), order 1 checks forward
    mode against central differences (``jvp``), reverse mode against the same
    (``vjp``: ``<J^T u, v> = <u, fd>``) and the two against each other (the dot-product
    test ``<u, J v> = <J^T u, v>``). Order 2 also checks the adjoint program itself: its
    Hessian-vector products (forward over reverse) against central differences of the
    gradient. A function whose custom ``grad`` rule has no ``tangent`` rule has no forward
    mode: its forward checks are left out. Raises `AssertionError` naming the failing
    checks; returns the relative error of each check made.
    """
    from .transforms import function, value_and_grad
    from ..ops.random import KEY_INPUT
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    module, f = primal(program, fn, "f64")
    names = list(wrt_shape(f, wrt).names)
    rng = np.random.default_rng(seed)
    x = {a.name: np.asarray(inputs[a.name], np.float64) if a.type.is_float
         else np.asarray(inputs[a.name]) for a in f.args if a.name in inputs
         or a.name != KEY_INPUT}   # the key of random ops: that of seed 0 unless given
    v = {w: rng.standard_normal(x[w].shape) for w in names}
    floats = [k for k, t in enumerate(f.result_types) if t.is_float]

    def central(fun):
        def along(step):
            out = fun(**{**x, **{w: x[w] + step * v[w] for w in names}})
            return out if isinstance(out, tuple) else (out,)
        return [(np.asarray(p, np.float64) - np.asarray(m, np.float64)) / (2 * eps)
                for p, m in zip(along(eps), along(-eps))]

    def dot(a, b):
        return sum(float(np.sum(np.asarray(p) * np.asarray(q))) for p, q in zip(a, b))

    errors: dict[str, float] = {}
    # the derivatives are those of training mode (dropout draws): so are the differences
    fd = [central(function(module, f.name, training=True))[k] for k in floats]
    u = [rng.standard_normal(np.shape(d)) for d in fd]
    _, pullback = vjp(module, f.name, names)(**x)
    g = pullback(*u)
    g = g if isinstance(g, tuple) else (g,)
    back, ahead = dot(g, [v[w] for w in names]), dot(u, fd)
    errors["vjp"] = abs(back - ahead) / max(abs(back), abs(ahead), 1e-3)
    try:
        tangent = jvp(module, f.name, names)
    except AdcError:   # a grad rule without a tangent rule: no forward mode
        tangent = None
    if tangent is not None:
        _, tan = tangent(**x, **{f"t_{w}": v[w] for w in names})
        tan = tan if len(f.result_types) > 1 else (tan,)
        tan = [tan[k] for k in floats]
        errors["jvp"] = max((_rel_err(t, d) for t, d in zip(tan, fd)), default=0.0)
        lhs = dot(u, tan)
        errors["dot product"] = abs(lhs - back) / max(abs(lhs), abs(back), 1e-3)
    if order == 2:
        require_scalar(f, "check_grads(order=2)")
        grads = value_and_grad(module, f.name, names)
        fd2 = central(lambda **kw: tuple(grads(**kw)[1]))
        hv = hvp(module, f.name, names)(**x, **{f"t_{w}": v[w] for w in names})
        errors["hvp"] = max(_rel_err(a, b) for a, b in zip(hv, fd2))
    bad = {k: e for k, e in errors.items() if not e <= rtol}
    if bad:
        raise AssertionError("check_grads failed for '" + f.name + "': " + ", ".join(
            f"{k} relative error {e:.3g} > rtol {rtol:g}" for k, e in bad.items()))
    return errors
