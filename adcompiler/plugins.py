"""Extension points: user ops and passes, and loading the modules that define them.

An op needs a type rule, a VJP rule (reverse mode), a JVP rule (forward mode, the ``jvp``
and ``hvp`` passes) and a kernel per array module; optionally a FLOP count, a CUDA formula
(then fusion and the CUDA backend take it), a batching rule, canonicalization patterns and
whether its kernel returns new arrays. `register_op` declares every fact in the op registry
(which TDSL, the passes, the emitters, the memory model, buffer planning and the verifier
consult) and the kernel in the runtime's kernel table (which the executor and emitted
Python programs call), so a plugin op is first-class on every path. A pass is a frozen dataclass
registered with `adcompiler.register_pass`. Both take effect when the defining module is
imported, so ``adc ... --plugin mypkg.ops`` only has to import it first: `load_plugins`.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Callable, Iterable, Sequence

from .diagnostics import AdcError, ShapeError
from .ops import registry
from .ops.registry import OpDef, Option

__all__ = ["register_op", "unregister_op", "load_plugins", "PluginError", "Option"]


class PluginError(AdcError):
    """A plugin module could not be found or failed while being imported."""


def register_op(name: str, infer: Callable, *, kernel: Callable | None,
                vjp: Callable | None = None, jvp: Callable | None = None,
                operands: Sequence[str] = ("x",), options: Sequence[Option] = (),
                traits: Iterable[str] = (), doc: str = "",
                positional: Sequence[str] | None = None, flops=None,
                cuda: Callable | None = None, cuda_reduce=None,
                index_bound: Callable | None = None, batch: Callable | None = None,
                fresh=False, rewrites: Sequence = (), splat: Callable | None = None,
                reads_row: Callable | None = None, sliced_shape: Callable | None = None,
                param_role: Callable | None = None, replace: bool = False) -> OpDef:
    """Declare op `name` and its NumPy/CuPy kernel; returns the registry's `OpDef`.

    * ``infer(types, attrs)`` returns the result `TensorType` (or a list of them) or raises
      `ShapeError`; `types` are the operands' types, `attrs` the options with defaults.
    * ``vjp(b, op, cts)`` emits IR with the `Builder` `b` and returns one cotangent per
      operand (``None`` for a zero); ``cts`` holds one cotangent per result (``None`` is zero).
    * ``jvp(b, op, tangents)`` returns one tangent per result (``None`` is zero), used by
      forward mode (``jvp``) and Hessian-vector products.
    * ``kernel(xp, *operands, **attrs)`` computes the op with the array module `xp`;
      ``fresh=True`` says it always returns a new array (never an operand or a view); it
      may also be ``fn(op) -> bool``, deciding per IR op.
    * `flops`, `cuda`, `cuda_reduce`, `index_bound`, `batch`, `rewrites`, `splat`,
      `reads_row`, `sliced_shape`, `param_role`: see `adcompiler.ops.registry`; a CUDA formula is usually
      built with `adcompiler.emit.c` (``expr``, ``fn``, ``lit``), rewrites with
      `adcompiler.ops.patterns`.

    `replace=True` overrides an earlier registration of `name` (e.g. on reloading a module);
    otherwise a second registration is an error, as for built-in ops.
    """
    from adc_runtime.kernels import KERNELS, PLUGIN_OPS
    from adc_runtime.kernels import kernel as register_kernel
    if replace:
        unregister_op(name)
    elif name in KERNELS and name not in registry.REGISTRY:
        raise ValueError(f"kernel {name!r} is already registered")
    opdef = registry.register(name, _guard_infer(name, infer), operands=operands,
                              options=options, traits=traits, vjp=_guard_rule(name, vjp, "VJP"),
                              jvp=_guard_rule(name, jvp, "JVP"), doc=doc, positional=positional,
                              flops=flops, cuda=cuda, cuda_reduce=cuda_reduce,
                              index_bound=index_bound, batch=batch, rewrites=rewrites,
                              splat=splat, reads_row=reads_row, sliced_shape=sliced_shape,
                              fresh=fresh, param_role=param_role)
    if kernel is not None:
        register_kernel(name)(_guard_kernel(name, kernel))
    PLUGIN_OPS.add(name)
    return opdef


# A plugin's callables are user code: an exception in one (or a sys.exit) is reported as an
# error of the plugin op at the TDSL line that uses it, not as an internal error of adc.
_USER_FAILURES = (Exception, SystemExit)


def _failure(name: str, what: str, e: BaseException) -> str:
    detail = f"sys.exit({e.code!r})" if isinstance(e, SystemExit) else \
        f"{type(e).__name__}: {e}"
    return f"plugin op '{name}': its {what} failed ({detail})"


def _guard_infer(name: str, infer: Callable) -> Callable:
    def guarded(types, attrs):
        try:
            return infer(types, attrs)
        except AdcError:
            raise
        except _USER_FAILURES as e:
            raise ShapeError(_failure(name, "type rule", e)) from e  # the caller adds the loc
    return guarded


def _guard_rule(name: str, rule: Callable | None, what: str) -> Callable | None:
    if rule is None:
        return None

    def guarded(b, op, values):
        try:
            return rule(b, op, values)
        except AdcError as e:
            raise e.with_loc(op.loc)
        except _USER_FAILURES as e:
            raise PluginError(_failure(name, f"{what} rule", e), op.loc) from e
    return guarded


def _guard_kernel(name: str, kernel: Callable) -> Callable:
    def guarded(*args, **kwargs):
        try:
            return kernel(*args, **kwargs)
        except _USER_FAILURES as e:  # the executor reports a ValueError at the op's line
            raise ValueError(_failure(name, "kernel", e)) from e
    return guarded


def unregister_op(name: str) -> None:
    """Forget op `name` and its kernel (a no-op for names never registered)."""
    from adc_runtime.kernels import KERNELS, PLUGIN_OPS
    PLUGIN_OPS.discard(name)
    registry.REGISTRY.pop(name, None)
    KERNELS.pop(name, None)


# plugin files loaded, by module name: their real paths (a second file of the same base
# name, or one named like a module already imported, would be mistaken for it)
_FILES: dict[str, str] = {}


def _load_one(name: str) -> ModuleType:
    if name.endswith(".py"):  # a file path rather than a module name
        if not os.path.isfile(name):
            raise PluginError(f"cannot load plugin '{name}': no such file")
        mod_name = os.path.splitext(os.path.basename(name))[0]
        path = os.path.realpath(name)
        if mod_name in sys.modules:   # (a plugin forgotten by its module is loaded again)
            if _FILES.get(mod_name) == path:
                return sys.modules[mod_name]    # the same file again: loaded once
            if mod_name in _FILES:
                raise PluginError(f"plugin '{name}' has the base name of the plugin file "
                                  f"'{_FILES[mod_name]}' loaded before; rename one of them")
            raise PluginError(f"plugin '{name}': its base name '{mod_name}' is the name of "
                              "a module already imported, which would be used instead; "
                              "rename the file")
        if not mod_name.isidentifier():
            raise PluginError(f"plugin '{name}': its base name '{mod_name}' is not a module "
                              "name; rename the file")
        _FILES[mod_name] = path
        spec = importlib.util.spec_from_file_location(mod_name, name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[mod_name]
            del _FILES[mod_name]
            raise
        return module
    return importlib.import_module(name)


def load_plugins(names: Iterable[str]) -> list[ModuleType]:
    """Import each plugin (a module name, or a path to a ``.py`` file; an entry may list
    several separated by commas) so that its ops and passes register themselves.

    Importing is idempotent: a module already imported is not run again. A missing module
    or an exception inside the plugin is a `PluginError` naming the plugin.
    """
    loaded = []
    for entry in names:
        for name in (n.strip() for n in entry.split(",")):
            if not name:
                continue
            try:
                loaded.append(_load_one(name))
            except PluginError:
                raise
            except ModuleNotFoundError as e:
                if e.name and name.startswith(e.name):  # the plugin itself, not its imports
                    raise PluginError(f"cannot load plugin '{name}': no module named "
                                      f"'{e.name}' (is it on PYTHONPATH?)") from None
                raise PluginError(f"plugin '{name}' failed to import: {e}") from e
            except AdcError as e:
                raise PluginError(f"plugin '{name}': {e.message}") from e
            except SystemExit as e:
                raise PluginError(f"plugin '{name}' called sys.exit({e.code!r}) while being "
                                  "imported") from None
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: B036  (user code may raise anything)
                raise PluginError(f"plugin '{name}' failed to import "
                                  f"({type(e).__name__}: {e})") from None
            except Exception as e:
                raise PluginError(f"plugin '{name}' failed to import "
                                  f"({type(e).__name__}: {e})") from e
    return loaded
