"""Lowering calls (module functions and registry ops) and indexing (a mixin of the lowerer).

A registry op's positional arguments fill the names of `OpDef.signature` in order (operands
and options); keyword arguments name options (or operands). A ``*xs`` operand takes a list
``[a, b]`` or, when no list is given, all remaining positional arguments.
"""
from __future__ import annotations

import difflib

from ...ir.core import Function
from ...ops import registry
from . import ast
from ...ops.random import IMPLICIT, key_input
from .groups import GroupValue, bind_dims as _bind_dims
from .options import ConstEval
from .values import Multi, Weak


_ARGUMENTS: dict[str, tuple] = {}


def _arguments(opdef: registry.OpDef) -> tuple[list[str], set[str], tuple[str, ...], bool]:
    """An op's operand names (without ``*``), its list operands, the order of its
    positional arguments, and whether that order starts with all of its operands (none a
    list); worked out once per op definition."""
    entry = _ARGUMENTS.get(opdef.name)
    if entry is None or entry[0] is not opdef:  # a plugin's test may register a name anew
        operands = [o.lstrip("*") for o in opdef.operands]
        variadic = {o.lstrip("*") for o in opdef.operands if o.startswith("*")}
        signature = opdef.signature
        plain = not variadic and list(signature[:len(operands)]) == operands
        entry = _ARGUMENTS[opdef.name] = (opdef, operands, variadic, signature, plain)
    return entry[1:]


class CallLowering:
    def call(self, e: ast.Call):
        if e.func in self.functions:
            return self.fn_call(e, self.functions[e.func])
        if e.func in registry.REGISTRY:
            return self.op_call(e, registry.REGISTRY[e.func])
        msg = f"unknown function or op '{e.func}'"
        close = difflib.get_close_matches(
            e.func, list(self.functions) + list(registry.REGISTRY), 1)
        if close:
            msg += f"; did you mean '{close[0]}'?"
        raise self.error(msg, e.op_span)

    # ---- module functions ------------------------------------------------------------
    def fn_call(self, e: ast.Call, fn: Function):
        decls = self.group_decls.get(fn.name)
        if decls is not None:  # a function with group inputs
            args, subst = self.group_args(e, fn, decls)
            return self.finish_call(e, fn, args, subst)
        if e.kwargs:
            raise self.error(f"function '{fn.name}' takes no keyword arguments",
                             e.kwargs[0].span)
        drawing = key_input(fn) is not None
        n_args = len(fn.args) - drawing
        if len(e.args) != n_args:
            raise self.error(f"function '{fn.name}' takes {n_args} "
                             f"argument{'s' * (n_args != 1)}, got {len(e.args)}",
                             e.op_span)
        args, subst, origin = [], {}, {}
        for a, param in zip(e.args, fn.args):
            v = self.to_type(self.value(a), param.type)
            if not _bind_dims(param.type, getattr(v, "type", None), subst, origin,
                              param.name):
                raise self.error(self.arg_mismatch(fn, param, v, subst, origin), a.span)
            args.append(v)
        return self.finish_call(e, fn, args, subst)

    def finish_call(self, e: ast.Call, fn: Function, args: list, subst: dict):
        targets = self.state_targets(e, fn)
        drawing = key_input(fn) is not None
        self.calls.append((fn.name, self.loc(e.op_span)))
        if any(k != d for k, d in subst.items()):
            fn = self.specialize(fn.name, subst, self.loc(e.op_span))
        self.b.loc = self.loc(e.op_span)
        if drawing:   # the callee draws from a key of this call's own
            args.append(self.b.emit("rng_fold", self.keys.key(self.b),
                                    self.b.const(0, "i64"), site=self.keys.site(e.op_span)))
        results = self.b.call(fn, args)
        if targets:   # the state arguments' names now hold the new state
            for t, r in zip(targets, results[len(results) - len(targets):]):
                self.bind(ast.Target(t.id, t.span), r)
            results = results[:len(results) - len(targets)]
        return results[0] if len(results) == 1 else Multi(results, fn.name, e.span)

    def state_targets(self, e: ast.Call, fn: Function) -> list:
        """The names passed for the state inputs of `fn`: a call rebinds each to the new
        value of its state, as a module call updates its buffers."""
        state = fn.attrs.get("state", ())
        if not state:
            return []
        if len(self.keys.entries) > 1:
            raise self.error(f"function '{fn.name}' has state inputs and cannot be called in "
                             f"a loop body", e.op_span)
        if fn.name in self.group_decls:   # a group is one argument; it may hold state
            return self.group_state_targets(e, fn, self.group_decls[fn.name])
        targets = []
        for name in state:
            a = e.args[fn.arg_names.index(name)]
            if not isinstance(a, ast.Name):
                raise self.error(f"the argument of state input '{name}' of '{fn.name}' must "
                                 f"be a name, which the call binds to the new state", a.span)
            targets.append(a)
        return targets

    @staticmethod
    def arg_mismatch(fn: Function, param, v, subst, origin) -> str:
        got = getattr(v, "type", "a number")
        msg = f"argument '{param.name}' of '{fn.name}' must be {param.type}, got {got}"
        fixed = [f"{d} = {subst[d]} (from argument '{origin[d]}')" for d in
                 dict.fromkeys(x for x in param.type.shape if isinstance(x, str))
                 if d in subst and origin[d] != param.name]
        if fixed and getattr(got, "dtype", None) == param.type.dtype:
            msg += f", with {', '.join(fixed)}"
        return msg

    # ---- registry ops ----------------------------------------------------------------
    def op_call(self, e: ast.Call, opdef: registry.OpDef):
        name = opdef.name
        operands, variadic, signature, plain = _arguments(opdef)
        if plain and not e.kwargs and len(e.args) == len(operands):
            # each operand given in order and no option (``tanh(x)``, ``add(a, b)``): what
            # `op_arguments` finds, without its dict of slots
            vals, attrs = self.meet([self.value(x) for x in e.args]), {}
        else:
            vals, attrs = self.op_arguments(e, opdef)
        if "key" in operands:   # a random op: its key and site come from its place
            self.b.loc = self.loc(e.op_span)
            vals.insert(operands.index("key"), self.keys.key(self.b))
            attrs["site"] = self.keys.site(e.op_span)
        op = self.emit(name, vals, attrs, e.op_span, name)
        return op.results[0] if len(op.results) == 1 else Multi(op.results, name, e.span)

    def op_arguments(self, e: ast.Call, opdef: registry.OpDef) -> tuple[list, dict]:
        """The operand values and the options of a call of a registry op."""
        name = opdef.name
        operands, variadic, signature, _ = _arguments(opdef)
        slots: dict[str, object] = {}
        pos = list(e.args)
        for entry in signature:
            if not pos:
                break
            key = entry.lstrip("*")
            if key in variadic:
                if isinstance(pos[0], ast.ListExpr):
                    slots[key] = pos.pop(0).items
                else:
                    slots[key], pos = pos, []
            else:
                slots[key] = pos.pop(0)
        if pos:
            sig = ", ".join(signature)
            n = len(signature)
            raise self.error(f"{name}({sig}) takes at most {n} positional argument"
                             f"{'s' * (n != 1)}, got {len(e.args)}", pos[0].span)
        for kw in e.kwargs:
            if kw.name in slots:
                raise self.error(f"argument '{kw.name}' of {name} is given twice", kw.span)
            if "key" in operands and kw.name in IMPLICIT:
                raise self.error(f"{name}: '{kw.name}' is not an argument of a program: "
                                 f"the compiler supplies it", kw.span)
            if kw.name not in operands and opdef.option(kw.name) is None:
                known = ", ".join(o.name for o in opdef.options) or "none"
                raise self.error(f"{name} has no option '{kw.name}' (options: {known})",
                                 kw.span)
            is_list = kw.name in variadic and isinstance(kw.value, ast.ListExpr)
            slots[kw.name] = kw.value.items if is_list else kw.value
        missing = [o for o in operands if o not in slots and o not in variadic
                   and not (o == "key" and "key" in opdef.operands)]
        if missing:
            given = sum(1 for o in operands if o in slots)
            raise self.error(f"{name} needs {len(operands)} operand"
                             f"{'s' * (len(operands) != 1)} ({', '.join(opdef.operands)}), "
                             f"got {given}", e.op_span)
        vals = []
        for o in operands:
            if o == "key":
                continue
            exprs = slots.get(o, [])
            exprs = exprs if isinstance(exprs, list) else [exprs]
            vals += [self.value(x) for x in exprs]
        vals = self.meet(vals)
        attrs = {}
        ce = ConstEval(self.lookup, self.error, self.symbols, self.subst)
        for opt in opdef.options:
            if opt.name in slots:
                x = slots[opt.name]
                attrs[opt.name] = ce.check(opt.kind, ce.value(x),
                                           f"option '{opt.name}' of {name}", x.span)
        return vals, attrs

    # ---- indexing --------------------------------------------------------------------
    def index(self, e: ast.Index):
        base = self.value_or_group(e.value)
        if isinstance(base, GroupValue):
            return self.group_index(base, e)
        if isinstance(base, Weak):
            raise self.error("a number cannot be indexed", e.op_span)
        idx, dyn = [], []
        for sub in e.subscripts:
            if isinstance(sub, ast.Slice):
                parts = [None if p is None else self.static_int(p, "a slice bound")
                         for p in (sub.start, sub.stop, sub.step)]
                if parts[2] == 0:
                    raise self.error("a slice step cannot be zero", sub.step.span)
                idx.append(tuple(parts))
                continue
            v = self.value(sub)
            if isinstance(v, Weak):
                idx.append(self.static_int(sub, "an index", v))
            else:
                if v.type.rank != 0 or v.type.dtype not in ("i32", "i64"):
                    raise self.error(f"an index must be an integer scalar, got {v.type}",
                                     sub.span)
                idx.append("?")
                dyn.append(v)
        return self.emit("index", [base] + dyn, {"idx": tuple(idx)}, e.op_span,
                         "index").result

    def static_int(self, x, what: str, v=None) -> int:
        v = self.value(x) if v is None else v
        if not isinstance(v, Weak):
            raise self.error(f"{what} must be an integer constant", x.span)
        if not isinstance(v.value, int) or abs(v.value) >= 2 ** 63:
            raise self.error(f"{what} must be an integer, got {v.value}", x.span)
        return v.value

