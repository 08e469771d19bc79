"""Checking that a module is well formed; run after every pass in tests.

`verify(module)` raises a `VerifyError` (an `AdcError`) naming the first broken op and its
location; `verify_errors(module)` returns every problem found. Checked:

* SSA: each value is defined once, by the op or block that claims it, and every operand is
  defined earlier in its block or an enclosing block (values of a region are dead after it);
* terminators: function bodies end in ``return`` (types = `result_types`), loop bodies in
  ``yield``; neither appears anywhere else;
* structural ops (``for``, ``repeat``, ``call``, ``fused``, the terminators): their own
  `verify` rule (`adcompiler.ops.structural`), which reports through `_Checker.fail`;
* registry ops: options complete, each of its declared kind (`registry.Option.problem`),
  and result types equal to the op's type rule;
* annotations (``recompute``) are bools; the attributes of functions that passes read
  (`FUNCTION_ATTRS`) hold what each must.
"""
from __future__ import annotations

from ..diagnostics import AdcError
from ..ops import registry
from .core import Block, Function, Module, Op, Value
from .types import TensorType

# Attributes any op may carry besides its options: scheduling marks that passes add and
# type rules ignore (e.g. ops that rematerialization recomputes).
ANNOTATION_ATTRS = {"recompute"}


def _names(v) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)


def _name_map(v, test) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and test(x) for k, x in v.items())


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# The attributes of functions that passes and runners read, and what each holds (others
# are kept as they are and read by nobody)
FUNCTION_ATTRS = {
    "grad_of": (lambda v: isinstance(v, str), "a function name"),
    "tangent_of": (lambda v: isinstance(v, str), "a function name"),
    "adjoint_of": (lambda v: isinstance(v, str), "a function name"),
    "wrt": (_names, "a list of input names"),
    "state": (_names, "a list of input names"),
    "params": (_names, "a list of input names"),
    "batch": (_names, "a list of input names"),
    "outputs": (_names, "a list of names"),
    "model_state": (_names, "a list of input names"),
    "stacked": (lambda v: _name_map(v, lambda d: isinstance(d, (str, int))
                                    and not isinstance(d, bool)),
                "a map of group paths to dimensions"),
    "state_init": (lambda v: _name_map(v, lambda x: isinstance(x, (int, float))),
                   "a map of input names to numbers"),
    "in_place": (lambda v: _name_map(v, _count), "a map of input names to result indices"),
    "borrows_args": (lambda v: isinstance(v, bool), "true or false"),
    "accumulate": (lambda v: _count(v) and v >= 1, "a whole number, at least 1"),
    "allreduce_buckets": (lambda v: isinstance(v, (list, tuple)) and all(map(_names, v)),
                          "a list of lists of names"),
}


class VerifyError(AdcError):
    """Malformed IR: a bug in a pass or a hand-written IR file."""


def verify(module: Module) -> None:
    errors = verify_errors(module)
    if errors:
        raise errors[0]


def verify_errors(module: Module) -> list[VerifyError]:
    checker = _Checker(module)
    for key, f in module.functions.items():
        checker.function(key, f)
    return checker.errors


def types_text(ts) -> str:
    return "(" + ", ".join(str(t) for t in ts) + ")"


class _Checker:
    def __init__(self, module: Module):
        self.module = module
        self.errors: list[VerifyError] = []
        # (name, operand types...) -> result types, for the registry ops without attrs that
        # passed: most ops of a large program repeat a few such signatures, and their type
        # rules need not run again (types are interned, so the key hashes in C)
        self.typed: dict[tuple, list[TensorType]] = {}

    def fail(self, where, message: str) -> None:
        """Record a problem of `where` (an Op or a Function)."""
        text = f"'{where.name}' op {message}" if isinstance(where, Op) else message
        loc = where.loc if where.loc is not None else self.fn.loc
        self.errors.append(VerifyError(f"in @{self.fn.name}: {text}", loc))

    # -- functions and blocks ----------------------------------------------------------
    def function(self, key: str, f: Function) -> None:
        self.fn = f
        self.defined: set[Value] = set()
        self.visible: set[Value] = set()  # the values the op being checked may use
        self.open_blocks: list[Block] = []  # the block being checked and its enclosing ones
        if key != f.name:
            self.fail(f, f"is stored under the name '{key}'")
        for k, (ok, what) in FUNCTION_ATTRS.items():
            if k in f.attrs and not ok(f.attrs[k]):
                self.fail(f, f"attribute '{k}' must be {what}, got {f.attrs[k]!r:.60}")
        names = set(f.arg_names)
        for p in sorted(f.params - names):
            self.fail(f, f"param '{p}' is not an input")
        for kind in ("grad_of", "tangent_of"):
            target = f.attrs.get(kind)
            if target is not None and target not in self.module:
                self.fail(f, f"{kind} names unknown function @{target}")
        self.block(f.body, "function", f)
        term = f.body.ops[-1] if f.body.ops else None
        if term is not None and registry.ends(term, "function"):
            got = [v.type for v in term.operands]
            if got != list(f.result_types):
                self.fail(term, f"returns {types_text(got)} but the function declares "
                                f"{types_text(f.result_types)}")
            if f.attrs.get("borrows_args") and set(term.operands) & set(f.args):
                self.fail(term, "returns an argument of a function that borrows its "
                                "arguments (the caller may still count it)")

    def block(self, block: Block, kind: str, owner) -> None:
        """Check `block`, of kind `kind` (``"function"`` or ``"region"``: the terminator it
        ends in). Its values are visible to its later ops and their regions, and leave
        `self.visible` when it is done (one set for the whole function, not a copy per
        block)."""
        terminator = registry.terminator(kind)
        visible, added = self.visible, []
        self.open_blocks.append(block)
        for k, a in enumerate(block.args):
            self.define(a, block, k, owner)
            if a not in visible:
                visible.add(a)
                added.append(a)
        if not block.ops:
            self.fail(owner, f"has an empty block; it must end in '{terminator}'")
        elif not registry.ends(block.ops[-1], kind):
            self.fail(block.ops[-1], f"ends a block that must end in '{terminator}'")
        for k, op in enumerate(block.ops):
            if op.parent is not block:
                self.fail(op, "has a stale parent block")
            if registry.has_trait(op, "terminator") and (k != len(block.ops) - 1
                                                         or not registry.ends(op, kind)):
                self.fail(op, f"is misplaced: this block must end in '{terminator}' "
                              f"and have no other terminator")
            for i, v in enumerate(op.operands):
                if v not in visible:
                    owner_block = v.owner.parent if isinstance(v.owner, Op) else None
                    where = "later" if owner_block in self.open_blocks else "outside this scope"
                    self.fail(op, f"operand {i} ({v.name or 'unnamed'}: {v.type}) is "
                                  f"defined {where}; it does not dominate this use")
            for r in op.regions:
                if r.parent is not op:
                    self.fail(op, "has a region whose parent is another op")
                self.block(r, "region", op)
            for k2, r in enumerate(op.results):
                self.define(r, op, k2, op)
                if r not in visible:
                    visible.add(r)
                    added.append(r)
            self.op(op)
        visible.difference_update(added)
        self.open_blocks.pop()

    def define(self, v: Value, owner, index: int, where) -> None:
        if v in self.defined:
            self.fail(where, f"redefines value {v.name or 'unnamed'}: {v.type}")
        self.defined.add(v)
        if v.owner is not owner or v.index != index:
            self.fail(where, f"value {v.name or 'unnamed'} has a wrong owner or index")

    # -- ops ---------------------------------------------------------------------------
    def op(self, op: Op) -> None:
        if op.attrs:
            self.annotations(op)
        structural = registry.STRUCTURAL.get(op.name)
        if structural is not None:
            structural.verify(self, op)
        elif op.name in registry.REGISTRY:
            self.registry_op(op, registry.REGISTRY[op.name])
        else:
            self.fail(op, "is not a registered op")

    def annotations(self, op: Op) -> None:
        for k in ANNOTATION_ATTRS & op.attrs.keys():
            if not isinstance(op.attrs[k], bool):
                self.fail(op, f"annotation '{k}' must be true or false, got "
                              f"{op.attrs[k]!r}")

    def registry_op(self, op: Op, opdef: registry.OpDef) -> None:
        if op.regions:
            self.fail(op, "must have no regions")
        key = (op.name, *[v.type for v in op.operands]) if not op.attrs else None
        inferred = self.typed.get(key)
        if inferred is None:
            inferred = self.infer(op, opdef)
            if inferred is None:
                return
        got = [r.type for r in op.results]
        if got != inferred:
            self.fail(op, f"has result types {types_text(got)} but its type rule gives "
                          f"{types_text(inferred)}")
        elif key is not None:
            self.typed[key] = inferred

    def infer(self, op: Op, opdef: registry.OpDef) -> list[TensorType] | None:
        """The result types of `op` by its type rule; None once a problem is reported."""
        if not opdef.variadic and len(op.operands) != len(opdef.operands):
            self.fail(op, f"takes {len(opdef.operands)} operands, got {len(op.operands)}")
            return None
        attrs = {k: v for k, v in op.attrs.items() if k not in ANNOTATION_ATTRS}
        try:
            complete = opdef.complete_attrs(attrs)
        except AdcError as e:
            self.fail(op, e.message)
            return None
        for k, v in attrs.items():
            why = opdef.option(k).problem(v)
            if why:
                self.fail(op, why)
                return None
        missing = [k for k in complete if k not in attrs]
        if missing:
            self.fail(op, f"lacks the option{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(missing)} (defaults must be filled in)")
            return None
        try:
            inferred = opdef.infer([v.type for v in op.operands], attrs)
        except AdcError as e:
            self.fail(op, f"is ill-typed: {e.message}")
            return None
        except Exception as e:  # a malformed attr can break a type rule in any way
            self.fail(op, f"has attrs its type rule cannot use ({type(e).__name__}: {e})")
            return None
        return [inferred] if isinstance(inferred, TensorType) else list(inferred)
