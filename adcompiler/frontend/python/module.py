"""A compiled Python function as an IR `Module`: the function called from user code (last,
so it is the module's main function) after every function it calls, each specialized to
what its call passes (`Unit.specialize`, memoized per unit)."""
from __future__ import annotations

import ast as py
import re
from dataclasses import dataclass

from ...diagnostics import AdcError
from ...ir.core import Block, Function, Module
from ...ir.gcpause import collector_paused
from ...ops import registry
from ..tdsl import ast
from . import pytree
from .lowerer import PyLowerer
from .signature import ParamSpec
from .source import FunctionSource, PythonError, function_source
from .values import Tensor


@dataclass
class Spec:
    """A specialization: the IR function `fn` (named `name`) and the structure of what it
    returns (`template`, its arrays replaced by `callees.Slot`s)."""

    name: str
    fn: Function
    template: object
    inputs: list          # the IR input names, per parameter (a list per ParamSpec)


_SOURCES: dict = {}


def source_of(f) -> FunctionSource:
    """`function_source(f)`, cached per function object and code."""
    key = (f, f.__code__)
    src = _SOURCES.get(key)
    if src is None:
        src = _SOURCES[key] = function_source(f)
    return src


class Unit:
    def __init__(self):
        self.functions: dict[str, Function] = {}   # by the name TDSL calls them
        self.order: list[Function] = []
        self.specs: dict = {}
        self.stack: list = []
        self.names: set[str] = set()

    def fn_name(self, f) -> str:
        base = re.sub(r"\W", "_", f.__name__.replace("<lambda>", "lambda")) or "f"
        name, k = base, 1
        while name in self.names or name in registry.REGISTRY:
            k += 1
            name = f"{base}.{k}"
        self.names.add(name)
        return name

    def specialize(self, f, specs: list[ParamSpec], loc=None, entry: bool = False) -> Spec:
        key = (f, tuple(s.key() for s in specs))
        spec = self.specs.get(key)
        if spec is not None:
            return spec
        if any(k[0] is f for k in self.stack):
            cycle = " -> ".join(k[0].__name__ for k in self.stack) + f" -> {f.__name__}"
            raise PythonError(f"recursive call {cycle} (recursion is not supported)", loc)
        self.stack.append(key)
        try:
            spec = self.build(f, specs, entry)
        finally:
            self.stack.pop()
        self.specs[key] = spec
        return spec

    def build(self, f, specs: list[ParamSpec], entry: bool) -> Spec:
        src = source_of(f)
        node = src.node
        name = self.fn_name(f)
        params = {a.arg: a for a in _all_args(node)}
        taken = {n.id for n in py.walk(node) if isinstance(n, py.Name)} | set(params)
        types, names, spans, statics, inputs, stable = [], [], [], {}, [], set()
        for ps in specs:
            where = params.get(ps.name, node)
            span = src.span(where)
            runtime = [lf for lf in ps.leaves if lf.runtime]
            if ps.tree == pytree.LEAF and runtime:
                leaf_names = [ps.name]
            else:
                all_names = pytree.leaf_names(ps.name, ps.tree, taken | set(names))
                leaf_names = [n for n, lf in zip(all_names, ps.leaves) if lf.runtime]
            inputs.append(leaf_names)
            it = iter(leaf_names)
            values = [Tensor(ast.Name(next(it), span)) if lf.runtime else lf.value
                      for lf in ps.leaves]
            if not (ps.tree == pytree.LEAF and runtime):
                statics[ps.name] = pytree.unflatten(ps.tree, values)
                stable.update(leaf_names)
            for n, lf in zip(leaf_names, runtime):
                types.append(lf.type)
                names.append(n)
                spans.append(span)
        fn = Function(name, Block(types, names), [], loc=src.loc(node))
        lowerer = PyLowerer(self, src, f, fn, spans, statics, entry)
        lowerer.stable |= stable
        value, ret_node = lowerer.run()
        template = lowerer.finish(value, ret_node)
        self.functions[name] = fn
        self.order.append(fn)
        return Spec(name, fn, template, inputs)

    def module(self) -> Module:
        m = Module()
        for fn in self.order:
            m.add(fn)
        return m


def _all_args(node) -> list:
    a = node.args
    out = list(a.posonlyargs) + list(a.args) + list(a.kwonlyargs)
    out += [x for x in (a.vararg, a.kwarg) if x is not None]
    return out


def compile_specialized(f, specs: list[ParamSpec]) -> tuple[Module, Spec]:
    """The module of Python function `f` specialized to `specs` and the entry's `Spec`.
    Every problem is an `AdcError` located in the user's file."""
    unit = Unit()
    try:
        with collector_paused():
            spec = unit.specialize(f, specs, entry=True)
    except PythonError:
        raise
    except AdcError as e:   # from the TDSL lowering: the same location, rendered
        raise PythonError(e.message, e.loc) from None
    except RecursionError:
        raise AdcError(f"'{f.__name__}' is nested too deeply to compile") from None
    return unit.module(), spec
