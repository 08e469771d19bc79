"""What the AD passes share: `ADPass`, the base of ``reverse``, ``jvp`` and ``hvp`` (which
function, which inputs), and the helpers of their tangent and cotangent environments."""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..ir.builder import Builder
from ..ir.core import Function, Module, Value
from .pipeline import ModulePass


def zeros_like(b: Builder, v: Value) -> Value:
    """Zeros of `v`'s type: a symbolic zero made concrete where a value is required."""
    return b.emit("zeros", shape=v.type.shape, dtype=v.type.dtype)


def resolve_wrt(fn: Function, wrt) -> list[str]:
    """`wrt` checked against `fn`'s inputs; default: the ``param`` inputs."""
    from ..files.paths import expand_wrt
    wrt = expand_wrt(fn, list(wrt)) or [a for a in fn.arg_names if a in fn.params]
    if not wrt:
        raise AdcError(f"function '{fn.name}' has no inputs marked 'param'; "
                       f"say which to differentiate with --wrt", fn.loc)
    check_wrt(fn, wrt)
    return wrt


def check_wrt(fn: Function, wrt) -> None:
    """An error unless every name in `wrt` is a float input of `fn`."""
    for w in wrt:
        if w in fn.attrs.get("state", ()):
            raise AdcError(f"cannot differentiate with respect to '{w}': it is a state input "
                           f"(read and replaced by a step, never differentiated)", fn.loc)
        if w not in fn.arg_names:
            raise AdcError(f"'{w}' is not an input of '{fn.name}' "
                           f"(inputs: {', '.join(fn.arg_names)})", fn.loc)
        if not fn.arg(w).type.is_float:
            raise AdcError(f"cannot differentiate with respect to '{w}': "
                           f"it has integer type {fn.arg(w).type}", fn.loc)


@dataclass(frozen=True)
class ADPass(ModulePass):
    """A pass that adds a derivative program of one function to the module.

    `fn` names the function (default: the module's main function), `wrt` the differentiated
    inputs (default: those marked ``param``). Subclasses implement `derive`, which gets the
    module and the function's name and returns the module with the derivative added. As
    in any module pass, `run` gets a module it may mutate (the copy calling the pass makes,
    or a pipeline's own): `derive` inlines in place, never copying it again.
    """

    wrt: tuple[str, ...] = ()
    fn: str = ""

    def run(self, module: Module) -> Module:
        # a derivative is a training program: dropout draws, batch norm uses the batch
        name = self.fn or module.main.name
        from .train_mode import set_training
        return self.derive(set_training(module, name), name)

    def derive(self, module: Module, fn_name: str) -> Module:
        raise NotImplementedError
