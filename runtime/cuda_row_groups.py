"""The adjoints of softmax, layernorm and rmsnorm in reverse programs run on the GPU as one
row kernel each (`adc_runtime.cuda_rows`), found by the shape of their ops as the CPU's
row passes find them (`adc_runtime.row_patterns`).

Fusion would split such an adjoint between a reduction kernel and elementwise kernels (its
reductions close groups), so the CUDA path leaves the ops of every adjoint found by
`structural_members` out of its groups (``adcompiler.emit.cuda.ensure_fused`` with
``rows=True``); the CUDA executors then find them again with the dimensions bound (`match`,
through `adc_runtime.row_fusion.plan`: generated step code in function bodies, the
interpreter's schedule in loop bodies, `CudaExecutor.row_groups`) and run each as one
launch at its last op, writing the values read after it: the adjoint, and for layernorm
and rmsnorm the normalized x where the gamma gradient reads it.

A group declines at run time, and its ops run one by one, where an operand is not
C-contiguous or a row is empty. An output whose planned buffer overlaps an operand other
than as that very array goes to a new array (the kernels read each element's operands
before writing its results, and every loop gives a thread the same elements, so exact
aliasing is safe). The constants a pattern names (eps, rmsnorm's threshold) come from the
program's own ``const`` ops, with their bits.
"""
from __future__ import annotations

import numpy

from . import cuda_rows
from .cuda_multi import pointer
from .kernels import DTYPES
from .row_patterns import group_outputs, match_tree

NAMES = ("softmax", "layernorm", "rmsnorm")


def host_consts(ops) -> dict:
    """value -> its NumPy array, for the 0-d ``const`` ops (no operands) among `ops` (a
    function's walk: a loop body reads constants of the body around it)."""
    out = {}
    for op in ops:
        if op.name == "const" and not op.operands and op.results[0].type.rank == 0:
            out[op.results[0]] = numpy.asarray(op.attrs["value"],
                                               dtype=DTYPES[op.attrs["dtype"]])
    return out


def _find(op, consts):
    """(name, match) of the adjoint rooted at `op` whose constants have its dtype."""
    if op.name != "mul" or len(op.results) != 1 or op.results[0].type.dtype not in ("f32",
                                                                                  "f64"):
        return None
    r = op.results[0]
    want = numpy.dtype(DTYPES[r.type.dtype])
    for name in NAMES:
        m = match_tree(name, r, consts)
        if m is not None and r.type.rank > 0 and all(
                c.dtype == want for k, c in m.env.items() if k.startswith("const:")):
            if name == "rmsnorm" and not m.env["const:eps"][()] > 0:
                continue
            return name, m
    return None


def _operands(name, m):
    """The group's operands in the launcher's order, and the values it may also write."""
    if name == "softmax":
        return [m.env["dy"], m.env["y"]], ()
    return [m.env["x"], m.env["ct"], m.env["gamma"]], (m.env["xhat"],)


def _reads(block):
    read_at: dict = {}
    for k, op in enumerate(block.ops):
        for inner in op.walk():
            for v in inner.operands:
                read_at.setdefault(v, []).append(k)
    return read_at


def structural_members(block, consts=None) -> set:
    """The ops of `block` (not of nested regions) that form a row adjoint whose values but
    the adjoint (and the normalized x) are read only inside it, whatever the dimensions;
    `consts` as `host_consts` gives them (default: those of `block`)."""
    consts = host_consts(block.ops) if consts is None else consts
    read_at = _reads(block)
    index = {op: k for k, op in enumerate(block.ops)}
    taken: set = set()
    for op in reversed(block.ops):
        if op in taken:
            continue
        found = _find(op, consts)
        if found is None:
            continue
        name, m = found
        inputs, extra = _operands(name, m)
        members = list(m.ops)
        if any(v.defining_op in m.ops for v in inputs) or taken & set(members):
            continue
        if group_outputs(members, op.results[0], extra, read_at, index) is not None:
            taken.update(members)
    return taken


def match(cp):
    """A `row_fusion.plan` matcher: ``(members, inputs, outputs, run)`` of the row adjoint
    rooted at an op, ``run(*inputs, *planned buffers) -> results | None`` launching its
    kernel on `cp`'s arrays."""
    def found(op, resolve, consts, read_at, index):
        hit = _find(op, consts)
        if hit is None:
            return None
        name, m = hit
        inputs, extra = _operands(name, m)
        members = list(m.ops)
        if any(v.defining_op in m.ops for v in inputs):
            return None
        r = op.results[0]
        shape = tuple(resolve(r.type.shape))
        want = [shape, shape] + ([] if name == "softmax" else [shape[-1:]])
        if any(v.type.dtype != r.type.dtype or tuple(resolve(v.type.shape)) != w
               for v, w in zip(inputs, want)):
            return None
        outputs = group_outputs(members, r, extra, read_at, index)
        if outputs is None:
            return None
        consts_of = {k[6:]: c[()] for k, c in m.env.items() if k.startswith("const:")}
        return members, inputs, outputs, _runner(cp, name, consts_of, len(outputs))
    return found


def _runner(cp, name, consts, n_out):
    def run(*args):
        ins, bufs = args[:-n_out], list(args[-n_out:])
        x = ins[0]
        if x.ndim == 0 or x.shape[-1] == 0 or not all(a.flags.c_contiguous for a in ins):
            return None
        outs = [_fresh(cp, x, b, ins) for b in bufs]
        if name == "softmax":
            dy, y = ins
            return (cuda_rows.softmax_grad(cp, y, dy, outs[0]),)
        xhat = outs[1] if n_out == 2 else None
        x, ct, gamma = ins
        if name == "layernorm":
            cuda_rows.layernorm_grad(cp, x, gamma, ct, consts["eps"], outs[0], xhat)
        else:
            cuda_rows.rmsnorm_grad(cp, x, gamma, ct, consts["eps"], outs[0], xhat,
                                   consts["thr"])
        return tuple(outs)
    return run


def _fresh(cp, like, buf, ins):
    """`buf` where it is a C-contiguous array that meets no operand but as that very array,
    else a new array shaped as `like`."""
    if buf is None or not buf.flags.c_contiguous or buf.shape != like.shape:
        return cp.empty_like(like)
    lo = pointer(buf)
    hi = lo + buf.nbytes
    for a in ins:
        a_lo = pointer(a)
        if a_lo == lo and a.shape == buf.shape and a.dtype == buf.dtype:
            continue
        if a_lo < hi and lo < a_lo + a.nbytes:
            return cp.empty_like(like)
    return buf
