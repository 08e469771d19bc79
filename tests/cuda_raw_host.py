"""Host execution of ``cupy.RawModule`` kernels: the exact CUDA source compiled by g++ and
run with every thread of a block as a fiber (``ucontext``), so that ``__syncthreads`` and
warp shuffles behave as on a GPU for kernels that call them with the whole block.

A launch runs the blocks one after another; in a block, the scheduler runs each thread
until it reaches a barrier or returns, and releases the barrier once every thread is
waiting there. ``__shfl_xor_sync`` writes the caller's value into its lane's slot, waits
for the block, reads its partner's slot and waits again: exact for kernels whose every
thread shuffles together (the row kernels of ``adc_runtime.cuda_rows`` do), undefined for
shuffles in divergent code, which this stand-in does not detect. ``__shared__`` variables
are ``static``: one per kernel, shared by the threads of the block running. ``threadIdx``,
``blockIdx``, ``blockDim`` and ``gridDim`` are the scheduler's (one-dimensional launches).

Each kernel gets a host launcher ``adc_launch_<name>(void **args, grid, block)`` built from
its ``extern "C" __global__`` signature (each parameter ``TYPE NAME``); arrays are passed as
their data pointers, NumPy scalars by value in their C type. A module compiles into a
shared library of its own (modules may define the same kernel names), cached by source.

What differs from a GPU is what `cuda_host` lists (no FMA contraction, glibc's math
functions); sums follow the kernel's own order exactly."""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from cuda_host import CXXFLAGS, GXX, PRELUDE

RAW_PRELUDE = r"""
#include <ucontext.h>
#include <functional>
#include <vector>
namespace adc_host {
struct Dim { unsigned x, y, z; };
static Dim g_thread, g_block, g_block_dim, g_grid_dim;
struct Fiber { ucontext_t ctx; int state; };        // 0 runnable, 1 at a barrier, 2 done
static Fiber *g_fibers;
static unsigned g_cur;
static ucontext_t g_sched;
static const std::function<void()> *g_body;
static unsigned char g_slots[1024][8];
static void fiber_entry() { (*g_body)(); g_fibers[g_cur].state = 2; }
inline void barrier() {
    g_fibers[g_cur].state = 1;
    swapcontext(&g_fibers[g_cur].ctx, &g_sched);
}
template <typename V> V shfl_xor(V v, int lane) {
    std::memcpy(g_slots[g_thread.x], &v, sizeof(V));
    barrier();
    V r;
    std::memcpy(&r, g_slots[g_thread.x ^ (unsigned)lane], sizeof(V));
    barrier();
    return r;
}
inline void launch(unsigned grid, unsigned block, const std::function<void()> &body) {
    const std::size_t stack = 1 << 16;
    std::vector<Fiber> fibers(block);
    std::vector<char> stacks(stack * block);
    g_fibers = fibers.data();
    g_body = &body;
    g_block_dim = {block, 1, 1};
    g_grid_dim = {grid, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        g_block = {b, 0, 0};
        for (unsigned t = 0; t < block; ++t) {
            getcontext(&fibers[t].ctx);
            fibers[t].ctx.uc_stack.ss_sp = &stacks[t * stack];
            fibers[t].ctx.uc_stack.ss_size = stack;
            fibers[t].ctx.uc_link = &g_sched;
            makecontext(&fibers[t].ctx, fiber_entry, 0);
            fibers[t].state = 0;
        }
        for (;;) {
            for (unsigned t = 0; t < block; ++t) {
                if (fibers[t].state != 0) continue;
                g_cur = t;
                g_thread = {t, 0, 0};
                swapcontext(&g_sched, &fibers[t].ctx);
            }
            bool waiting = false;
            for (unsigned t = 0; t < block; ++t)
                if (fibers[t].state == 1) { fibers[t].state = 0; waiting = true; }
            if (!waiting) break;
        }
    }
}
}  // namespace adc_host
#define threadIdx (adc_host::g_thread)
#define blockIdx (adc_host::g_block)
#define blockDim (adc_host::g_block_dim)
#define gridDim (adc_host::g_grid_dim)
#define __syncthreads() adc_host::barrier()
#define __shfl_xor_sync(mask, v, lane) adc_host::shfl_xor((v), (lane))
#define __shared__ static
"""

_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)', re.S)
_PARAM = re.compile(r"^(.*?)(\w+)\s*$", re.S)
_SCALARS = {"int64": ctypes.c_longlong, "int32": ctypes.c_int, "float32": ctypes.c_float,
            "float64": ctypes.c_double}


def kernel_signatures(code: str) -> dict[str, list[str]]:
    """name -> parameter types of each ``extern "C" __global__`` kernel of `code`."""
    out = {}
    for name, params in _KERNEL.findall(code):
        types = []
        for p in params.split(","):
            m = _PARAM.match(" ".join(p.split()))
            types.append(m.group(1).strip())
        out[name] = types
    return out


def _launchers(code: str) -> str:
    parts = []
    for name, types in kernel_signatures(code).items():
        args = ", ".join(f"*({t} *)args[{k}]" for k, t in enumerate(types))
        parts.append(f'extern "C" void adc_launch_{name}(void **args, unsigned grid, '
                     f"unsigned block) {{\n    adc_host::launch(grid, block, [&]() {{ "
                     f"{name}({args}); }});\n}}\n")
    return "".join(parts)


class HostRawModule:
    """`cupy.RawModule(code=..., options=...)` on the host; `launches` logs (name, "raw")."""

    def __init__(self, cache: Path, launches: list, code: str, options=(), **kwargs):
        self.code, self.options, self.launches = code, tuple(options), launches
        source = PRELUDE + RAW_PRELUDE + code + "\n" + _launchers(code)
        digest = hashlib.sha1((source + " ".join(CXXFLAGS)).encode()).hexdigest()[:24]
        lib = Path(cache) / f"raw_{digest}.so"
        if not lib.exists():
            fd, cpp = tempfile.mkstemp(suffix=".cpp", dir=cache)
            with os.fdopen(fd, "w") as f:
                f.write(source)
            tmp = f"{cpp[:-4]}.so"
            try:
                done = subprocess.run([GXX, *CXXFLAGS, "-o", tmp, cpp], capture_output=True,
                                      text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"g++ failed on the raw module:\n{done.stderr[:4000]}")
                os.replace(tmp, lib)
            finally:
                for p in (cpp, tmp):
                    if os.path.exists(p):
                        os.unlink(p)
        self.lib = ctypes.CDLL(str(lib))
        self.signatures = kernel_signatures(code)

    def get_function(self, name: str):
        if name not in self.signatures:
            raise Exception(f"named symbol not found: {name}")
        return HostRawFunction(self, name)


class HostRawFunction:
    """A kernel of a `HostRawModule`: ``fn(grid, block, args, shared_mem=0)``."""

    def __init__(self, module: HostRawModule, name: str):
        self.module, self.name = module, name
        self.fn = getattr(module.lib, f"adc_launch_{name}")
        self.fn.restype = None

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None):
        grid = (grid,) if isinstance(grid, int) else tuple(grid)
        block = (block,) if isinstance(block, int) else tuple(block)
        assert all(g == 1 for g in grid[1:]) and all(b == 1 for b in block[1:]), \
            "the host runs one-dimensional launches"
        assert block[0] % 32 == 0 and block[0] <= 1024, block
        types = self.module.signatures[self.name]
        assert len(args) == len(types), (self.name, len(args), types)
        held = []
        for a, t in zip(args, types):
            if isinstance(a, np.ndarray):
                assert "*" in t, (self.name, t)
                held.append(ctypes.c_void_p(a.ctypes.data if a.size else 0))
            else:
                assert isinstance(a, np.generic) and "*" not in t, (self.name, t, a)
                held.append(_SCALARS[a.dtype.name](a.item()))
        ptrs = (ctypes.c_void_p * max(1, len(held)))(
            *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in held])
        self.module.launches.append((self.name, "raw"))
        self.fn(ptrs, ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]))


def with_raw_modules(cp, cache: Path, launches: list):
    """`cp` (a host stand-in of CuPy) with ``RawModule`` running on the host; modules of
    one source are built once per stand-in."""
    built: dict = {}

    def raw_module(code: str, options=(), **kwargs):
        key = (code, tuple(options))
        if key not in built:
            built[key] = HostRawModule(cache, launches, code, options, **kwargs)
        return built[key]

    cp.RawModule = raw_module
    return cp


def with_graphs(cp):
    """`cp` with CuPy's stream capture: while a `Stream` captures, kernel launches (fused,
    raw) are recorded, not run; ``end_capture`` gives a graph whose ``launch`` runs them in
    order on the arrays they were given (the addresses, as on a GPU). Only kernels are
    recorded: a test that captures anything else fails as CuPy's capture would not."""
    state: dict = {"capture": None}
    elementwise, reduction = cp.ElementwiseKernel, cp.ReductionKernel

    def record(thunk):
        if state["capture"] is None:
            thunk()
        else:
            state["capture"].append(thunk)

    class Elementwise(elementwise):
        def compute(self, ins, outs):
            record(lambda: elementwise.compute(self, ins, outs))

    class Reduction(reduction):
        def compute(self, ins, out, axis, keepdims):
            record(lambda: reduction.compute(self, ins, out, axis, keepdims))

    raw_module = cp.RawModule

    class CapturedFunction:
        def __init__(self, fn):
            self.fn = fn

        def __call__(self, grid, block, args, shared_mem=0, stream=None):
            record(lambda: self.fn(grid, block, args, shared_mem))

    class Module:
        def __init__(self, *args, **kwargs):
            self.module = raw_module(*args, **kwargs)

        def get_function(self, name):
            return CapturedFunction(self.module.get_function(name))

    class Graph:
        def __init__(self, thunks):
            self.thunks = thunks

        def launch(self, stream=None):
            for t in self.thunks:
                t()

    class Stream:
        def __init__(self, non_blocking=False):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def begin_capture(self):
            assert state["capture"] is None, "already capturing"
            state["capture"] = []

        def end_capture(self):
            graph, state["capture"] = Graph(state["capture"]), None
            return graph

        def synchronize(self):
            pass

    cp.ElementwiseKernel, cp.ReductionKernel, cp.RawModule = Elementwise, Reduction, Module
    cp.cuda.Stream = Stream
    cp.capture_state = state
    return cp


def stand_in_fixture():
    """A module-scoped pytest fixture of `raw_stand_in`, its kernels built in pytest's cache
    (``cp = stand_in_fixture()`` in a test module)."""
    import pytest

    @pytest.fixture(scope="module")
    def cp(request, tmp_path_factory):
        cache = getattr(request.config, "cache", None)
        return raw_stand_in(cache.mkdir("cuda-host") if cache is not None
                            else tmp_path_factory.mktemp("h"))
    return cp


def raw_stand_in(cache: Path):
    """The host stand-in of CuPy with raw modules (`with_raw_modules`), the launches it ran
    in its ``launches`` list; kernels built in `cache`."""
    from cuda_host import HostKernels, host_cupy
    launches: list = []
    cp = with_raw_modules(host_cupy(HostKernels(cache), launches), cache, launches)
    cp.launches = launches
    return cp


def nvrtc_for(arch: str, monkeypatch):
    """CuPy's compiler module with `arch` supplied in place of the device's (its lookups ask
    the device); skips the test where CuPy's NVRTC is not usable."""
    import pytest
    pytest.importorskip("cupy")
    try:
        from cupy.cuda import compiler, nvrtc
        nvrtc.getVersion()
    except Exception as e:
        pytest.skip(f"CuPy's NVRTC is not usable here ({type(e).__name__}: {e})")
    wrapped = compiler._get_arch_for_options_for_nvrtc.__wrapped__
    monkeypatch.setattr(compiler, "_get_arch", lambda: arch)
    monkeypatch.setattr(compiler, "_get_arch_for_options_for_nvrtc",
                        lambda a=None: wrapped(a or arch))
    return compiler
