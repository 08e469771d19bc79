"""Calls in a Python function (a mixin of `lowerer.PyLowerer`): which function is called,
how its arguments bind, and how a call of a TDSL op is spelled.

A call goes, by what the callee is: to an array method (``x.sum()``), an ``adc.ops``
function (the TDSL op of that name, arguments as TDSL takes them), a NumPy or ``math``
function or a builtin (`numpy_table`), or another Python function (`callees`).
"""
from __future__ import annotations

import ast as py
import builtins
from ast import literal_eval as ast_literal
import math
import types

import numpy as np

from ..tdsl import ast
from .values import Tensor, as_dtype, describe, dtype_name, has_tensor, is_number, plain_number

REQUIRED = object()
TABLE: dict = {}            # Python callable -> (handler, params, display name)
METHODS: dict = {}          # array method name -> (handler, params)


def _params(sig: str) -> list[tuple[str, object]]:
    out = []
    for part in filter(None, (p.strip() for p in sig.split(","))):
        name, eq, default = part.partition("=")
        out.append((name.strip(), ast_literal(default) if eq else REQUIRED))
    return out


def numpy_fn(*funcs, sig: str, name: str | None = None):
    """Register `handler(self, args: dict, call: Call)` for each of `funcs` (NumPy, math or
    builtin callables; None entries, for functions an older NumPy lacks, are skipped)."""
    def deco(handler):
        params = _params(sig)
        for f in funcs:
            if f is not None:
                TABLE[f] = (handler, params, name or _display(f))
        return handler
    return deco


def method(*names: str, sig: str):
    def deco(handler):
        for n in names:
            METHODS[n] = (handler, _params(sig))
        return handler
    return deco


def _display(f) -> str:
    mod = getattr(f, "__module__", None) or ("numpy" if isinstance(f, np.ufunc) else "")
    mod = {"numpy": "np", "builtins": ""}.get(mod.split(".")[0], mod)
    return f"{mod}.{f.__name__}" if mod else f.__name__


class Call:
    """One call: its node, the span of the callee's name, and the display name."""

    def __init__(self, node: py.Call, name_span, name: str):
        self.node, self.name_span, self.name = node, name_span, name


class CallDispatch:
    def e_call(self, node: py.Call):
        f = self.pyval(node.func)
        args = self.starred_items(node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                d = self.pyval(kw.value)
                if not isinstance(d, dict):
                    raise self.src.error(f"cannot unpack {describe(d)} with **", kw.value)
                kwargs.update(d)
            else:
                kwargs[kw.arg] = self.pyval(kw.value)
        name_span = self.callee_span(node.func)
        from .exprs import _BoundMethod, _DictMethod
        if isinstance(f, _BoundMethod):
            entry = METHODS.get(f.name)
            if entry is None:
                raise self.src.error(f"the array method '.{f.name}()' is not supported",
                                     node.func)
            handler, params = entry
            call = Call(node, name_span, f".{f.name}")
            return handler(self, self.bind_args(params, [f.obj] + args, kwargs, call), call)
        if isinstance(f, _DictMethod):
            return f(*args)
        op = getattr(f, "_adc_op", None)
        if op is not None:
            return self.adc_op_call(op, args, kwargs, Call(node, name_span, f"adc.ops.{op}"))
        try:
            entry = TABLE.get(f)
        except TypeError:  # an unhashable callable
            entry = None
        if entry is not None:
            handler, params, name = entry
            call = Call(node, name_span, name)
            return handler(self, self.bind_args(params, args, kwargs, call), call)
        if isinstance(f, types.FunctionType):
            return self.python_call(f, args, kwargs, node)
        if isinstance(f, type) and issubclass(f, BaseException):
            raise self.src.error("raising exceptions is not supported", node)
        name = getattr(f, "__name__", None)
        module = getattr(f, "__module__", None)
        what = f"'{module}.{name}'" if name and module and module != "builtins" else \
            f"'{name}'" if name else describe(f)
        raise self.src.error(
            f"adc cannot see into {what}: a compiled function may call the NumPy functions "
            "of its subset, adc.ops, and Python functions defined in a file", node.func)

    def callee_span(self, func):
        span = self.src.span(func)
        if isinstance(func, py.Attribute):   # np.tanh: the position of 'tanh'
            return ast.Span(span.end_line, span.end_col - len(func.attr), span.end_line,
                            span.end_col)
        return span

    def bind_args(self, params, args: list, kwargs: dict, call: Call) -> dict:
        if len(args) > len(params) and not (params and params[-1][0].startswith("*")):
            raise self.src.error(f"{call.name}() takes at most {len(params)} positional "
                                 f"arguments here, got {len(args)}", call.node)
        out = {}
        for i, (name, default) in enumerate(params):
            if name.startswith("*"):
                out[name[1:]] = list(args[i:])
                break
            if i < len(args):
                out[name] = args[i]
        for k, v in kwargs.items():
            names = [p.lstrip("*") for p, _ in params]
            if k not in names or params[names.index(k)][0].startswith("*"):
                known = ", ".join(n for n in names if not n.startswith("*")) or "none"
                raise self.src.error(f"{call.name}(): the argument '{k}' is not supported "
                                     f"(supported: {known})", call.node)
            if k in out:
                raise self.src.error(f"{call.name}(): '{k}' is given twice", call.node)
            out[k] = v
        for name, default in params:
            if name.startswith("*"):
                out.setdefault(name[1:], [])
            elif name not in out:
                if default is REQUIRED:
                    raise self.src.error(f"{call.name}() is missing the argument '{name}'",
                                         call.node)
                out[name] = default
        return out

    # ---- emitting TDSL op calls ----------------------------------------------------------
    def make_op(self, op: str, operands: list, options: dict, node, name_node=None,
                name_span=None):
        """`Tensor` of TDSL op `op` on `operands` (arrays or numbers) with `options`
        (Python values; None options are left out)."""
        span = self.src.span(node)
        if name_span is None:
            name_span = self.callee_span(name_node) if isinstance(name_node, py.Attribute) \
                else span
        args = [self.operand(v, node) for v in operands]
        if op == "einsum":   # TDSL's einsum takes its spec first: einsum("ij->ji", x)
            args.insert(0, ast.String(options.pop("spec"), span))
        kws = [ast.Keyword(k, self.option(v, span, node), span)
               for k, v in options.items() if v is not None]
        return Tensor(ast.Call(op, args, kws, span, name_span))

    def op(self, op: str, operands: list, call: Call, **options):
        return self.make_op(op, operands, options, call.node, name_span=call.name_span)

    def operand(self, v, node):
        """An operand: an array, a number, or a (nested) sequence of them (stacked)."""
        if isinstance(v, (tuple, list)):
            if not v:
                raise self.src.error("an empty sequence has no array value here", node)
            span = self.src.span(node)
            return ast.Call("stack", [ast.ListExpr([self.operand(x, node) for x in v],
                                                   span)], [], span, span)
        return self.tdsl(v, node)

    def option(self, v, span, node):
        if isinstance(v, (bool, np.bool_)):
            return ast.Bool(bool(v), span)
        if is_number(v):
            return ast.Number(plain_number(v), span)
        if isinstance(v, str):
            return ast.String(v, span)
        if isinstance(v, (tuple, list)):
            return ast.ListExpr([self.option(x, span, node) for x in v], span)
        d = as_dtype(v) if not has_tensor(v) else None
        if d is not None:
            return dtype_name(span, d)
        raise self.src.error(f"an option must be known at compile time, got {describe(v)}",
                             node)

    def adc_op_call(self, op: str, args: list, kwargs: dict, call: Call):
        """``adc.ops.NAME(...)``: the TDSL op NAME, arguments as TDSL takes them (a list
        for a ``*xs`` operand, options by keyword or position)."""
        from ...ops import registry
        if op not in registry.REGISTRY:
            raise self.src.error(f"adc.ops has no op '{op}'", call.node.func)
        span = self.src.span(call.node)
        exprs = [self.loose(a, call.node.args[min(i, len(call.node.args) - 1)])
                 for i, a in enumerate(args)]
        kws = [ast.Keyword(k, self.loose(v, call.node), span) for k, v in kwargs.items()]
        return Tensor(ast.Call(op, exprs, kws, span, call.name_span))

    def loose(self, v, node):
        """An argument of an adc.ops call: an array, a number, a list, a string, a dtype."""
        if isinstance(v, Tensor):
            return v.expr
        if isinstance(v, (tuple, list)):
            span = self.src.span(node)
            return ast.ListExpr([self.loose(x, node) for x in v], span)
        return self.option(v, self.src.span(node), node)


# builtins and math functions that take and give compile-time values only
STATIC_BUILTINS = {builtins.range, builtins.zip, builtins.enumerate, builtins.reversed,
                   builtins.list, builtins.tuple, builtins.dict, builtins.min, builtins.max,
                   builtins.round, builtins.int, builtins.bool, builtins.isinstance,
                   builtins.sorted, builtins.divmod, math.floor, math.ceil, math.prod,
                   math.isclose, math.comb, math.factorial, math.gcd}
