"""Lowering one function body: statements, scopes and ``for`` loops.

A loop lowers to the scan-style ``for`` op with no xs/ys: names bound before the loop and
rebound anywhere in its body are carried (body arguments ``[i, carries...]``, the body
yields their new values, the op's results rebind them); names first bound in the body are
local to it; outer values are used directly (implicit capture).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.builder import Builder
from ...ir.core import Block, Function, Value
from ...ir.types import TensorType
from . import ast
from .calls import CallLowering
from .groups import GroupLowering, GroupValue, input_value
from .group_state import GroupState
from .exprs import MAX_DEPTH, ExprLowering
from .randomness import Keys
from .state import declared_results, state_results
from .values import Multi, Weak, default_dtype

I64 = TensorType("i64", ())


@dataclass
class Binding:
    value: object           # a Value or a Weak literal
    span: ast.Span          # where the name was bound
    is_index: bool = False


class Scope:
    def __init__(self, parent: "Scope | None" = None):
        self.vars: dict[str, Binding] = {}
        self.parent = parent

    def lookup(self, name: str) -> Binding | None:
        s = self
        while s is not None:
            if name in s.vars:
                return s.vars[name]
            s = s.parent
        return None

    def names(self):
        s, seen = self, set()
        while s is not None:
            seen |= set(s.vars)
            s = s.parent
        return seen


def assigned_names(stmts) -> list[str]:
    """Names assigned anywhere in `stmts` (nested loops included), in source order."""
    out, stack = [], list(reversed(stmts))
    while stack:
        st = stack.pop()
        if isinstance(st, ast.Assign):
            out += [t.name for t in st.targets if t.name not in out]
        elif isinstance(st, ast.For):
            stack.extend(reversed(st.body))
    return out


class FunctionLowerer(ExprLowering, CallLowering, GroupLowering, GroupState):
    """Lowers the body of `fn` (whose arguments already exist) into `fn.body`.

    `what` names the function in messages ("function 'f'", "grad rule for 'f'").
    """

    def __init__(self, file: str, functions: dict[str, Function], fn: Function,
                 what: str, spans: list[ast.Span], subst: dict | None = None,
                 specialize=None, decls=None, group_decls=None):
        self.file, self.functions, self.fn, self.what = file, functions, fn, what
        self.b = Builder(fn.body, fn.loc)
        self.scope = Scope()
        for arg, span in zip(fn.args, spans):
            self.scope.vars[arg.name] = Binding(arg, span)
        # `decls`: the inputs as declared, when some are groups (whose leaves are the
        # inputs named ``p.W``, bound only through the group `p`); `group_decls`: those of
        # every function with group inputs, for calls
        self.group_decls = group_decls or {}
        if decls:
            args = {a.name: a for a in fn.args}
            for dc in decls:
                if dc.ref is not None:
                    for n in dc.flat_names():
                        self.scope.vars.pop(n, None)
                    self.scope.vars[dc.name] = Binding(input_value(dc, args), dc.span)
        # `subst`: the dims of a specialization (callee's symbol -> the caller's dim);
        # `specialize(name, subst, loc)`: the specialized Function of a module function.
        self.subst = dict(subst or {})
        self.specialize = specialize
        self.symbols = {d for a in fn.args for d in a.type.shape if isinstance(d, str)}
        self.symbols |= set(self.subst)
        self.calls: list = []          # (callee, loc) of every call, for the recursion check
        self.loop_locals: dict[str, int] = {}
        self.depth = 0
        self.trials = 0
        from ...ops.random import key_input
        self.keys = Keys(fn.name.split(".")[0], key_input(fn))

    # ---- statements ------------------------------------------------------------------
    def lower(self, stmts, close: ast.Span, count_msg) -> None:
        ret = self.block(stmts, in_loop=False)
        if ret is None:
            raise self.error(f"missing return at the end of {self.what}", close)
        self.ret(ret, count_msg)

    def block(self, stmts, in_loop: bool):
        ret = None
        for st in stmts:
            if ret is not None:
                raise self.error("statement after return (return must be the last "
                                 "statement)", st.span)
            if isinstance(st, ast.Assign):
                self.assign(st)
            elif isinstance(st, ast.For):
                self.loop(st)
            elif in_loop:
                raise self.error("return inside a loop body (a loop's results are the "
                                 "names it rebinds)", st.span)
            else:
                ret = st
        return ret

    def ret(self, st: ast.Return, count_msg) -> None:
        want = declared_results(self.fn)
        if len(st.values) != len(want):
            raise self.error(count_msg(len(st.values)), st.span)
        vals = []
        for k, (e, t) in enumerate(zip(st.values, want)):
            v = self.to_type(self.value(e), t)
            if v.type != t:
                raise self.error(f"return value {k + 1} has type {v.type}, but {self.what} "
                                 f"must return {t}", e.span)
            vals.append(v)
        vals += state_results(self, st.span)
        self.b.loc = self.loc(st.span)
        self.b.ret(vals)

    def assign(self, st: ast.Assign) -> None:
        if len(st.targets) == 1:
            self.bind(st.targets[0], self.value_or_group(st.value))
            return
        seen = set()
        for t in st.targets:
            if t.name in seen:
                raise self.error(f"'{t.name}' is assigned twice in one statement", t.span)
            seen.add(t.name)
        v = self.expr(st.value)
        n = len(st.targets)
        if not isinstance(v, Multi):
            raise self.error(f"{n} names are assigned, but the right side gives one value",
                             st.value.span)
        if len(v.values) != n:
            raise self.error(f"'{v.callee}' returns {len(v.values)} values, but {n} names "
                             "are assigned", st.value.span)
        for t, x in zip(st.targets, v.values):
            self.bind(t, x)

    def bind(self, t: ast.Target, v) -> None:
        if "." in t.name:   # a group's state field
            self.bind_field(t, v)
            return
        old = self.scope.lookup(t.name)
        if old is not None and old.is_index:
            raise self.error(f"cannot rebind the loop index '{t.name}'", t.span)
        if isinstance(v, Value) and v.name is None:
            v.name = t.name
        self.scope.vars[t.name] = Binding(v, t.span)

    # ---- loops -----------------------------------------------------------------------
    def loop(self, st: ast.For) -> None:
        if self.depth + 3 > MAX_DEPTH:
            raise self.error("loops are nested too deeply", st.span)
        n = self.loop_count(st)
        var = st.var
        if self.scope.lookup(var.name) is not None:
            raise self.error(f"loop index '{var.name}' is already bound", var.span)
        carried = [c for c in assigned_names(st.body) if self.scope.lookup(c) is not None]
        inits = {c: self.scope.lookup(c).value for c in carried}
        for c, v in inits.items():
            if isinstance(v, GroupValue):
                raise self.error(f"'{c}' is a group ({v}) and the loop rebinds it; a group "
                                 "cannot be loop-carried (index the stack in the body "
                                 "instead)", self.scope.lookup(c).span)
        if self.trials:
            for c, v in self.trial(st, carried).items():
                self.scope.vars[c] = Binding(v, self.scope.lookup(c).span)
            return
        types = self.carry_types(st, carried, inits)
        body = Block([I64] + [types[c] for c in carried], [var.name] + carried)
        outer = self.scope
        self.scope = Scope(outer)
        self.scope.vars[var.name] = Binding(body.args[0], var.span, is_index=True)
        for c, arg in zip(carried, body.args[1:]):
            self.scope.vars[c] = Binding(arg, outer.lookup(c).span)
        self.depth += 3
        self.keys.push(body.args[0], st.span, body)
        try:
            with self.b.inside(body):
                self.block(st.body, in_loop=True)
                yields = [self.carried_value(c, types[c]) for c in carried]
                self.b.loc = self.loc(st.span)
                self.b.yield_(yields)
            inner = self.scope
        finally:
            self.scope = outer
            self.depth -= 3
            self.keys.pop()
        for name in inner.vars:
            if name not in carried and name != var.name:
                self.loop_locals.setdefault(name, st.span.line)
        init_values = [self.to_type(inits[c], types[c]) for c in carried]
        self.b.loc = self.loc(st.span)
        op = self.b.for_(n, body, init_values, result_names=carried)
        for c, r in zip(carried, op.results):
            self.scope.vars[c] = Binding(r, inner.vars[c].span)

    def loop_count(self, st: ast.For):
        n = st.count
        if isinstance(n, int):
            return n
        b = self.scope.lookup(n)
        if b is None or n in self.symbols:
            return self.subst.get(n, n)
        if isinstance(b.value, Weak) and isinstance(b.value.value, int) and b.value.value >= 0:
            return b.value.value
        raise self.error(f"range() needs an integer literal or a symbolic dimension; '{n}' is "
                         "a value", st.count_span)

    def carried_value(self, name: str, t: TensorType) -> Value:
        b = self.scope.vars[name]
        if isinstance(b.value, GroupValue):
            raise self.error(f"loop-carried '{name}' is {t} before the loop, but the body "
                             f"binds a group ({b.value}) to it", b.span)
        v = self.to_type(b.value, t)
        if v.type != t:
            raise self.error(f"loop-carried '{name}' is {t} before the loop but {v.type} after "
                             "an iteration; give it its final type before the loop", b.span)
        return v

    def carry_types(self, st: ast.For, carried, inits) -> dict[str, TensorType]:
        """Carried types; a literal carry (``s = 0``) takes the type the body gives it."""
        types = {c: v.type for c, v in inits.items() if isinstance(v, Value)}
        weak = [c for c in carried if isinstance(inits[c], Weak)]
        found = {}
        if weak:
            saved = (len(self.calls), dict(self.loop_locals))
            self.trials += 1
            try:
                found = self.trial(st, carried)
            finally:
                self.trials -= 1
                del self.calls[saved[0]:]
                self.loop_locals = saved[1]
        for c in weak:
            v = found.get(c)
            types[c] = v.type if isinstance(v, Value) else \
                TensorType(default_dtype(inits[c].value), ())
        return types

    def trial(self, st: ast.For, carried) -> dict:
        """Lower one iteration into a scratch block, carries as they are before the loop;
        returns the carried names' values after it (only their types matter)."""
        scratch = Block([I64])
        outer = self.scope
        self.scope = Scope(outer)
        self.scope.vars[st.var.name] = Binding(scratch.args[0], st.var.span, is_index=True)
        self.depth += 3
        self.keys.push(scratch.args[0], st.span, scratch)
        try:
            with self.b.inside(scratch):
                self.block(st.body, in_loop=True)
            return {c: self.scope.vars[c].value for c in carried if c in self.scope.vars}
        finally:
            self.scope = outer
            self.depth -= 3
            self.keys.pop()
