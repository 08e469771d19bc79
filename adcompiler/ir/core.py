"""The IR: typed SSA values, ops with optional regions, functions and modules.

* A `Value` is defined once: by an op (a result) or by a block (an argument).
* An `Op` has a name (a key of the op registry, or one of the structural ops ``call``,
  ``for``, ``yield``, ``return``), operands, attributes (plain Python constants), results,
  nested regions (a tuple of `Block`s, fixed when the op is made) and the source location
  it came from.
* A `Block` is a list of ops with arguments; ops in a block may use values of enclosing
  blocks (implicit capture, as in MLIR's ``scf.for``).
* A `Function` has a body block whose arguments are its inputs; the last op is ``return``.

Loops are ``for`` ops with scan semantics (JAX's ``lax.scan``)::

    results = for(carry_init..., xs...) {n, n_carry, reverse}
        ^(i: i64[], carry..., x_slice...): ... yield(new_carry..., y...)
    results = (final_carry..., stacked_y...)

``xs`` are sliced along axis 0 per iteration and ``y`` are stacked along a new axis 0; with
``reverse = true`` the index ``i`` runs from ``n-1`` down to 0.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..diagnostics import Loc
from .types import TensorType

_ids = itertools.count()


class Value:
    """An SSA value. `name` is a hint for printing (a TDSL variable name), not an identity."""

    __slots__ = ("type", "name", "owner", "index", "uid")

    def __init__(self, type: TensorType, name: str | None = None, owner=None, index: int = 0):
        self.type = type
        self.name = name
        self.owner = owner  # the defining Op or Block
        self.index = index  # position among the owner's results / arguments
        self.uid = next(_ids)

    @property
    def defining_op(self) -> "Op | None":
        return self.owner if isinstance(self.owner, Op) else None

    def __repr__(self) -> str:
        return f"<Value {self.name or ''}#{self.uid}: {self.type}>"


class _NoAttrs(dict):
    """The attrs of every op that has none: one shared empty dict that refuses changes (a
    million ops need no million empty dicts). Give such an op attrs by assigning a new
    dict: ``op.attrs = {**op.attrs, "recompute": True}``."""

    __slots__ = ()

    def _shared(self, *args, **kwargs):
        raise TypeError("the attrs of an op without any are shared: assign a new dict "
                        "(op.attrs = {**op.attrs, key: value}) instead of changing them")

    __setitem__ = __delitem__ = __ior__ = setdefault = update = pop = popitem = clear = _shared

    def __reduce__(self):
        return "NO_ATTRS"  # copied and pickled as the one shared object


NO_ATTRS = _NoAttrs()


class Op:
    """An operation. Structural identity: ops are compared by object identity."""

    __slots__ = ("name", "operands", "attrs", "results", "regions", "loc", "parent")

    def __init__(self, name: str, operands, result_types, attrs: dict | None = None,
                 regions: list["Block"] | None = None, loc: Loc | None = None,
                 result_names=None):
        self.name = name
        self.operands: list[Value] = list(operands)
        self.attrs: dict[str, Any] = dict(attrs) if attrs else NO_ATTRS
        if len(result_types) == 1:  # most ops: no comprehension, no enumerate
            self.results = [Value(result_types[0], result_names[0] if result_names else None,
                                  self, 0)]
        elif result_names:
            self.results = [Value(t, n, self, k)
                            for k, (t, n) in enumerate(zip(result_types, result_names))]
        else:
            self.results = [Value(t, None, self, k) for k, t in enumerate(result_types)]
        if regions:
            self.regions: tuple[Block, ...] = tuple(regions)
            for r in regions:
                r.parent = self
        else:
            # nothing changes an op's regions after it is made, and the ops without any
            # (nearly all) share the empty tuple instead of owning an empty list each: one
            # object fewer per op for the garbage collector to traverse
            self.regions = ()
        self.loc = loc
        self.parent: Block | None = None

    @property
    def fresh(self) -> bool:
        """Whether this op's kernel always returns a new array, never an operand or a view
        of one, as the op's definition declares (`adcompiler.ops.registry`); buffer
        planning in the runtime asks it."""
        from ..ops.registry import returns_new
        return returns_new(self)

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]

    def walk(self) -> Iterator["Op"]:
        """This op, then every op nested in its regions, in order."""
        yield self
        for r in self.regions:
            yield from r.walk()

    def __repr__(self) -> str:
        return f"<Op {self.name} {self.attrs}>"


class Block:
    """A sequence of ops with block arguments (a region with a single block)."""

    def __init__(self, arg_types=(), arg_names=None):
        names = list(arg_names or [None] * len(arg_types))
        self.args = [Value(t, n, self, k) for k, (t, n) in enumerate(zip(arg_types, names))]
        self.ops: list[Op] = []
        self.parent: Op | None = None

    def add_arg(self, type: TensorType, name: str | None = None) -> Value:
        v = Value(type, name, self, len(self.args))
        self.args.append(v)
        return v

    def append(self, op: Op) -> Op:
        op.parent = self
        self.ops.append(op)
        return op

    def insert(self, index: int, op: Op) -> Op:
        op.parent = self
        self.ops.insert(index, op)
        return op

    @property
    def terminator(self) -> Op | None:
        from ..ops.registry import has_trait
        return self.ops[-1] if self.ops and has_trait(self.ops[-1], "terminator") else None

    def walk(self) -> Iterator[Op]:
        for op in self.ops:
            yield from op.walk()


@dataclass
class Function:
    """A function: `body.args` are its inputs, the body ends in ``return``.

    `params` names the inputs that reverse mode differentiates by default (TDSL ``param``).
    `attrs` holds e.g. ``grad_of``/``tangent_of`` for custom-derivative rule functions.
    """

    name: str
    body: Block
    result_types: list[TensorType]
    params: set[str] = field(default_factory=set)
    attrs: dict[str, Any] = field(default_factory=dict)
    loc: Loc | None = None

    def __str__(self) -> str:
        from .printer import print_function
        return print_function(self)

    @property
    def args(self) -> list[Value]:
        return self.body.args

    @property
    def arg_names(self) -> list[str]:
        return [a.name for a in self.body.args]

    def arg(self, name: str) -> Value:
        for a in self.body.args:
            if a.name == name:
                return a
        raise KeyError(name)

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    @property
    def returned(self) -> list[Value]:
        return list(self.body.ops[-1].operands)


@dataclass
class Module:
    """An ordered collection of functions.

    Custom derivative rules are functions too, linked by ``attrs["grad_of"]`` /
    ``attrs["tangent_of"]`` to the function they differentiate.
    """

    functions: dict[str, Function] = field(default_factory=dict)

    def __str__(self) -> str:
        """The IR text (`print_module`)."""
        from .printer import print_module
        return print_module(self)

    def _repr_html_(self) -> str:
        import html
        return f"<pre>{html.escape(str(self))}</pre>"

    def add(self, fn: Function) -> Function:
        self.functions[fn.name] = fn
        return fn

    def __getitem__(self, name: str) -> Function:
        return self.functions[name]

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def rule_for(self, fn_name: str, kind: str) -> Function | None:
        """The ``grad`` or ``tangent`` rule function for `fn_name`, if the module has one."""
        for f in self.functions.values():
            if f.attrs.get(f"{kind}_of") == fn_name:
                return f
        return None

    @property
    def main(self) -> Function:
        """The default function to run: the last ordinary (non-rule) function."""
        plain = [f for f in self.functions.values()
                 if "grad_of" not in f.attrs and "tangent_of" not in f.attrs]
        return plain[-1]


def release(op: Op) -> None:
    """Break the reference cycle of `op`, which a pass has taken out of the IR for good,
    with its results (each names `op` its owner): reference counting then frees them as
    soon as the pass lets go of them, instead of the collector later. The results keep
    their owner, as the pass's own tables may still hold them."""
    op.results = []


def blocks(block: Block) -> list[Block]:
    """`block` and every block nested in its ops' regions, each before those inside it (a
    loop over their ops visits each op once, without `walk`'s generator per op)."""
    out, k = [block], 0
    while k < len(out):
        for op in out[k].ops:
            if op.regions:
                out.extend(op.regions)
        k += 1
    return out


def uses(block: Block) -> dict[Value, list[Op]]:
    """Every value used in `block` (nested regions included) mapped to the ops using it."""
    table: dict[Value, list[Op]] = {}
    get = table.get
    for b in blocks(block):
        for op in b.ops:
            for v in op.operands:
                users = get(v)
                if users is None:
                    table[v] = [op]
                else:
                    users.append(op)
    return table


def replace_all_uses(block: Block, mapping: dict[Value, Value]) -> None:
    """Rewrite operands throughout `block` (nested regions included) through `mapping`.

    One walk of `block` per call: collect the replacements first, not a call per value."""
    if not mapping:
        return
    for op in block.walk():
        ops = op.operands
        for k, v in enumerate(ops):
            if v in mapping:
                op.operands = [mapping.get(v, v) for v in ops]
                break


def source_name(name: str) -> str:
    """The name a function has in the program's source: the lowering names a function
    specialized to concrete dims ``f.N4`` and rule functions ``f.grad``, after it."""
    return name.split(".")[0]
