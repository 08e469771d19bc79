"""The public transforms (`adc.grad`, `adc.jit`, `adc.vmap`, ...): a `Module`, a path or
TDSL text goes to the transforms of programs (`transforms`, `derivatives`, `vectorize`); a
Python function is a transform of Python functions: compiled on the first call for the arguments' dtypes and
shapes (and the values of their compile-time arguments), then cached per signature, as
``jax.jit`` does.

    g = adc.grad(loss, argnums=0)        # nothing compiled yet
    g(params, x, y)                       # compiled for these shapes, run; later calls run

Arguments may be pytrees (nested dicts, lists and tuples of arrays): the function is
compiled with one input per leaf (`adcompiler.frontend.python.pytree`), and gradients come
back in the structure of the argument they belong to (None at a compile-time leaf).
"""
from __future__ import annotations

import inspect
from typing import Any, Sequence

import numpy as np

from ..diagnostics import AdcError
from ..frontend.python import bind_arguments, compile_specialized, entry_specs, pytree
from ..frontend.python.callees import Slot

KINDS = ("function", "grad", "value_and_grad", "vjp", "jvp", "hvp", "jacfwd", "jacrev",
         "hessian")


def is_python_function(program) -> bool:
    return inspect.isfunction(program)


def fill(template, outs: list):
    """What a function returned: its structure with each `Slot` replaced by its output."""
    leaves, tree = pytree.flatten(template)
    return pytree.unflatten(tree, [outs[x.k] if isinstance(x, Slot) else x for x in leaves])


class Entry:
    """One specialization: the compiled transform and how to map arguments and outputs."""

    def __init__(self, transform: "PyTransform", specs, module, spec):
        self.specs, self.module, self.spec = specs, module, spec
        self.inputs = [n for names in spec.inputs for n in names]
        self.argnums = transform.positions(specs)
        self.wrt = []
        for k in self.argnums:
            ps = specs[k]
            names = iter(spec.inputs[k])
            for lf in ps.leaves:
                if lf.runtime:
                    name = next(names)
                    if lf.type.is_float:
                        self.wrt.append(name)
        self.compiled = transform.build(self)

    def grads(self, values: list):
        """The gradients (in `self.wrt` order), packed per differentiated argument."""
        it = iter(values)
        out = []
        for k in self.argnums:
            ps = self.specs[k]
            leaves = [next(it) if lf.runtime and lf.type.is_float else None
                      for lf in ps.leaves]
            out.append(pytree.unflatten(ps.tree, leaves))
        return out

    def flat_tangents(self, trees) -> list:
        """One array per differentiated leaf, from one pytree per differentiated argument."""
        out = []
        for k, t in zip(self.argnums, trees):
            ps = self.specs[k]
            leaves, tree = pytree.flatten(t)
            if tree != ps.tree:
                raise TypeError(f"the tangent of argument '{ps.name}' has the structure "
                                f"{pytree.describe(tree)}, not {pytree.describe(ps.tree)}")
            out += [x for x, lf in zip(leaves, ps.leaves) if lf.runtime and lf.type.is_float]
        return out


class PyTransform:
    """`kind` of Python function `f` (a callable; see the module docstring)."""

    def __init__(self, f, kind: str, argnums=0, has_aux: bool = False, **options: Any):
        if not inspect.isfunction(f):
            raise TypeError(f"expected a Python function, got {type(f).__name__}")
        self.f, self.kind, self.argnums, self.has_aux = f, kind, argnums, has_aux
        self.options = options
        self.cache: dict = {}
        self.by_shapes: dict = {}   # (dtype, shape) of each positional array -> Entry
        self.__name__ = getattr(f, "__name__", "f")
        self.__doc__ = getattr(f, "__doc__", None)
        self.__wrapped__ = f

    @property
    def n_tangents(self) -> int:
        if self.kind not in ("jvp", "hvp"):
            return 0
        return 1 if isinstance(self.argnums, int) else len(self.argnums)

    def positions(self, specs) -> list[int]:
        if self.kind == "function":
            return []
        nums = [self.argnums] if isinstance(self.argnums, int) else list(self.argnums)
        for k in nums:
            if not isinstance(k, int) or not -len(specs) <= k < len(specs):
                raise TypeError(f"argnums: {k!r} is not an argument position of "
                                f"'{self.__name__}' ({len(specs)} arguments)")
        out = [k % len(specs) for k in nums]
        for k in out:
            ps = specs[k]
            if not any(lf.runtime and lf.type.is_float for lf in ps.leaves):
                raise AdcError(f"argument '{ps.name}' of '{self.__name__}' has no float "
                               "array to differentiate (ints, bools and Python ints are not "
                               "differentiable)")
        return out

    def entry(self, args: tuple, kwargs: dict):
        # the common call, positional NumPy arrays only, skips binding and flattening: its
        # specialization is found by the arrays' dtypes and shapes alone
        plain = not kwargs and all(type(a) is np.ndarray for a in args)
        if plain:
            quick = tuple((a.dtype, a.shape) for a in args)
            entry = self.by_shapes.get(quick)
            if entry is not None:
                return entry, list(args)
        bound = bind_arguments(self.f, args, kwargs)
        specs, values = entry_specs(bound)
        key = tuple(s.key() for s in specs)
        entry = self.cache.get(key)
        if entry is None:
            module, spec = compile_specialized(self.f, specs)
            entry = self.cache[key] = Entry(self, specs, module, spec)
        if plain and len(values) == len(args) and all(v is a for v, a in zip(values, args)):
            self.by_shapes[quick] = entry   # the arrays are the inputs, as they are
        return entry, values

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        n = self.n_tangents
        if n:
            if len(args) < n:
                raise TypeError(f"{self.kind} of '{self.__name__}' takes the arguments, then "
                                f"{n} tangent(s)")
            args, tangents = args[:-n], args[-n:]
        entry, values = self.entry(args, kwargs)
        named = dict(zip(entry.inputs, values))
        if n:
            flat = entry.flat_tangents(tangents)
            named.update({f"t_{w}": t for w, t in zip(entry.wrt, flat)})
        return self.finish(entry, named)

    # ---- per kind ------------------------------------------------------------------------
    def build(self, e: Entry):
        from . import derivatives, transforms
        name, opts = e.spec.name, self.options
        if self.kind == "function":
            return transforms.function(e.module, name, **opts)
        if self.kind in ("grad", "value_and_grad"):
            if self.has_aux and not (isinstance(e.spec.template, tuple) and
                                     len(e.spec.template) == 2 and
                                     isinstance(e.spec.template[0], Slot)):
                raise AdcError(f"has_aux=True needs '{self.__name__}' to return a pair "
                               "(value, aux)")
            return transforms.value_and_grad(e.module, name, list(e.wrt),
                                             has_aux=self.has_aux, **opts)
        if self.kind in ("vjp", "jvp", "hvp"):
            return getattr(transforms, self.kind)(e.module, name, list(e.wrt), **opts)
        for k in e.argnums:
            if e.specs[k].tree != pytree.LEAF:
                raise AdcError(f"{self.kind} of a pytree argument ('{e.specs[k].name}') is "
                               "not supported; pass its arrays as arguments")
        wrt = e.wrt[0] if isinstance(self.argnums, int) else list(e.wrt)
        return getattr(derivatives, self.kind)(e.module, name, wrt, **opts)

    def finish(self, e: Entry, named: dict, compiled=None):
        c, kind = compiled or e.compiled, self.kind
        if kind in ("jacfwd", "jacrev", "hessian"):
            return c(**named)
        if kind == "vjp":
            return self.vjp_finish(e, named, c)
        outs = c.call(named)
        n = len(e.module[e.spec.name].result_types)
        if kind == "function":
            return fill(e.spec.template, outs)
        if kind == "jvp":
            return fill(e.spec.template, outs[:n]), fill(e.spec.template, outs[n:])
        grads = e.grads(outs[len(outs) - len(e.wrt):])
        grads = grads[0] if isinstance(self.argnums, int) else tuple(grads)
        if kind == "hvp":
            return grads
        value = fill(e.spec.template, outs[:n])
        if kind == "grad":
            return (grads, value[1]) if self.has_aux else grads
        return value, grads

    def vjp_finish(self, e: Entry, named: dict, c):
        value = c.call(named)
        n = len(e.module[e.spec.name].result_types)
        floats = [k for k, t in enumerate(e.module[e.spec.name].result_types) if t.is_float]
        out = fill(e.spec.template, value[:n])
        adjoint = c.adjoint

        def pullback(ct):
            leaves, tree = pytree.flatten(ct)
            if len(leaves) != n:
                raise TypeError(f"the cotangent must have the structure of the result "
                                f"({n} arrays), got {len(leaves)}")
            cts = [leaves[k] for k in floats]
            res = adjoint.call({**named, **dict(zip(c.ct_names, cts))})
            grads = e.grads(res[len(res) - len(e.wrt):])
            return grads[0] if isinstance(self.argnums, int) else tuple(grads)
        return out, pullback

    def lower(self, *args: Any, **kwargs: Any):
        """The IR module compiled for these arguments (without running it)."""
        entry, _ = self.entry(args[:len(args) - self.n_tangents] if self.n_tangents else args,
                              kwargs)
        return entry.compiled.module if hasattr(entry.compiled, "module") else entry.module

    def __repr__(self) -> str:
        return f"<adc.{self.kind} of Python function {self.__name__}>"


def vmap_python(inner, in_axes=0, **options):
    """`vmap` of a Python function or a transform of one: see `PyVmap`."""
    if not isinstance(inner, PyTransform):
        inner = PyTransform(inner, "function", **options)
    return PyVmap(inner, in_axes)


class PyVmap:
    """`inner` mapped over a batch axis of its arguments: `in_axes` is an int or None for
    all arguments, or one per positional argument (an int, None, or a pytree of them
    matching the argument). Compiled per example shape, then batched by the ``batch``
    pass (one program run for the whole batch)."""

    def __init__(self, inner: PyTransform, in_axes):
        self.inner, self.in_axes = inner, in_axes
        self.cache: dict = {}
        self.__name__ = inner.__name__

    def axes_for(self, args: tuple) -> list:
        if self.in_axes is None or isinstance(self.in_axes, int):
            return [self.in_axes] * len(args)
        axes = list(self.in_axes)
        if len(axes) != len(args):
            raise TypeError(f"in_axes has {len(axes)} entries for {len(args)} arguments")
        return axes

    def __call__(self, *args: Any) -> Any:
        from .vectorize import vmap
        from .axes import prefix_leaves
        axes = self.axes_for(args)
        examples, batched = [], []
        for k, (a, ax) in enumerate(zip(args, axes)):
            leaves, tree = pytree.flatten(a)
            ax_leaves = prefix_leaves(ax, a, f"[{k}]")
            ex = [_Example(x, k) if k is not None else x for x, k in zip(leaves, ax_leaves)]
            examples.append(pytree.unflatten(tree, ex))
            batched += [k for k in ax_leaves]
        n = self.inner.n_tangents
        entry, _ = self.inner.entry(tuple(examples[:len(examples) - n]), {})
        key = (id(entry), tuple(batched))
        c = self.cache.get(key)
        if c is None:
            flat_inputs = list(entry.inputs) + [f"t_{w}" for w in entry.wrt]
            flat_axes = [k for k in batched]
            in_axes = {name: k for name, k in zip(flat_inputs, flat_axes) if k is not None}
            c = self.cache[key] = vmap(entry.compiled, in_axes=in_axes)
        values = [x for a in args for x in pytree.flatten(a)[0]]
        named = dict(zip(list(entry.inputs) + [f"t_{w}" for w in entry.wrt], values))
        return self.inner.finish(entry, named, c)


class _Example:
    """An array's example along batch axis `axis`: its dtype and its shape without that
    axis (what a compilation needs, without slicing the data)."""

    def __init__(self, x, axis: int):
        a = np.asarray(x)
        if not -a.ndim <= axis < max(a.ndim, 1):
            raise TypeError(f"in_axes: axis {axis} is out of range for an array of rank "
                            f"{a.ndim}")
        self.dtype = a.dtype
        self.shape = a.shape[:axis % a.ndim] + a.shape[axis % a.ndim + 1:]
        self.ndim = len(self.shape)

    def __array__(self, *a, **k):
        raise TypeError("an example shape has no data")


def wrap(kind: str, f, argnums: int | Sequence[int] | None = None, has_aux: bool = False,
         wrt=None, fn=None, **options):
    """The transform `kind` of Python function `f` (what the transforms call)."""
    if wrt is not None or fn is not None:
        raise TypeError(f"{kind} of a Python function takes argnums=, not wrt= or fn=")
    return PyTransform(f, kind, 0 if argnums is None else argnums, has_aux, **options)


def python_aware(kind: str, tdsl_transform):
    """`tdsl_transform` (a transform of TDSL programs) that also takes a Python function:
    then it is the `kind` transform of that function, compiled on its first call."""
    import functools

    @functools.wraps(tdsl_transform)
    def transform(program, *args, **kwargs):
        if not is_python_function(program) and not (kind == "vmap" and
                                                    isinstance(program, PyTransform)):
            return tdsl_transform(program, *args, **kwargs)
        if kind == "vmap":
            return vmap_python(program, *args, **kwargs)
        if args:
            raise TypeError(f"{kind} of a Python function takes keyword options only "
                            "(argnums=, has_aux=, ...)")
        return wrap(kind, program, **kwargs)
    return transform


# ---- the public transforms: programs and Python functions alike -----------------------

from . import derivatives as _derivatives, transforms as _transforms  # noqa: E402
from .vectorize import vmap as _vmap  # noqa: E402

function = python_aware("function", _transforms.function)
jit = function
value_and_grad = python_aware("value_and_grad", _transforms.value_and_grad)
grad = python_aware("grad", _transforms.grad)
vjp = python_aware("vjp", _transforms.vjp)
jvp = python_aware("jvp", _transforms.jvp)
hvp = python_aware("hvp", _transforms.hvp)
jacfwd = python_aware("jacfwd", _derivatives.jacfwd)
jacrev = python_aware("jacrev", _derivatives.jacrev)
hessian = python_aware("hessian", _derivatives.hessian)
vmap = python_aware("vmap", _vmap)
