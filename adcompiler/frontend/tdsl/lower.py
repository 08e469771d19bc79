"""Lowering a TDSL syntax tree to an IR `Module`.

Functions keep their source order. A ``grad f`` rule becomes the function ``f.grad`` with
``attrs["grad_of"] = "f"``, arguments (f's inputs, f's results, cotangents of f's results)
and one result per input of f; a ``tangent f`` rule becomes ``f.tangent`` with
``attrs["tangent_of"] = "f"``, arguments (f's inputs, their tangents) and one result per
result of f. Argument types come from f's declaration. A call binds the callee's symbolic
dimensions from its arguments (``def ste_round(x: f32[N])`` called with an ``f32[5]``): when
they bind to other dims than the callee's own names, the callee (and its rules) is lowered
again as a specialization ``f.N5`` with the dims substituted, placed before ``f`` in the
module so that the default function stays the last ``def``.
"""
from __future__ import annotations

from ...diagnostics import AdcError, Loc
from ...ir.core import Block, Function, Module
from ...ir.types import DTYPES, Dim, TensorType
from . import ast
from .function import FunctionLowerer
from .groups import declare, resolve_groups, stacked_paths
from .roles import check_call_roles, no_role
from .randomness import KEY, KEY_INPUT, drawing_functions
from .state import declare_state


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class ModuleLowerer:
    def __init__(self, file: str):
        self.file = file

    def loc(self, span: ast.Span) -> Loc:
        return Loc(self.file, span.line, span.col)

    def error(self, msg: str, span: ast.Span) -> AdcError:
        return AdcError(msg, self.loc(span))

    def type(self, t: ast.TypeExpr) -> TensorType:
        if t.dtype not in DTYPES:
            raise self.error(f"unknown dtype '{t.dtype}' (expected one of "
                             f"{', '.join(DTYPES)})", t.span)
        return TensorType(t.dtype, t.shape)

    def unique(self, targets) -> None:
        seen = set()
        for t in targets:
            if t.name in seen:
                raise self.error(f"duplicate parameter '{t.name}'", t.span)
            seen.add(t.name)

    # ---- the module ------------------------------------------------------------------
    def lower(self, tree: ast.Module) -> Module:
        if not any(isinstance(d, ast.FuncDef) for d in tree.defs):
            span = tree.defs[0].span if tree.defs else ast.Span(1, 1, 1, 1)
            raise self.error("the file defines no function (def NAME(...) -> TYPE {...})",
                             span)
        defs: dict[str, ast.FuncDef] = {}
        self.tree_defs = tree.defs
        self.groups = resolve_groups(tree.defs, self.error)
        self.decls: dict[str, list] = {}        # each function's inputs as declared
        self.group_decls: dict[str, list] = {}  # those of the functions with group inputs
        sigs: dict[str, tuple[list[TensorType], list[TensorType]]] = {}
        for d in tree.defs:
            if isinstance(d, ast.FuncDef):
                if d.name in defs:
                    raise self.error(f"function '{d.name}' is already defined at line "
                                     f"{defs[d.name].span.line}", d.name_span)
                defs[d.name] = d
                self.unique(d.params)
                decls = self.decls[d.name] = [declare(p, self.groups, self.type, self.error)
                                              for p in d.params]
                if any(dc.ref is not None for dc in decls):
                    self.group_decls[d.name] = decls
                sigs[d.name] = ([t for dc in decls for _, t in dc.leaves],
                                [self.result_type(t) for t in d.results])
        self.defs, self.sigs, self.rules = defs, sigs, {}
        self.drawing = drawing_functions(defs)
        self.specs: dict = {}
        self.spec_stack: list[str] = []
        self.edges: dict[str, list] = {}
        module, functions, jobs = Module(), {}, []
        self.module, self.functions = module, functions
        for d in tree.defs:
            if isinstance(d, ast.FuncDef):
                ins, outs = sigs[d.name]
                fn = Function(d.name, self.inputs(d, ins), outs,
                              params=self.param_names(d), loc=self.loc(d.span))
                stacked = stacked_paths(self.decls[d.name])
                if stacked:
                    fn.attrs["stacked"] = stacked
                roles = {k: r for dc in self.decls[d.name] for k, r in dc.roles.items()}
                if roles:
                    fn.attrs["roles"] = roles
                declare_state(d, fn, tree.defs, self.error, self.decls[d.name])
                functions[d.name] = fn
                spans = self.spans(d)
                what = f"function '{d.name}'"
                count = self.count_msg(what, len(outs))
            elif isinstance(d, ast.GroupDef):
                continue
            else:
                fn, spans, what, count = self.rule(d, sigs, module)
                self.rules[(d.name, d.kind)] = d
            module.add(fn)
            jobs.append((d, fn, spans, what, count))
        for d, fn, spans, what, count in jobs:
            self.lower_body(d, fn, spans, what, count, {})
        check_call_roles(module)
        check_recursion([n for n in module.functions if n in self.edges], self.edges)
        return self.ordered(module)

    def lower_body(self, d, fn: Function, spans, what: str, count, subst: dict) -> None:
        fl = FunctionLowerer(self.file, self.functions, fn, what, spans, subst=subst,
                             specialize=self.specialize,
                             decls=self.group_decls.get(d.name) if isinstance(
                                 d, ast.FuncDef) else None, group_decls=self.group_decls)
        fl.lower(d.body, d.close_span, count)
        self.edges.setdefault(fn.name, []).extend(fl.calls)

    def ordered(self, module: Module) -> Module:
        """The module with each specialization placed just before the function it copies."""
        if not self.specs:
            return module
        before: dict[str, list[Function]] = {}
        for (base, _), spec in self.specs.items():
            before.setdefault(base, []).append(spec)
        spec_names = {f.name for fs in before.values() for f in fs}
        for fs in list(before.values()):
            for f in list(fs):
                for kind in ("grad", "tangent"):
                    rule = module.rule_for(f.name, kind)
                    if rule is not None:
                        fs.append(rule)
                        spec_names.add(rule.name)
        out = Module()
        for name, f in module.functions.items():
            if name in spec_names:
                continue
            for g in before.get(name, []):
                out.add(g)
            out.add(f)
        return out

    def specialize(self, name: str, subst: dict[str, Dim], loc) -> Function:
        """`name` lowered again with its symbolic dims replaced by `subst` (memoized)."""
        key = (name, tuple(sorted((k, str(v)) for k, v in subst.items())))
        if key in self.specs:
            return self.specs[key]
        if name in self.spec_stack:
            cycle = self.spec_stack[self.spec_stack.index(name):] + [name]
            raise AdcError(f"recursive call {' -> '.join(cycle)} (recursion is not "
                           "supported)", loc)
        d = self.defs[name]
        spell = str.maketrans({"*": "x", "+": "p", "-": "m"})   # T-1 -> Tm1: a plain name
        tag = "_".join(f"{k}{str(v).translate(spell)}" for k, v in sorted(subst.items())
                       if v != k)
        spec_name = f"{name}.{tag}"

        def sub(t: TensorType) -> TensorType:
            return t.with_shape(subst.get(x, x) if isinstance(x, str) else x for x in t.shape)
        ins, outs = self.sigs[name]
        sigs = {name: ([sub(t) for t in ins], [sub(t) for t in outs])}
        base = self.functions[name]
        fn = Function(spec_name, self.inputs(d, sigs[name][0]),
                      sigs[name][1], params=set(base.params), loc=base.loc)
        declare_state(d, fn, [], self.error, self.decls[name])   # its state results too
        for attr in ("stacked", "roles"):
            if attr in base.attrs:
                fn.attrs[attr] = {k: subst.get(v, v) if isinstance(v, str) and
                                  attr == "stacked" else v for k, v in base.attrs[attr].items()}
        self.specs[key] = fn
        self.module.add(fn)
        self.spec_stack.append(name)
        try:
            self.lower_body(d, fn, self.spans(d), f"function '{name}'",
                            self.count_msg(f"function '{name}'", len(outs)), subst)
            for kind in ("grad", "tangent"):
                r = self.rules.get((name, kind))
                if r is None:
                    continue
                rfn, spans, what, count = self.rule(r, sigs, self.module, of=spec_name)
                self.module.add(rfn)
                self.lower_body(r, rfn, spans, what, count, subst)
        finally:
            self.spec_stack.pop()
        return fn

    def arg_names(self, d: ast.FuncDef) -> list[str]:
        """The IR inputs of `d`: one per tensor input, one per leaf of a group input."""
        return [n for dc in self.decls[d.name] for n in dc.flat_names()]

    def param_names(self, d: ast.FuncDef) -> set[str]:
        """The IR inputs marked param: those of ``param`` inputs, every leaf of a group but
        its state fields."""
        return {n for dc in self.decls[d.name] if dc.is_param for n in dc.flat_names()
                if n not in dc.state}

    def spans(self, d: ast.FuncDef) -> list[ast.Span]:
        """The source span of each IR input of `d` (a group's leaves: the group input's)."""
        return [dc.span for dc in self.decls[d.name] for _ in dc.leaves]

    def result_type(self, t: ast.TypeExpr) -> TensorType:
        if t.dtype in self.groups:
            raise self.error(f"a function returns tensors, not a group ({t.dtype}): return "
                             "the tensors", t.span)
        no_role(t, "a result has no role (roles are declared on params)", self.error)
        return self.type(t)

    def inputs(self, d: ast.FuncDef, types: list[TensorType]) -> Block:
        """The body block of `d` with its inputs, and the key input if it draws."""
        names = self.arg_names(d)
        if d.name not in self.drawing:
            return Block(types, names)
        for p in d.params:
            if p.name == KEY_INPUT:
                raise self.error(f"'{KEY_INPUT}' is the name of the key input of a function "
                                 f"that draws random values; rename this input", p.span)
        for kind in ("grad", "tangent"):
            if any(isinstance(r, ast.RuleDef) and r.name == d.name and r.kind == kind
                   for r in self.tree_defs):
                raise self.error(f"function '{d.name}' draws random values and cannot have "
                                 f"a {kind} rule", d.name_span)
        return Block(types + [KEY], names + [KEY_INPUT])

    @staticmethod
    def count_msg(what: str, n: int):
        return lambda got: f"{what} declares {_plural(n, 'result')}, but the return gives {got}"

    def rule(self, d: ast.RuleDef, sigs, module: Module, of: str | None = None):
        """The `Function` of a ``grad``/``tangent`` rule, typed from the primal's signature
        (the rule of function `of`, a specialization of `d.name`, when given)."""
        if d.name not in sigs:
            raise self.error(f"{d.kind} rule for unknown function '{d.name}'", d.name_span)
        if d.name in self.group_decls:
            raise self.error(f"{d.kind} rule for '{d.name}': a function with group inputs "
                             "cannot have a custom derivative rule", d.name_span)
        of = of or d.name
        name = f"{of}.{d.kind}"
        if name in module:
            raise self.error(f"function '{d.name}' already has a {d.kind} rule (line "
                             f"{module[name].loc.line})", d.name_span)
        ins, outs = sigs[d.name]
        if d.kind == "grad":
            arg_types, results = ins + outs + outs, ins
            parts = (f"{_plural(len(ins), 'input')}, {_plural(len(outs), 'result')}, "
                     f"{_plural(len(outs), 'result cotangent')}")
            noun, why = "cotangent", f"one per input of '{d.name}'"
        else:
            arg_types, results = ins + ins, outs
            parts = f"{_plural(len(ins), 'input')}, {_plural(len(ins), 'input tangent')}"
            noun, why = "tangent", f"one per result of '{d.name}'"
        if len(d.params) != len(arg_types):
            raise self.error(f"{d.kind} rule for '{d.name}' takes "
                             f"{_plural(len(arg_types), 'parameter')} ({parts}), got "
                             f"{len(d.params)}", d.name_span)
        self.unique(d.params)
        fn = Function(name, Block(arg_types, [p.name for p in d.params]), results,
                      attrs={f"{d.kind}_of": of}, loc=self.loc(d.span))
        what = f"{d.kind} rule for '{d.name}'"

        def count(got):
            return f"{what} must return {_plural(len(results), noun)} ({why}), got {got}"
        return fn, [p.span for p in d.params], what, count


def check_recursion(order: list[str], edges: dict[str, list]) -> None:
    """Raise at the call that closes a cycle of calls (direct or mutual recursion)."""
    state: dict[str, int] = {}     # 1: on the current path, 2: finished
    for root in order:
        if root in state:
            continue
        path, stack = [root], [(root, 0)]
        state[root] = 1
        while stack:
            name, k = stack[-1]
            calls = edges.get(name, [])
            if k == len(calls):
                stack.pop()
                path.pop()
                state[name] = 2
                continue
            stack[-1] = (name, k + 1)
            callee, loc = calls[k]
            if state.get(callee) == 1:
                cycle = path[path.index(callee):] + [callee]
                raise AdcError(f"recursive call {' -> '.join(cycle)} (recursion is not "
                               "supported)", loc)
            if callee not in state:
                state[callee] = 1
                path.append(callee)
                stack.append((callee, 0))


def lower_module(tree: ast.Module, file: str = "<input>") -> Module:
    return ModuleLowerer(file).lower(tree)
