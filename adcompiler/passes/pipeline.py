"""Pass registry, pipeline strings and the pass manager.

A pass is a frozen dataclass whose fields are its options, registered by name::

    @register_pass("cse")
    @dataclass(frozen=True)
    class CSE(FunctionPass):
        def run_on_function(self, fn, module): ...

Calling a pass, ``pass_(module)``, returns a new module and leaves its input untouched.
A pipeline string lists passes with options in braces; a comma inside braces continues the
previous option's list, so ``reverse{wrt=W1,b1 fn=main}`` sets ``wrt=("W1", "b1")`` and
``fn="main"`` (options may be separated by spaces or commas)::

    run_pipeline(module, "inline,cse,reverse{wrt=W1,b1},dce", verify=True)
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from ..diagnostics import AdcError
from ..ir.core import Function, Module
from ..ir.gcpause import collector_paused
from .clone import clone_module

PASSES: dict[str, type] = {}


def register_pass(name: str) -> Callable[[type], type]:
    """Class decorator: make the frozen dataclass `cls` available as `name` in pipelines."""
    def deco(cls: type) -> type:
        if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:
            raise TypeError(f"pass {name!r} must be a frozen dataclass")
        old = PASSES.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__,
                                                                       cls.__qualname__):
            raise ValueError(f"pass {name!r} is already registered by {old.__module__}")
        PASSES[name] = cls
        cls.pass_name = name
        return cls
    return deco


@dataclass(frozen=True)
class ModulePass:
    """A pass over the whole module: override `run` (which may mutate the clone it gets)."""

    def __call__(self, module: Module) -> Module:
        return self.run(clone_module(module))

    def run(self, module: Module) -> Module:
        raise NotImplementedError


@dataclass(frozen=True)
class FunctionPass(ModulePass):
    """A pass applied to every function, or only to the one named by the option `fn`.

    Subclasses override `run_on_function`, which mutates the (cloned) function in place.
    """

    fn: str = field(default="", kw_only=True)

    def run(self, module: Module) -> Module:
        for f in self.functions(module):
            self.run_on_function(f, module)
        return module

    def functions(self, module: Module) -> list[Function]:
        if not self.fn:
            return list(module.functions.values())
        if self.fn not in module:
            raise AdcError(f"{getattr(self, 'pass_name', type(self).__name__)}: no function "
                           f"'{self.fn}' (functions: {', '.join(module.functions) or 'none'})")
        return [module[self.fn]]

    def run_on_function(self, fn: Function, module: Module) -> None:
        raise NotImplementedError


# ---- lookup ---------------------------------------------------------------------------

def _discover() -> None:
    """Import every module of this package so that all their passes are registered."""
    pkg = sys.modules[__package__]
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{__package__}.{info.name}")


def get_pass(name: str) -> type:
    if name not in PASSES:
        _discover()
    if name not in PASSES:
        raise AdcError(f"unknown pass '{name}' (passes: {', '.join(sorted(PASSES))})")
    return PASSES[name]


# ---- option conversion ----------------------------------------------------------------

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _convert(text: str | list[str], hint: Any, what: str) -> Any:
    """Convert option text (a list for a comma list) to the field type `hint`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if isinstance(text, str) and text.lower() == "none" and str not in inner:
            return None
        errors = []
        for a in inner:
            try:
                return _convert(text, a, what)
            except AdcError as e:
                errors.append(e.message)
        raise AdcError(errors[0])
    if origin in (tuple, list):
        elem = args[0] if args else str
        items = text if isinstance(text, list) else [text] if text else []
        out = [_convert(t, elem, what) for t in items]
        return tuple(out) if origin is tuple else out
    if isinstance(text, list):
        raise AdcError(f"{what} takes one value, got '{','.join(text)}'")
    if origin is typing.Literal:
        if text not in args:
            raise AdcError(f"{what} must be one of {', '.join(map(str, args))}, got '{text}'")
        return text
    if hint is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise AdcError(f"{what} must be true or false, got '{text}'")
    if hint in (int, float):
        try:
            return hint(text)
        except ValueError:
            raise AdcError(f"{what} must be {'an int' if hint is int else 'a number'}, "
                           f"got '{text}'") from None
    return text


def _split_top(spec: str) -> list[str]:
    """Split `spec` at commas that are not inside braces."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(spec):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise AdcError(f"unbalanced '}}' in pipeline '{spec}'")
        elif ch == "," and depth == 0:
            parts.append(spec[start:k])
            start = k + 1
    if depth:
        raise AdcError(f"unbalanced '{{' in pipeline '{spec}'")
    parts.append(spec[start:])
    return [p.strip() for p in parts if p.strip()]


def _parse_options(name: str, body: str) -> dict[str, str | list[str]]:
    opts: dict[str, str | list[str]] = {}
    key = None
    for tok in body.replace(",", " , ").split():
        if tok == ",":
            continue
        if "=" in tok:
            key, val = (s.strip() for s in tok.split("=", 1))
            if key in opts:
                raise AdcError(f"pass '{name}': option '{key}' given twice")
            opts[key] = val
        elif key is None:
            raise AdcError(f"pass '{name}': expected option=value, got '{tok}'")
        else:
            prev = opts[key]
            opts[key] = (prev if isinstance(prev, list) else [prev] if prev else []) + [tok]
    return opts


def make_pass(name: str, options: dict[str, str | list[str]] | None = None):
    """An instance of the pass `name` with option texts converted to its field types."""
    cls = get_pass(name)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, text in (options or {}).items():
        if key not in fields:
            raise AdcError(f"pass '{name}' has no option '{key}' "
                           f"(options: {', '.join(fields) or 'none'})")
        kwargs[key] = _convert(text, hints[key], f"option '{key}' of pass '{name}'")
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise AdcError(f"pass '{name}': {e}") from None


def parse_pipeline(spec: str) -> list:
    """``"inline,cse,reverse{wrt=W1,b1}"`` -> a list of pass instances."""
    out = []
    for part in _split_top(spec):
        if "{" in part:
            if not part.endswith("}"):
                raise AdcError(f"expected '}}' at the end of '{part}'")
            name, body = part[:-1].split("{", 1)
            out.append(make_pass(name.strip(), _parse_options(name.strip(), body)))
        else:
            out.append(make_pass(part))
    return out


def pass_spec(p) -> str:
    """The pipeline text of a pass instance; options at their defaults are left out."""
    name = getattr(p, "pass_name", type(p).__name__)
    opts = []
    for f in dataclasses.fields(p):
        v = getattr(p, f.name)
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else object())
        if v == default:
            continue
        if isinstance(v, (tuple, list)):
            v = ",".join(map(str, v))
        elif isinstance(v, bool):
            v = str(v).lower()
        opts.append(f"{f.name}={v}")
    return f"{name}{{{' '.join(opts)}}}" if opts else name


# ---- the pass manager -----------------------------------------------------------------

def run_pipeline(module: Module, pipeline: str | list, print_ir_after_all: bool = False,
                 verify: bool = False, out: TextIO | None = None) -> Module:
    """Run `pipeline` (a string or a list of pass instances) on `module`; returns a new one.

    `print_ir_after_all` writes each intermediate module to `out` (default stderr) under a
    ``// ----- IR after <pass> -----`` header; `verify` runs the IR verifier after each pass.
    """
    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    out = out if out is not None else sys.stderr
    with collector_paused():
        return _run(module, passes, print_ir_after_all, verify, out)


def apply_pass(p, module: Module, owned: bool) -> tuple[Module, bool]:
    """Run the pass `p` on `module` as a pipeline does; returns the result and whether the
    pipeline alone holds it. Module passes of one run work on one copy: each pass's `run`
    may mutate it, so the copy is made once, not once per pass."""
    if isinstance(p, ModulePass) and type(p).__call__ is ModulePass.__call__:
        if not owned:
            module = clone_module(module)
        return p.run(module), True
    # any other callable: its result may share parts with its input, unless it says not
    return p(module), bool(getattr(p, "returns_fresh_module", False))


def _run(module: Module, passes: list, print_ir_after_all: bool, verify: bool,
         out: TextIO) -> Module:
    owned = False
    for p in passes:
        module, owned = apply_pass(p, module, owned)
        if verify:
            from ..ir.verifier import verify as verify_module
            verify_module(module)
        if print_ir_after_all:
            from ..ir.printer import print_module
            text = print_module(module)
            out.write(f"// ----- IR after {pass_spec(p)} -----\n{text.rstrip()}\n\n")
    return module
