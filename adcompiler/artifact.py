"""Compiled programs as files: the IR text of the module plus the little a call needs.

A saved `Compiled` is one IR file whose first line is a comment holding JSON metadata (the
function, its inputs and output names, what the call returns: `compiled.finish`'s spec,
the dtype, device, bound dims and vmap axes); IR comments are ignored, so ``adc run`` and
`adc.load` read the same file as a plain program. Pickling goes through the same text:
nothing but IR text and JSON is stored, and loading runs no code from the file.

Output names follow OUT.npz (spec §7): a function derived by a pass names its outputs from
the attributes the pass leaves (``adjoint_of`` and ``wrt``: ``out..., grad_<w>...``), so
they survive IR files.
"""
from __future__ import annotations

import json
import os

from .diagnostics import AdcError
from .ir.core import Function, Module

HEADER = "// adc-compiled "


def result_keys(n: int) -> list[str]:
    return ["out"] if n == 1 else [f"out{k}" for k in range(n)]


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
    if kind == "batch_of" and attrs["batch_of"] in module:
        return output_names(module, module[attrs["batch_of"]])
    if kind == "adjoint_of":
        return result_keys(n - len(wrt)) + [f"grad_{w}" for w in wrt]
    if kind == "hvp_of":
        return result_keys(n - 2 * len(wrt)) + [f"grad_{w}" for w in wrt] + \
            [f"hvp_{w}" for w in wrt]
    if kind == "tangent_program_of":
        outs = result_keys(n // 2)
        return outs + ["tangent_" + o for o in outs]
    return result_keys(n)


def to_text(compiled) -> str:
    from .ir.printer import print_module
    meta = {"fn": compiled.fn_name, "inputs": compiled.inputs, "outputs": compiled.outputs,
            "spec": compiled.spec, "device": compiled.device, "dims": compiled.dims,
            "dtype": compiled.dtype, "in_axes": compiled.in_axes}
    return HEADER + json.dumps(meta) + "\n" + print_module(compiled.module)


def compiled_from_text(text: str, filename: str = "<compiled>"):
    """A `Compiled` from `to_text`'s output."""
    from .api import parse_ir
    from .transforms import Compiled
    first, _, rest = text.partition("\n")
    if not first.startswith(HEADER):
        raise AdcError(f"{filename}: not a saved adc program (its first line is not "
                       f"'{HEADER.strip()} {{...}}')")
    try:
        meta = json.loads(first[len(HEADER):])
        module = parse_ir(text, filename)
        c = Compiled(module, meta["fn"], meta["inputs"], meta["spec"], meta["device"],
                     meta["dims"], meta["dtype"])
        c.in_axes = dict(meta["in_axes"])
    except (ValueError, KeyError, TypeError) as e:
        raise AdcError(f"{filename}: bad metadata line ({type(e).__name__}: {e})") from None
    if c.fn_name not in module:
        raise AdcError(f"{filename}: no function '{c.fn_name}'")
    return c


def save(compiled, path) -> None:
    from .cli.output import save_text
    save_text(os.fspath(path), to_text(compiled))


def load_compiled(source):
    """A `Compiled` saved by ``Compiled.save`` (a path), or its text."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and
                                           not source.startswith(HEADER)):
        path = os.fspath(source)
        try:
            with open(path, encoding="utf-8") as f:
                return compiled_from_text(f.read(), path)
        except OSError as e:
            raise AdcError(f"cannot read '{path}': {e.strerror}") from None
    return compiled_from_text(source)
