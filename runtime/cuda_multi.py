"""Multi-tensor launches: a run of fused elementwise kernels with the same source (the
optimizer's update of each parameter, in a training step) as one ``RawKernel`` launch over
a table of pointers.

`batches(fn_ops, specs)` finds the runs: two or more consecutive ``fused`` ops whose kernel
text (parameters, statements, preamble) is one, whose results share a shape per op and
whose operands each have that shape or none (a 0-d learning rate or bias correction). The
kernel binds each operand per element (``x[i]``, or ``x[0]`` for a 0-d one) and runs the
fused group's own statements, so every element gets the arithmetic of the single kernel;
the bits agree with one ``ElementwiseKernel`` per op wherever NVRTC contracts the same
products into FMAs in both (the statements are the same text, compiled in one unit each).

One launch covers every tensor: block ``b`` runs elements ``start[b]`` to ``start[b] +
CHUNK`` of tensor ``tensor[b]``. The tables (pointers, element counts, 0-d flags, block
map) are uploaded once per set of array addresses and kept: a training step whose
parameters, state and planned buffers stay in place uploads them once.
"""
from __future__ import annotations

import numpy

THREADS = 256
CHUNK = THREADS * 4  # elements per block

_MODULES: dict = {}


def batches(ops: list, specs: dict) -> list[list]:
    """Runs of two or more consecutive fused ops of `ops` that one multi-tensor launch can
    run (module doc), none reading another's results, in order."""
    out, run, key = [], [], None
    for op in list(ops) + [None]:
        k = _key(op, specs) if op is not None else None
        made = {r for o in run for r in o.results}
        if k is not None and k == key and not any(v in made for v in op.operands) \
                and not any(v in made for v in specs[op].captures):
            run.append(op)  # independent of the run's earlier members
            continue
        if len(run) > 1:
            out.append(run)
        run, key = ([op], k) if k is not None else ([], None)
    return out


def _key(op, specs):
    spec = specs.get(op) if op.name == "fused" else None
    if spec is None or getattr(spec, "kind", "elementwise") != "elementwise":
        return None
    shape = op.results[0].type.shape
    if any(r.type.shape != shape for r in op.results):
        return None
    operands = list(op.operands) + [v for v in spec.captures]
    if any(v.type.shape not in ((), shape) for v in operands):
        return None
    if "float16" in spec.in_params + spec.out_params:
        return None  # a RawModule has no float16 type (CuPy's kernels bring their own)
    return (spec.in_params, spec.out_params, spec.operation, spec.preamble)


def source(spec, name: str) -> str:
    """The multi-tensor kernel of `spec`'s statements."""
    ins = [p.split() for p in spec.in_params.split(", ")]
    outs = [p.split() for p in spec.out_params.split(", ")]
    nargs = len(ins) + len(outs)
    bind = []
    for k, (dtype, pname) in enumerate(ins):
        ct = _ctype(dtype)
        bind.append(f"        const {ct} {pname} = ((const {ct} *)p[{k}])[i * s[{k}]];")
    for k, (dtype, pname) in enumerate(outs):
        ct = _ctype(dtype)
        bind.append(f"        {ct} &{pname} = (({ct} *)p[{len(ins) + k}])[i];")
    body = "\n".join("        " + line for line in spec.operation.splitlines())
    return (f"{spec.preamble}\n"
            f'extern "C" __global__ void {name}(const long long *ptrs, const long long *steps,'
            f" const long long *sizes, const int *tensor, const long long *start) {{\n"
            f"    const int t = tensor[blockIdx.x];\n"
            f"    const long long *p = ptrs + (long long)t * {nargs};\n"
            f"    const long long *s = steps + (long long)t * {nargs};\n"
            f"    const long long end = start[blockIdx.x] + {CHUNK} < sizes[t] ? "
            f"start[blockIdx.x] + {CHUNK} : sizes[t];\n"
            f"    for (long long i = start[blockIdx.x] + threadIdx.x; i < end; "
            f"i += blockDim.x) {{\n" + "\n".join(bind) + f"\n{body};\n    }}\n}}\n")


_CTYPES = {"float16": "float16", "float32": "float", "float64": "double", "int32": "int",
           "int64": "long long", "bool": "bool"}


def _ctype(dtype: str) -> str:
    return _CTYPES[numpy.dtype(dtype).name]


def pointer(a) -> int:
    """The device address of `a` (CuPy), or its host address (the host stand-in)."""
    data = a.data
    return data.ptr if hasattr(data, "ptr") else a.ctypes.data


class MultiLaunch:
    """One batch: its kernel, and the tables of the last set of arrays it ran on."""

    def __init__(self, cp, spec, name: str):
        self.cp, self.name = cp, name
        self.nin = len(spec.in_params.split(", "))
        src = source(spec, name)
        mod = _MODULES.get((id(cp), src))
        if mod is None:
            mod = _MODULES[(id(cp), src)] = cp.RawModule(code=src, options=("--std=c++14",))
        self.fn = mod.get_function(name)
        self._key = None
        self._tables = None

    def __call__(self, members: list) -> bool:
        """Run every member ``(inputs, outputs)``; False (nothing launched) where an array
        is not C-contiguous (the caller then launches the members one by one)."""
        arrays = [a for ins, outs in members for a in (*ins, *outs)]
        if not all(a.flags.c_contiguous for a in arrays):
            return False
        key = tuple(map(pointer, arrays))
        if key != self._key:
            self._tables = self._upload(members, key)
            self._key = key
        blocks = self._tables[-1]
        if blocks:
            self.fn((blocks,), (THREADS,), self._tables[:-1])
        return True

    def _upload(self, members, key):
        nargs = len(key) // len(members)
        steps, sizes, tensor, start = [], [], [], []
        for t, (ins, outs) in enumerate(members):
            n = outs[0].size
            sizes.append(n)
            steps += [0 if a.ndim == 0 else 1 for a in ins] + [1] * len(outs)
            for b in range(0, n, CHUNK):
                tensor.append(t)
                start.append(b)
        assert len(steps) == len(key) == nargs * len(members)
        up = self.cp.asarray
        return (up(numpy.array(key, numpy.int64)), up(numpy.array(steps, numpy.int64)),
                up(numpy.array(sizes, numpy.int64)), up(numpy.array(tensor or [0], numpy.int32)),
                up(numpy.array(start or [0], numpy.int64)), len(tensor))
