"""Lowering one Python function: its statements, translated one at a time into TDSL
statements that the TDSL lowering turns into IR right away.

Translating a statement needs the types of the values it uses (``x.shape[0]``, ``x.T``), so
translation and lowering go hand in hand: each TDSL statement is lowered as soon as it is
made. A ``for i in range(n)`` loop stays a loop: its body is translated once inside a trial
(lowered into a scratch block, with the loop's index and the values as they are before the
loop), and the TDSL ``for`` statement that results is then lowered as TDSL lowers it, with
its loop-carried names. ``if`` and ``while`` on values known at compile time pick or repeat
their branch; a loop over a Python list or tuple is unrolled.
"""
from __future__ import annotations

import ast as py

from ...ir.core import Block, Function, Value
from ..tdsl import ast
from ..tdsl.function import Binding, FunctionLowerer, Scope, I64
from ...ir.types import FLOAT_DTYPES
from ..tdsl.exprs import BINARY_OPS, OPERATOR_WHAT
from ..tdsl.values import Weak, literal_dtype
from . import pytree
from .callees import CalleeCalls, Slot
from .exprs import PyExprs
from .numpy_calls import NumpyCalls
from .source import FunctionSource
from .values import Tensor, describe, has_tensor, is_number, plain_number

MAX_UNROLL = 10_000


def assigned_names(stmts) -> list[str]:
    """The names a Python statement list binds (nested blocks included), in order."""
    out: list[str] = []
    for st in stmts:
        for node in py.walk(st):
            if isinstance(node, py.Name) and isinstance(node.ctx, py.Store) \
                    and node.id not in out:
                out.append(node.id)
    return out


class Return(Exception):
    """Raised by a ``return`` statement: unwinds to the function's body."""

    def __init__(self, value, node):
        self.value, self.node = value, node


class PyLowerer(NumpyCalls, CalleeCalls, PyExprs, FunctionLowerer):
    """Lowers the body of Python function `src.node` into `fn` (whose arguments exist).

    `statics` binds the parameters known at compile time (and containers of tensors);
    `unit` is the module being built (`module.Unit`): it compiles the functions called.
    """

    def __init__(self, unit, src: FunctionSource, pyfunc, fn: Function, arg_spans,
                 statics: dict, entry: bool):
        FunctionLowerer.__init__(self, src.file, unit.functions, fn,
                                 f"function '{fn.name}'", arg_spans)
        self.unit, self.src, self.pyfunc, self.entry = unit, src, pyfunc, entry
        self.statics = dict(statics)
        self.alias: dict[str, str] = {}
        self.emitted: list[list] = [[]]     # TDSL statements made, per open loop body
        self.in_loop = 0                    # IR loops around the current statement
        self.pydepth = 0
        self.taken = {n.id for n in py.walk(src.node) if isinstance(n, py.Name)}
        self.taken |= {a.arg for a in py.walk(src.node) if isinstance(a, py.arg)}
        self.type_cache: dict[int, tuple] = {}
        self.loop_outer: list[set] = []     # names bound before each open IR loop
        self.stable: set[str] = set()       # names only the front end binds, never rebound

    # ---- the body --------------------------------------------------------------------
    def run(self):
        """Lower the body; returns what the function returns (a `Tensor`, a Python object
        or a container of both)."""
        node = self.src.node
        try:
            if isinstance(node, py.Lambda):
                raise Return(self.pyval(node.body), node.body)
            self.body(node.body)
        except Return as r:
            return r.value, r.node
        end = node.body[-1] if node.body else node
        return None, end

    def body(self, stmts) -> None:
        for st in stmts:
            self.stmt(st)

    def stmt(self, st) -> None:
        handler = _STATEMENTS.get(type(st))
        if handler is None:
            raise self.unsupported_stmt(st)
        handler(self, st)

    def lower_stmt(self, st) -> None:
        """Record TDSL statement `st` for the open loop body and lower it now."""
        self.emitted[-1].append(st)
        if isinstance(st, ast.Assign):
            self.assign(st)
        else:
            self.loop(st)

    def unsupported_stmt(self, st):
        what = {py.Try: ("try", "adc compiles the computation only; handle errors "
                         "around the call"),
                py.With: ("with", "move it out of the compiled function"),
                py.Raise: ("raise", "it is reached when the function is compiled"),
                py.Delete: ("del", "leave the name unused"),
                py.Global: ("global", "pass the value as an argument"),
                py.Nonlocal: ("nonlocal", "pass the value as an argument"),
                py.Import: ("import", "import at module level"),
                py.ImportFrom: ("import", "import at module level"),
                py.FunctionDef: ("a nested def", "define the function at module level"),
                py.ClassDef: ("a class", "define it at module level"),
                py.Break: ("break", "loops run a fixed number of times"),
                py.Continue: ("continue", "use np.where to skip work"),
                py.Match: ("match", "use if on values known at compile time")}
        name, hint = what.get(type(st), (type(st).__name__, "rewrite it"))
        if type(st).__name__ == "TryStar":
            name, hint = "try", "handle errors around the call"
        return self.src.error(f"'{name}' is not supported in a compiled function ({hint})",
                              st)

    # ---- assignment ------------------------------------------------------------------
    def s_assign(self, st: py.Assign) -> None:
        if len(st.targets) == 1 and isinstance(st.targets[0], (py.Tuple, py.List)) \
                and self.multi_assign(st.targets[0], st.value):
            return
        value = self.pyval(st.value)
        for target in st.targets:
            self.bind_target(target, value, st.value)

    def s_annassign(self, st: py.AnnAssign) -> None:
        if st.value is not None:
            self.bind_target(st.target, self.pyval(st.value), st.value)

    def s_augassign(self, st: py.AugAssign) -> None:
        if not isinstance(st.target, py.Name):
            raise self.mutation(st.target)
        load = py.Name(st.target.id, py.Load())
        py.copy_location(load, st.target)
        binop = py.BinOp(load, st.op, st.value)
        py.copy_location(binop, st)
        self.bind_target(st.target, self.binop(binop), st.value)

    def mutation(self, target):
        if isinstance(target, py.Subscript):
            return self.src.error(
                "item assignment changes an array in place, and adc compiles functions that "
                "mutate nothing: build a new array instead (np.where, np.concatenate, "
                "np.stack)", target)
        return self.src.error("assignment to an attribute changes an object in place; "
                              "bind a new name instead", target)

    def bind_target(self, target, value, value_node) -> None:
        if isinstance(target, py.Name):
            return self.bind_name(target.id, value, self.src.span(target))
        if isinstance(target, (py.Tuple, py.List)):
            if isinstance(value, Tensor):
                raise self.src.error("cannot unpack an array into names (unpack a tuple, "
                                     "or index the array: a, b = x[0], x[1])", value_node)
            if not isinstance(value, (tuple, list)):
                raise self.src.error(f"cannot unpack {describe(value)}", value_node)
            if any(isinstance(t, py.Starred) for t in target.elts):
                raise self.src.error("starred assignment is not supported", target)
            if len(value) != len(target.elts):
                raise self.src.error(f"{len(target.elts)} names are assigned, but the "
                                     f"right side gives {len(value)} values", value_node)
            value = [self.pin(v, t.id if isinstance(t, py.Name) else "t")
                     for t, v in zip(target.elts, value)]
            for t, v in zip(target.elts, value):
                self.bind_target(t, v, value_node)
            return
        if isinstance(target, (py.Subscript, py.Attribute)):
            raise self.mutation(target)
        raise self.src.error("unsupported assignment target", target)

    def bind_name(self, name: str, value, span) -> None:
        self.alias.pop(name, None)
        if isinstance(value, Tensor):
            self.statics.pop(name, None)
            self.lower_stmt(ast.Assign([ast.Target(name, span)], value.expr, span))
            return
        if self.in_loop and name in self.loop_outer[-1]:
            if is_number(value) or isinstance(value, bool):
                self.statics.pop(name, None)
                self.lower_stmt(ast.Assign([ast.Target(name, span)],
                                           self.literal(value, span), span))
                return
            raise self.error(f"'{name}' is rebound to {describe(value)} inside a loop that "
                             "stays a loop; only arrays and numbers can change from one "
                             "iteration to the next", span)
        self.statics[name] = value

    # ---- return and expressions as statements ----------------------------------------
    def s_return(self, st: py.Return) -> None:
        if self.in_loop:
            raise self.src.error("return inside a loop that stays a loop (the loop's results "
                                 "are the names it rebinds; return after it)", st)
        raise Return(None if st.value is None else self.pyval(st.value), st.value or st)

    def s_expr(self, st: py.Expr) -> None:
        if isinstance(st.value, py.Constant):
            return  # a docstring
        self.pyval(st.value)  # checked, then unused (nothing has side effects)

    def s_pass(self, st) -> None:
        return

    def s_assert(self, st: py.Assert) -> None:
        ok = self.static_test(st.test, "assert")
        if not ok:
            msg = "" if st.msg is None else f": {self.pyval(st.msg)}"
            raise self.src.error(f"assertion fails when the function is compiled{msg}", st)

    # ---- branches ----------------------------------------------------------------------
    def static_test(self, node, what: str) -> bool:
        v = self.pyval(node)
        if has_tensor(v):
            hint = ("select values with np.where(cond, a, b)" if what == "if" else
                    "loop a fixed number of times with for i in range(n)"
                    if what == "while" else "check shapes and dtypes, known at compile time")
            raise self.src.error(f"'{what}' on a run-time value (the condition depends on "
                                 f"the arguments' values, not only on their shapes): {hint}",
                                 node)
        try:
            return bool(v)
        except Exception:  # noqa: BLE001 - an object without a truth value
            raise self.src.error(f"the condition is {describe(v)}, which is neither true "
                                 "nor false", node) from None

    def s_if(self, st: py.If) -> None:
        self.body(st.body if self.static_test(st.test, "if") else st.orelse)

    def s_while(self, st: py.While) -> None:
        for _ in range(MAX_UNROLL):
            if not self.static_test(st.test, "while"):
                if st.orelse:
                    self.body(st.orelse)
                return
            self.body(st.body)
        raise self.src.error(f"while loop runs more than {MAX_UNROLL} times when unrolled",
                             st)

    # ---- loops -------------------------------------------------------------------------
    def s_for(self, st: py.For) -> None:
        if st.orelse:
            raise self.src.error("for ... else is not supported", st.orelse[0])
        it = st.iter
        if isinstance(it, py.Call) and isinstance(it.func, py.Name) and \
                it.func.id == "range" and self.global_value("range", it.func) is range:
            return self.range_loop(st)
        seq = self.pyval(it)
        if isinstance(seq, Tensor):
            raise self.src.error("a loop over an array's rows is not supported; write "
                                 "for i in range(x.shape[0]) and use x[i]", it)
        try:
            items = list(seq)
        except TypeError:
            raise self.src.error(f"cannot loop over {describe(seq)}", it) from None
        if len(items) > MAX_UNROLL:
            raise self.src.error(f"the loop is unrolled and has more than {MAX_UNROLL} "
                                 "iterations", it)
        for item in items:  # a loop over a Python sequence: unrolled
            self.bind_target(st.target, item, it)
            self.body(st.body)

    def range_loop(self, st: py.For) -> None:
        call = st.iter
        if call.keywords or not 1 <= len(call.args) <= 3:
            raise self.src.error("range() takes 1 to 3 integer arguments", call)
        bounds = []
        for a in call.args:
            v = self.pyval(a)
            if has_tensor(v):
                raise self.src.error("range() needs a count known at compile time (an int "
                                     "argument, a shape, a constant), not a run-time value",
                                     a)
            v = plain_number(v)
            if not isinstance(v, int) or isinstance(v, bool):
                raise self.src.error(f"range() needs integers, got {describe(v)}", a)
            bounds.append(v)
        r = range(*bounds)
        if not isinstance(st.target, py.Name):
            raise self.src.error("the index of a loop over range() must be one name",
                                 st.target)
        self.ir_loop(st, len(r), r.start, r.step)

    def ir_loop(self, st: py.For, count: int, start: int, step: int) -> None:
        span = self.src.span(st)
        var = st.target.id
        var_span = self.src.span(st.target)
        assigned = assigned_names(st.body)
        for name in assigned:   # numbers known before the loop become carried values
            if name in self.statics and name != var:
                v = self.statics[name]
                if not (is_number(v) or isinstance(v, bool)):
                    raise self.src.error(f"'{name}' ({describe(v)}) is rebound inside a loop "
                                         "that stays a loop; only arrays and numbers can "
                                         "change from one iteration to the next", st)
                del self.statics[name]
                self.lower_stmt(ast.Assign([ast.Target(name, span)], self.literal(v, span),
                                           span))
        plain = (start, step) == (0, 1)
        counter = var if plain and self.scope.lookup(var) is None else self.fresh(var)
        saved_statics, saved_alias = dict(self.statics), dict(self.alias)
        self.statics.pop(var, None)
        outer = self.scope
        self.loop_outer.append(outer.names() | set(self.statics))
        scratch = Block([I64])
        self.scope = Scope(outer)
        self.scope.vars[counter] = Binding(scratch.args[0], var_span, is_index=True)
        self.emitted.append([])
        self.in_loop += 1
        saved_calls, saved_locals = len(self.calls), dict(self.loop_locals)
        try:
            with self.b.inside(scratch):
                self.alias[var] = counter
                if not plain:  # range(start, stop, step): i = start + k * step
                    k = ast.Name(counter, var_span)
                    e = k if step == 1 else ast.Binary("*", k, ast.Number(step, var_span),
                                                       var_span, var_span)
                    e = e if start == 0 else ast.Binary("+", ast.Number(start, var_span), e,
                                                        var_span, var_span)
                    value = var if outer.lookup(var) is None else self.fresh(var)
                    self.lower_stmt(ast.Assign([ast.Target(value, var_span)], e, var_span))
                    self.alias[var] = value
                self.body(st.body)
            stmts = self.emitted[-1]
        finally:
            self.emitted.pop()
            self.in_loop -= 1
            self.loop_outer.pop()
            self.scope = outer
            self.statics, self.alias = saved_statics, saved_alias
            del self.calls[saved_calls:]
            self.loop_locals = saved_locals
        for name in assigned:
            self.statics.pop(name, None)
            self.alias.pop(name, None)
        self.type_cache.clear()
        last = st.body[-1]
        close = self.src.span(last)
        self.lower_stmt(ast.For(ast.Target(counter, var_span), count,
                                self.src.span(st.iter), stmts, span,
                                ast.Span(close.end_line, close.end_col, close.end_line,
                                         close.end_col)))

    def fresh(self, base: str) -> str:
        k = 1
        while f"{base}_{k}" in self.taken or self.scope.lookup(f"{base}_{k}") is not None:
            k += 1
        name = f"{base}_{k}"
        self.taken.add(name)
        return name

    # ---- the result -------------------------------------------------------------------
    def finish(self, value, node):
        """Return `value`: its arrays (and, for the function called from user code, its
        numbers) are the IR function's results; returns the structure of the value with
        each result replaced by its `Slot`."""
        leaves, tree = pytree.flatten(value)
        exprs, template = [], []
        for x in leaves:
            if isinstance(x, Tensor) or (self.entry and (is_number(x) or isinstance(x, bool))):
                template.append(Slot(len(exprs)))
                exprs.append(x.expr if isinstance(x, Tensor) else self.literal(x, self.src.span(node)))
            elif self.entry:
                raise self.src.error(f"the function returns {describe(x)}, which is not an "
                                     "array or a number", node)
            else:
                template.append(x)
        if self.entry and not exprs:
            raise self.src.error("the function returns no array or number", node)
        vals = []
        for e in exprs:
            v = self.value(e)
            if isinstance(v, Weak):
                v = self.const(v, "f64" if isinstance(v.value, float) else "i64")
            vals.append(v)
        self.fn.result_types = [v.type for v in vals]
        self.b.loc = self.src.loc(node)
        self.b.ret(vals)
        return pytree.unflatten(tree, template)

    # ---- literals ----------------------------------------------------------------------
    def literal(self, v, span):
        """A compile-time number or bool as a TDSL literal."""
        if isinstance(v, bool):
            return ast.Bool(v, span)
        return ast.Number(plain_number(v), span)

    def apply(self, e, a, b):
        """As TDSL, with NumPy's promotion: an integer array meeting a float array or a
        float number becomes float (``x * i``, ``i + 1.0`` with a loop index ``i``)."""
        if isinstance(a, Weak) and isinstance(b, Weak) or e.op == "@":
            return super().apply(e, a, b)
        a, b = self.meet([a, b])
        ta, tb = a.type, b.type
        if ta.is_float and tb.dtype in ("i32", "i64"):
            b = self.emit("cast", [b], {"dtype": ta.dtype}, e.op_span, "cast").result
        elif tb.is_float and ta.dtype in ("i32", "i64"):
            a = self.emit("cast", [a], {"dtype": tb.dtype}, e.op_span, "cast").result
        return self.emit(BINARY_OPS[e.op], [a, b], {}, e.op_span,
                         OPERATOR_WHAT[e.op]).results[0]

    def meet(self, vals):
        """As TDSL, but a float literal that meets no float array is f64 (NumPy's
        default), and one that meets only integer arrays makes them float."""
        if not any(isinstance(v, Weak) for v in vals):
            return vals
        dtypes = [v.type.dtype for v in vals if isinstance(v, Value) and
                  v.type.dtype != "bool"]
        floats = [d for d in dtypes if d in FLOAT_DTYPES]
        if floats:
            return super().meet(vals)
        weak_float = any(isinstance(v, Weak) and isinstance(v.value, float) for v in vals)
        other = "f64" if weak_float else dtypes[0] if dtypes else "i64"
        return [self.const(v, literal_dtype(v.value, other)) if isinstance(v, Weak) else v
                for v in vals]

    # ---- pinning -----------------------------------------------------------------------
    def pin(self, value, base: str = "t"):
        """`value` with each of its arrays bound to a name of its own now: an array kept in
        a tuple, list or dict must not change when a name it was computed from is
        rebound later (``a, b = b, a``; ``pair = (x, y); x = ...``)."""
        if isinstance(value, Tensor):
            e = value.expr
            if isinstance(e, ast.Name) and e.id in self.stable:
                return value
            name = self.fresh(base)
            self.stable.add(name)
            span = getattr(e, "span", None) or ast.Span(1, 1, 1, 1)
            self.lower_stmt(ast.Assign([ast.Target(name, span)], e, span))
            return Tensor(ast.Name(name, span))
        if isinstance(value, (tuple, list)):
            items = [self.pin(x, base) for x in value]
            return tuple(items) if isinstance(value, tuple) else items
        if isinstance(value, dict):
            return {k: self.pin(x, base) for k, x in value.items()}
        return value


_STATEMENTS = {
    py.Assign: PyLowerer.s_assign, py.AnnAssign: PyLowerer.s_annassign,
    py.AugAssign: PyLowerer.s_augassign, py.Return: PyLowerer.s_return,
    py.Expr: PyLowerer.s_expr, py.Pass: PyLowerer.s_pass, py.Assert: PyLowerer.s_assert,
    py.If: PyLowerer.s_if, py.While: PyLowerer.s_while, py.For: PyLowerer.s_for,
}
