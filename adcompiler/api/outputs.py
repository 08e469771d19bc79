"""The names of a compiled function's outputs, as OUT.npz keys (spec §7): a function derived
by a pass names its outputs from the attributes the pass leaves (``adjoint_of`` and ``wrt``:
``out..., grad_<w>...``), so they survive IR files."""
from __future__ import annotations

from ..ir.core import Function, Module


def result_keys(n: int, state=()) -> list[str]:
    """``out`` or ``out0, out1, ...`` for the declared results, then ``state_<input>`` for
    the new value of each state input (tdsl.md section 9)."""
    k = n - len(state)
    return (["out"] if k == 1 else [f"out{j}" for j in range(k)]) + [f"state_{s}" for s in state]


def derived_from(fn: Function) -> str | None:
    """What pass made `fn`, or None for a function as written."""
    for key in ("adjoint_of", "hvp_of", "tangent_program_of", "batch_of", "rof_of"):
        if key in fn.attrs:
            return key
    return None


def output_names(module: Module, fn: Function) -> list[str]:
    """The OUT.npz keys of `fn`'s outputs, read from what derived it."""
    attrs, n = fn.attrs, len(fn.result_types)
    wrt = list(attrs.get("wrt", ()))
    kind = derived_from(fn)
    source = module[attrs[kind]] if kind and attrs[kind] in module else fn
    state = source.attrs.get("state", ())
    if kind == "batch_of" and attrs["batch_of"] in module:
        return output_names(module, module[attrs["batch_of"]])
    if kind == "adjoint_of":
        return result_keys(n - len(wrt), state) + [f"grad_{w}" for w in wrt]
    if kind == "hvp_of":
        return result_keys(n - 2 * len(wrt), state) + [f"grad_{w}" for w in wrt] + \
            [f"hvp_{w}" for w in wrt]
    if kind == "tangent_program_of":
        outs = result_keys(n // 2, state)
        return outs + ["tangent_" + o for o in outs]
    return result_keys(n, state)
