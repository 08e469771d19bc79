"""The op registry: every op declared once with its options, type rule, traits and rules.

An `OpDef` is the single place that knows an op. Passes ask the registry (``get(name)``)
instead of matching op names:

* `infer(types, attrs)` returns the result types (a `TensorType` or a list) or raises
  `ShapeError` with a message; the builder attaches the op's source location.
* `vjp(b, op, cts)` receives a `Builder`, the primal op and one cotangent per result (``None``
  is a symbolic zero) and returns one cotangent per operand (``None`` for none). A returned
  cotangent may have the op's broadcast shape: the reverse driver sums it back to the
  operand's shape, so rules never unbroadcast.
* `jvp(b, op, tangents)` receives one tangent per operand (``None`` is a symbolic zero) and
  returns one tangent per result.
* `flops`: FLOPs of one execution. ``None``: one per result element; an int `k`: `k` per
  element of the first operand (0 for data movement); or ``fn(op, elements)`` where
  ``elements(shape)`` counts the elements of a shape (`adcompiler.memory.flops`).
* `cuda`: how a fused CUDA kernel computes the op, ``fn(writer, op) -> local name``
  (`adcompiler.emit.c`), or ``None``: then fusion leaves the op alone. A reduction that may
  close a fused group has `cuda_reduce` instead (`adcompiler.emit.c.Reduce`).
* `batch(b, op, args, batched, n)`: the op on a batch of `n` examples (the ``batch`` pass,
  `adc.vmap`). `args` are the new operands, `batched[k]` says whether ``args[k]`` carries
  the examples on a leading axis (at least one does; the others are shared by all); returns
  the results, each with the examples on a leading axis. Helpers: `adcompiler.ops.batching`.
* `index_bound(op, size)`: for an op that takes class labels or indices, the operand that
  holds them, its exclusive upper bound (via ``size(value, axis)``) and whether a value
  outside ``[0, bound)`` is an error, else ``None``. `adc run` draws random labels below it.
* `rewrites`: canonicalization patterns rooted at the op (`adcompiler.ops.patterns`), which
  the ``canonicalize`` pass applies to a fixed point.
* `splat(op)`: for a constructor whose elements all equal one number, that number (the
  patterns' `Splat`); ``None`` otherwise.
* `reads_row(op)`: for an op that reads one row (an entry of the first axis) of an array at
  a run-time index, ``(array, index)`` (the ``scan-inputs`` pass turns such reads in a loop
  into scanned inputs); else ``None``.
* `sliced_shape(op)`: for an op that slices an array by its ``idx`` option, the shape of
  that array, whose symbolic axes must be long enough for the slices (the executor checks
  it, and the Python emitter writes the same check).

* `param_role(op, k)`: what operand `k` says about a parameter it reads (a norm's gain or
  bias, a product's weight with its fans, an embedding table, an addend; `ops.roles`), for
  initialization by role (`adcompiler.training.init`); None: nothing.

* `fresh`: whether the op's kernel always returns a new array, never an operand or a view
  of one (NumPy and CuPy alike): True, False (the default: it may alias, which is always
  safe), or ``fn(op) -> bool`` deciding per IR op. Buffer planning reads it through the IR
  op (`Op.fresh`), so the runtime learns it without importing the compiler.

Traits: ``literal`` (a scalar constant: its ``value`` option), ``elementwise`` (result
broadcasts its operands), ``linear`` (in its float operands), ``no_grad`` (derivative zero
or undefined: comparisons, rounding, integer ops),
``commutative``, ``reduction``, ``constructor`` (no tensor operands), ``view`` (a view or
re-indexing of its first operand, no arithmetic: the reverse of a loop rebuilds it rather
than storing it), ``heavy`` (its arithmetic dominates its memory traffic, as in a matrix
product: the ``mincut`` baseline never recomputes it), ``impure`` (never
removed or merged; no op is impure today).

Structural ops (``for``, ``repeat``, ``call``, ``yield``, ``return``, ``fused``;
`adcompiler.ops.control`) are registered in `STRUCTURAL`, apart from `REGISTRY` (the ops a
program calls and a kernel computes), with the traits generic passes ask: ``terminator``
(ends a block; never removed), ``loop`` (a ``for`` with its body region), ``counted`` (a
``repeat``), ``calls`` (runs a function of the module), ``group`` (a region that runs as one
kernel). `lookup` finds either kind. Their rule slots take the asking pass's context, since
a region's rule recurses through that pass (the rules: `adcompiler.ops.structural`):

* `verify(checker, op)`: the op's structural checks (`adcompiler.ir.verifier`);
* `ends`: for a terminator, the block it ends, ``"function"`` or ``"region"``;
* `flops(op, counter)`: FLOPs of one execution (`adcompiler.memory.flops`);
* `memory(walk, op)`: the live bytes its regions or callee add (`adcompiler.memory.liveness`);
* `dce(op, need, effects)`: prune the op's region, returning the values it still reads
  (`adcompiler.passes.dce`; default: sweep each region);
* `reverse(b, op, out_cts, cts, module)`: the cotangents of the op's operands from those of
  its results, given the cotangent environment `cts` (`adcompiler.passes.reverse`);
* `forward(tb, op, tangents)`: emit the op, or its replacement, and the tangents of its
  results through the tangent builder `tb` (`adcompiler.passes.jvp`).
* `batch(batcher, b, op)`: emit the op over a batch of examples at the builder `b`, through
  the pass's `Batcher` (`adcompiler.passes.batch`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..diagnostics import ShapeError

REQUIRED = object()


@dataclass(frozen=True)
class Option:
    """A keyword option of an op. `kind` says what constant it takes:

    ``int``, ``float``, ``bool``, ``str``, ``dtype``, ``axes`` (int, list of ints or None),
    ``ints`` (list of ints), ``shape`` (list of dims; ints or symbolic names), ``dim``
    (one dimension), ``number`` (int or float), ``spatial`` (an int or one per spatial
    axis), ``padding`` (as spatial, or a string), ``idx`` (an index list). `problem`
    checks a value against the kind.
    """

    name: str
    kind: str
    default: Any = REQUIRED

    def problem(self, value) -> str | None:
        """What is wrong with `value` for this option's kind (None: nothing): the check
        of the kind alone, before the type rule checks the value against the operands
        (an IR file may hold any value, e.g. ``keepdims = "yes"``)."""
        if value is None and self.default is None:
            return None
        ok = _KINDS.get(self.kind)
        if ok is None or ok[0](value):
            return None
        return f"option '{self.name}' must be {ok[1]}, got {_shown(value)}"


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _dim(v) -> bool:
    if _int(v):
        return v >= 0
    if not isinstance(v, str):
        return False
    from ..ir.types import parse_dim
    try:
        parse_dim(v)
    except ValueError:
        return False
    return True


def _ints(v) -> bool:
    return isinstance(v, (list, tuple)) and all(map(_int, v))


def _shown(v) -> str:
    text = repr(v) if not isinstance(v, str) else '"' + v + '"'
    return text if len(text) <= 60 else text[:57] + "..."


_DTYPE_NAMES = ("f16", "f32", "f64", "i32", "i64", "bool")
# kind -> (test, what it takes); kinds whose values only the type rule can judge (an
# index list, say) test their outer form only
_KINDS = {
    "int": (_int, "an int"),
    "float": (_real, "a number"),
    "number": (lambda v: _real(v) or isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "dtype": (lambda v: v in _DTYPE_NAMES and isinstance(v, str),
              "a dtype (" + ", ".join(_DTYPE_NAMES) + ")"),
    "axes": (lambda v: v is None or _int(v) or _ints(v), "an int, a list of ints or none"),
    "ints": (_ints, "a list of ints"),
    "shape": (lambda v: isinstance(v, (list, tuple))
              and all(_dim(d) or d == -1 and _int(d) for d in v),
              "a list of dimensions (ints >= 0, symbolic sizes, or -1 for one to infer)"),
    "dim": (_dim, "a dimension (an int >= 0 or a symbolic size)"),
    "spatial": (lambda v: _int(v) or _ints(v), "an int or a list of ints"),
    "padding": (lambda v: _int(v) or _ints(v) or isinstance(v, str),
                'an int, a list of ints, "same" or "valid"'),
    "idx": (lambda v: isinstance(v, (list, tuple)), "an index list"),
}


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: Callable
    operands: tuple[str, ...] = ("x",)   # operand names; ``*`` before a name: a list operand
    options: tuple[Option, ...] = ()
    traits: frozenset = field(default_factory=frozenset)
    vjp: Callable | None = None
    jvp: Callable | None = None
    doc: str = ""
    positional: tuple[str, ...] | None = None  # TDSL positional order, if not operands+options
    flops: Any = None
    cuda: Callable | None = None
    cuda_reduce: Any = None
    index_bound: Callable | None = None
    batch: Callable | None = None
    rewrites: tuple = ()
    splat: Callable | None = None
    reads_row: Callable | None = None
    sliced_shape: Callable | None = None
    fresh: Any = False
    verify: Callable | None = None   # the structural ops' slots (see the module doc)
    ends: str | None = None
    memory: Callable | None = None
    dce: Callable | None = None
    reverse: Callable | None = None
    forward: Callable | None = None
    param_role: Callable | None = None  # (op, k) -> (role, fans) | None (`rules.roles`)

    @property
    def signature(self) -> tuple[str, ...]:
        """The order in which TDSL positional arguments fill operands and options."""
        return self.positional or self.operands + tuple(o.name for o in self.options)

    @property
    def variadic(self) -> bool:
        return any(o.startswith("*") for o in self.operands)

    def has(self, trait: str) -> bool:
        return trait in self.traits

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def complete_attrs(self, attrs: dict) -> dict:
        """`attrs` with defaults filled in; unknown or missing options raise `ShapeError`."""
        for key in attrs:
            if self.option(key) is None:
                known = ", ".join(o.name for o in self.options) or "none"
                raise ShapeError(f"{self.name} has no option '{key}' (options: {known})")
        out = {}
        for o in self.options:
            if o.name in attrs:
                out[o.name] = attrs[o.name]
            elif o.default is REQUIRED:
                raise ShapeError(f"{self.name} needs the option '{o.name}'")
            else:
                out[o.name] = o.default
        return out


REGISTRY: dict[str, OpDef] = {}


def register(name: str, infer: Callable, *, operands=("x",), options=(), traits=(),
             vjp=None, jvp=None, doc: str = "", positional=None, flops=None, cuda=None,
             cuda_reduce=None, index_bound=None, batch=None, rewrites=(), splat=None,
             reads_row=None, sliced_shape=None, fresh=False, param_role=None) -> OpDef:
    """Declare an op with every fact about it. Re-registering a name is an error: one op,
    one place."""
    if name in REGISTRY:
        raise ValueError(f"op {name!r} is already registered")
    if any(p.match.name != name for p in rewrites):
        raise ValueError(f"a rewrite of {name!r} must match {name!r} at its root")
    d = OpDef(name, infer, tuple(operands), tuple(options), frozenset(traits), vjp, jvp, doc,
              tuple(positional) if positional else None, flops, cuda, cuda_reduce,
              index_bound, batch, tuple(rewrites), splat, reads_row, sliced_shape, fresh,
              param_role=param_role)
    REGISTRY[name] = d
    return d


STRUCTURAL: dict[str, OpDef] = {}


def register_structural(name: str, *, traits=(), doc: str = "", verify=None, ends=None,
                        flops=0, memory=None, dce=None, reverse=None, forward=None,
                        batch=None) -> OpDef:
    """Declare a structural op with its traits and rule slots (see the module doc)."""
    if name in STRUCTURAL or name in REGISTRY:
        raise ValueError(f"op {name!r} is already registered")
    if verify is None:
        raise ValueError(f"structural op {name!r} needs a verify rule")

    def infer(types, attrs):
        raise ShapeError(f"'{name}' is structural: its types come from its regions")
    d = OpDef(name, infer, operands=("*operands",), traits=frozenset(traits), doc=doc,
              flops=flops, verify=verify, ends=ends, memory=memory, dce=dce,
              reverse=reverse, forward=forward, batch=batch)
    STRUCTURAL[name] = d
    return d


class Rule:
    """A rule slot that imports its function on first use: structural rules build IR and
    recurse through passes, whose modules import this registry."""

    def __init__(self, module: str, name: str):
        self.module, self.name, self.fn = module, name, None

    def __call__(self, *args, **kwargs):
        if self.fn is None:
            from importlib import import_module
            self.fn = getattr(import_module(self.module), self.name)
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Rule({self.module}.{self.name})"


def terminator(ends: str) -> str:
    """The name of the op that ends a block of kind `ends` (``"function"``, ``"region"``)."""
    return next(d.name for d in STRUCTURAL.values() if d.ends == ends)


def ends(op, kind: str) -> bool:
    """Whether the IR op `op` is the terminator of a block of kind `kind`."""
    d = STRUCTURAL.get(op.name)
    return d is not None and d.ends == kind


def lookup(name: str) -> OpDef | None:
    """The definition of op `name`, structural or not; None if there is none."""
    return REGISTRY.get(name) or STRUCTURAL.get(name)


def has_trait(op, trait: str) -> bool:
    """Whether the IR op `op` has `trait` (False for an op nobody registered)."""
    d = REGISTRY.get(op.name) or STRUCTURAL.get(op.name)  # `lookup`, inlined: a hot path
    return d is not None and trait in d.traits


def names_with(*traits: str, structural: bool = True) -> frozenset[str]:
    """The names of the ops with any of `traits`: registry ops, and structural ones unless
    `structural` is False. A pass tests each op's name against this set once, instead of
    looking its definition up per op."""
    defs = {**REGISTRY, **STRUCTURAL} if structural else REGISTRY
    return frozenset(n for n, d in defs.items() if any(t in d.traits for t in traits))


def returns_new(op) -> bool:
    """Whether the kernel of the IR op `op` always returns a new array (its `fresh`)."""
    d = REGISTRY.get(op.name)
    fresh = d.fresh if d is not None else False
    return bool(fresh(op)) if callable(fresh) else bool(fresh)


def get(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ShapeError(f"unknown op '{name}'") from None
