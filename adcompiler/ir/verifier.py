"""Checking that a module is well formed; run after every pass in tests.

`verify(module)` raises a `VerifyError` (an `AdcError`) naming the first broken op and its
location; `verify_errors(module)` returns every problem found. Checked:

* SSA: each value is defined once, by the op or block that claims it, and every operand is
  defined earlier in its block or an enclosing block (values of a region are dead after it);
* terminators: function bodies end in ``return`` (types = `result_types`), loop bodies in
  ``yield``; neither appears anywhere else;
* ``for``: attrs, block arguments ``[i64[], carries..., x slices...]``, yield and result types;
* ``repeat``: directly in a ``for`` body, whose index is its first operand; attrs
  ``count = (a, b)`` (ints >= 0) and ``n_carry`` (the other operands); block arguments
  ``[i64[], carries...]``; yield and results the carries' types;
* ``call``: the callee exists and its argument and result types match;
* ``fused``: one region whose arguments take the operands' types and whose ``yield`` gives
  the result types;
* registry ops: options complete and result types equal to the op's type rule.
"""
from __future__ import annotations

from ..diagnostics import AdcError
from ..ops import registry
from ..ops.control import RETURN, YIELD
from .core import Block, Function, Module, Op, Value
from .types import TensorType

# Attributes any op may carry besides its options: scheduling marks that passes add and
# type rules ignore (e.g. ops that rematerialization recomputes).
ANNOTATION_ATTRS = {"recompute"}


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


def _types(ts) -> str:
    return "(" + ", ".join(str(t) for t in ts) + ")"


class _Checker:
    def __init__(self, module: Module):
        self.module = module
        self.errors: list[VerifyError] = []

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
        names = set(f.arg_names)
        for p in sorted(f.params - names):
            self.fail(f, f"param '{p}' is not an input")
        for kind in ("grad_of", "tangent_of"):
            target = f.attrs.get(kind)
            if target is not None and target not in self.module:
                self.fail(f, f"{kind} names unknown function @{target}")
        self.block(f.body, RETURN, f)
        term = f.body.ops[-1] if f.body.ops else None
        if term is not None and term.name == RETURN:
            got = [v.type for v in term.operands]
            if got != list(f.result_types):
                self.fail(term, f"returns {_types(got)} but the function declares "
                                f"{_types(f.result_types)}")

    def block(self, block: Block, terminator: str, owner) -> None:
        """Check `block`. Its values are visible to its later ops and their regions, and
        leave `self.visible` when it is done (one set for the whole function, not a copy
        per block)."""
        visible, added = self.visible, []
        self.open_blocks.append(block)
        for k, a in enumerate(block.args):
            self.define(a, block, k, owner)
            if a not in visible:
                visible.add(a)
                added.append(a)
        if not block.ops:
            self.fail(owner, f"has an empty block; it must end in '{terminator}'")
        elif block.ops[-1].name != terminator:
            self.fail(block.ops[-1], f"ends a block that must end in '{terminator}'")
        for k, op in enumerate(block.ops):
            if op.parent is not block:
                self.fail(op, "has a stale parent block")
            if registry.has_trait(op, "terminator") and (k != len(block.ops) - 1
                                                         or op.name != terminator):
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
                self.block(r, YIELD, op)
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
        if registry.has_trait(op, "terminator"):
            if op.results or op.regions:
                self.fail(op, "must have no results and no regions")
        elif registry.has_trait(op, "loop"):
            self.for_op(op)
        elif registry.has_trait(op, "counted"):
            self.repeat_op(op)
        elif registry.has_trait(op, "calls"):
            self.call(op)
        elif registry.has_trait(op, "group"):
            self.fused_op(op)
        elif op.name in registry.REGISTRY:
            self.registry_op(op, registry.REGISTRY[op.name])
        else:
            self.fail(op, "is not a registered op")

    def registry_op(self, op: Op, opdef: registry.OpDef) -> None:
        if op.regions:
            self.fail(op, "must have no regions")
        if not opdef.variadic and len(op.operands) != len(opdef.operands):
            self.fail(op, f"takes {len(opdef.operands)} operands, got {len(op.operands)}")
            return
        attrs = {k: v for k, v in op.attrs.items() if k not in ANNOTATION_ATTRS}
        try:
            complete = opdef.complete_attrs(attrs)
        except AdcError as e:
            self.fail(op, e.message)
            return
        missing = [k for k in complete if k not in attrs]
        if missing:
            self.fail(op, f"lacks the option{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(missing)} (defaults must be filled in)")
            return
        try:
            inferred = opdef.infer([v.type for v in op.operands], attrs)
        except AdcError as e:
            self.fail(op, f"is ill-typed: {e.message}")
            return
        except Exception as e:  # a malformed attr can break a type rule in any way
            self.fail(op, f"has attrs its type rule cannot use ({type(e).__name__}: {e})")
            return
        inferred = [inferred] if isinstance(inferred, TensorType) else list(inferred)
        got = [r.type for r in op.results]
        if got != inferred:
            self.fail(op, f"has result types {_types(got)} but its type rule gives "
                          f"{_types(inferred)}")

    def call(self, op: Op) -> None:
        callee = op.attrs.get("callee")
        if callee not in self.module:
            self.fail(op, f"calls unknown function {callee!r}")
            return
        f = self.module[callee]
        args = [v.type for v in op.operands]
        if args != [a.type for a in f.args]:
            self.fail(op, f"passes {_types(args)} to @{callee}, which takes "
                          f"{_types(a.type for a in f.args)}")
        res = [r.type for r in op.results]
        if res != list(f.result_types):
            self.fail(op, f"expects results {_types(res)} but @{callee} returns "
                          f"{_types(f.result_types)}")

    def for_op(self, op: Op) -> None:
        n, nc, rev = op.attrs.get("n"), op.attrs.get("n_carry"), op.attrs.get("reverse")
        if set(op.attrs) - ANNOTATION_ATTRS != {"n", "n_carry", "reverse"} \
                or not isinstance(n, (int, str)) \
                or isinstance(n, bool) or not isinstance(nc, int) or isinstance(nc, bool) \
                or not isinstance(rev, bool):
            self.fail(op, "needs exactly the attrs n (dim), n_carry (int), reverse (bool)")
            return
        if len(op.regions) != 1:
            self.fail(op, f"needs one region, has {len(op.regions)}")
            return
        if not 0 <= nc <= len(op.operands):
            self.fail(op, f"has n_carry = {nc} but {len(op.operands)} operands")
            return
        body = op.regions[0]
        carries = [v.type for v in op.operands[:nc]]
        xs = [v.type for v in op.operands[nc:]]
        for k, t in enumerate(xs):
            if not t.shape or t.shape[0] != n:
                self.fail(op, f"scanned operand {nc + k} has type {t}, whose leading "
                              f"dim is not n = {n}")
                return
        want = [TensorType("i64", ())] + carries + [t.with_shape(t.shape[1:]) for t in xs]
        args = [a.type for a in body.args]
        if args != want:
            self.fail(op, f"body arguments {_types(args)} should be {_types(want)} "
                          "(index, carries, slices)")
        term = body.ops[-1] if body.ops else None
        if term is None or term.name != YIELD:
            return
        yielded = [v.type for v in term.operands]
        if yielded[:nc] != carries:
            self.fail(term, f"yields carries {_types(yielded[:nc])} but the loop carries "
                            f"{_types(carries)}")
        want_res = carries + [t.with_shape((n,) + t.shape) for t in yielded[nc:]]
        res = [r.type for r in op.results]
        if res != want_res:
            self.fail(op, f"has result types {_types(res)} but its body gives "
                          f"{_types(want_res)}")

    def repeat_op(self, op: Op) -> None:
        count, nc = op.attrs.get("count"), op.attrs.get("n_carry")
        if set(op.attrs) - ANNOTATION_ATTRS != {"count", "n_carry"} \
                or not isinstance(count, tuple) or len(count) != 2 \
                or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                           for c in count) or nc != len(op.operands) - 1:
            self.fail(op, "needs exactly the attrs count (a, b: ints >= 0) and n_carry "
                          "(its operands after the index)")
            return
        outer = op.parent.parent if op.parent is not None else None
        if not (isinstance(outer, Op) and registry.has_trait(outer, "loop")) \
                or op.operands[0] is not op.parent.args[0]:
            self.fail(op, "must be in the body of a 'for' and take its index first: it runs "
                          "a*i + b times, i the index of that loop")
            return
        if len(op.regions) != 1:
            self.fail(op, f"needs one region, has {len(op.regions)}")
            return
        carries = [v.type for v in op.operands[1:]]
        args = [a.type for a in op.regions[0].args]
        if args != [TensorType("i64", ())] + carries:
            self.fail(op, f"body arguments {_types(args)} should be "
                          f"{_types([TensorType('i64', ())] + carries)} (index, carries)")
        term = op.regions[0].ops[-1] if op.regions[0].ops else None
        if term is not None and term.name == YIELD and [v.type for v in term.operands] != carries:
            self.fail(term, f"yields {_types(v.type for v in term.operands)} but the loop "
                            f"carries {_types(carries)}")
        if [r.type for r in op.results] != carries:
            self.fail(op, f"has result types {_types(r.type for r in op.results)} but "
                          f"carries {_types(carries)}")

    def fused_op(self, op: Op) -> None:
        if len(op.regions) != 1:
            self.fail(op, f"needs one region, has {len(op.regions)}")
            return
        body = op.regions[0]
        args, operands = [a.type for a in body.args], [v.type for v in op.operands]
        if args != operands:
            self.fail(op, f"body arguments {_types(args)} should be the operand types "
                          f"{_types(operands)}")
        term = body.ops[-1] if body.ops else None
        if term is None or term.name != YIELD:
            return
        yielded, res = [v.type for v in term.operands], [r.type for r in op.results]
        if yielded != res:
            self.fail(op, f"has result types {_types(res)} but its body yields "
                          f"{_types(yielded)}")
