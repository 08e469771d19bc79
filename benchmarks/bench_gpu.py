"""Time the forward pass and the gradient of the benchmark models with adc and its peers.

    python benchmarks/bench_gpu.py                    # on one GPU, full sizes
    python benchmarks/bench_gpu.py --cpu --steps 2    # small sizes on the CPU (smoke test)
    python benchmarks/bench_gpu.py --cpu --size medium   # CPU figures worth comparing

Models (benchmarks/models/*.tdsl, and the same models in peers.py): an MLP (batch 512,
1024-4096-4096-1024), a transformer block (batch 16, sequence 512, width 768, 12 heads),
the 64-layer residual MLP (width 1024, batch 512), a 12-block GPT (batch 16, sequence 512,
width 768, 12 heads, 8192 classes) and a two-convolution CNN (batch 128 of 3x32x32), all
float32; adc runs the residual MLP under remat ``none`` and ``sqrt``. The default
``--models`` are the first three.

Convolutions: adc runs them as im2col and one cuBLAS GEMM (``adc_runtime.kernels.conv``
on CuPy arrays); CuPy 14 removed its cuDNN bindings, so there is no cuDNN path to take.
PyTorch runs the CNN twice, with cuDNN and without (its own im2col and GEMM), so that the
table measures both schemes. Peers, where installed: PyTorch eager, ``torch.compile`` and
``jax.jit`` (of the loss and of ``jax.grad``). TF32 is off everywhere
(NVIDIA_TF32_OVERRIDE=0, CUPY_TF32=0, torch's allow_tf32 flags, JAX highest precision).

Each runner does its warm-up steps first (compilation happens there and is reported apart as
"compile s": adc's pass pipeline and kernel builds, torch.compile's and XLA's compilation),
then times `--repeats` blocks of `--steps` steps between two CUDA events (JAX: wall clock
after block_until_ready, since it runs on its own streams) and reports the median per step.
Peak memory: adc, a MemoryHook on CuPy's pool during one step plus the resident inputs;
PyTorch, max_memory_allocated after a reset; JAX, the device's peak_bytes_in_use (not
resettable, so the largest of anything run so far). On the CPU, adc reports its live-byte
accounting and the peers no memory.

Every runner's gradient of the last step is compared with adc's (the first adc row of its
model): the largest ||g - g_adc|| / ||g_adc|| over the parameters, so a faster runner that
computes something else shows.

The table (Markdown) is printed and written to `--out`.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# before any framework is imported: float32 matmuls in full precision everywhere
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
os.environ.setdefault("CUPY_TF32", "0")
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402

FULL = {
    "mlp": dict(B=512, D0=1024, D1=4096, D2=4096, D3=1024),
    "transformer_block": dict(B=16, T=512, D=768, H=12, K=64, F=3072),
    "deep_mlp": dict(B=512, D=1024, L=64),
    "gpt": dict(L=12, B=16, T=512, D=768, H=12, K=64, F=3072, V=8192),
    "cnn": dict(B=128),
}
MEDIUM = {  # a CPU step of tens of milliseconds: kernels, not Python, dominate
    "mlp": dict(B=128, D0=256, D1=1024, D2=1024, D3=256),
    "transformer_block": dict(B=2, T=128, D=256, H=4, K=64, F=1024),
    "deep_mlp": dict(B=128, D=256, L=64),
    "gpt": dict(L=4, B=2, T=128, D=256, H=4, K=64, F=1024, V=1024),
    "cnn": dict(B=16),
}
SMALL = {
    "mlp": dict(B=8, D0=16, D1=32, D2=32, D3=16),
    "transformer_block": dict(B=2, T=8, D=16, H=2, K=8, F=32),
    "deep_mlp": dict(B=4, D=8, L=16),
    "gpt": dict(L=2, B=2, T=8, D=16, H=2, K=8, F=32, V=24),
    "cnn": dict(B=2),
}
SIZES = {"full": FULL, "medium": MEDIUM, "small": SMALL}
REMAT = {"deep_mlp": ("none", "sqrt")}
# models with convolutions: PyTorch also runs them without cuDNN (its im2col and GEMM, the
# scheme adc's kernels use; CuPy 14 has no cuDNN bindings, so adc has no cuDNN path)
CONVOLUTIONS = ("cnn",)


@dataclass
class Row:
    model: str
    runner: str
    fwd_ms: float | None = None
    grad_ms: float | None = None
    compile_s: float | None = None
    peak_bytes: int | None = None
    note: str = ""
    launches: int | None = None   # CUDA kernels of one gradient step (torch.profiler)
    extra: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)   # parameter name -> gradient (NumPy)


# ---- inputs --------------------------------------------------------------------------

def load(model: str, sizes: dict, mode: str, dtype: str = "f32"):
    from adcompiler.cli.compile import compile_program
    return compile_program(str(HERE / "models" / f"{model}.tdsl"), mode, bind=sizes,
                           dtype=None if dtype == "f32" else dtype)


# --dtype: the floating type every runner computes in (adc's programs are rewritten to it)
NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16}
BF16_REFUSED = ("not run: bf16 is no IR dtype of adc; its bf16 training emulates it on "
                "the CPU by rounding f32 results (--precision bf16), which the GPU path "
                "does not do")


def cast_inputs(inputs: dict, dtype: str) -> dict:
    """The float inputs in `dtype` (f32, f16); labels as they are."""
    want = NUMPY_DTYPES[dtype]
    return {k: v.astype(want) if v.dtype.kind == "f" else v for k, v in inputs.items()}


def make_inputs(fn, sizes: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """float32 inputs: x ~ N(0, 1); weights scaled by 1/sqrt(fan-in); layernorm gains ~ 1
    and biases ~ 0 (vectors, or stacked per layer: ``[L, n]`` named g*, be*, c*); integer
    inputs (class labels) uniform in ``[0, V)``."""
    rng = np.random.default_rng(seed)
    out = {}
    for a in fn.args:
        shape = tuple(d if isinstance(d, int) else sizes[d] for d in a.type.shape)
        if a.type.dtype.startswith("i"):
            out[a.name] = rng.integers(0, sizes["V"], shape).astype(np.int64)
            continue
        x = rng.standard_normal(shape)
        vector = len(shape) == 1 or (len(shape) == 2 and a.name.startswith(("g", "be", "c")))
        if vector:
            x = (1.0 if a.name.startswith("g") else 0.0) + 0.1 * x
        elif len(shape) >= 2 and a.name != "x":
            x *= 0.5 / np.sqrt(shape[-2])
        out[a.name] = x.astype(np.float32)
    return out


# ---- timing --------------------------------------------------------------------------

class Clock:
    """Median time per step: CUDA events (`event()` makes one) or the wall clock."""

    def __init__(self, steps: int, repeats: int, warmup: int, event=None, sync=None):
        self.steps, self.repeats, self.warmup = steps, repeats, warmup
        self.event, self.sync = event, sync or (lambda: None)

    def warm(self, step) -> float:
        """Run the warm-up steps; returns the seconds they took (compilation included)."""
        t0 = time.perf_counter()
        for _ in range(self.warmup):
            step()
        self.sync()
        return time.perf_counter() - t0

    def time(self, step) -> float:
        """Milliseconds per step (median over the repeats)."""
        per = []
        for _ in range(self.repeats):
            if self.event is not None:
                start, end = self.event(), self.event()
                start.record()
                for _ in range(self.steps):
                    step()
                end.record()
                end.synchronize()
                per.append(self._elapsed(start, end) / self.steps)
            else:
                t0 = time.perf_counter()
                for _ in range(self.steps):
                    step()
                self.sync()
                per.append((time.perf_counter() - t0) * 1e3 / self.steps)
        return statistics.median(per)

    @staticmethod
    def _elapsed(start, end) -> float:
        if hasattr(start, "elapsed_time"):  # torch.cuda.Event
            return start.elapsed_time(end)
        import cupy
        return cupy.cuda.get_elapsed_time(start, end)


# ---- adc -----------------------------------------------------------------------------

def run_adc(model: str, sizes: dict, remat: str, clock_for, gpu: bool,
            executor: str = "step", graphs: bool = False, dtype: str = "f32",
            fused_attention: bool = True) -> Row:
    from adcompiler.cli.remat import apply_remat
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime.executor import Executor
    label = "adc" + (f" remat={remat}" if model in REMAT else "")
    if dtype == "bf16":
        return Row(model, label, note=BF16_REFUSED)
    t0 = time.perf_counter()
    fwd, grad = load(model, sizes, "forward", dtype), load(model, sizes, "reverse", dtype)
    if remat != "none":
        grad.module, _, _ = apply_remat(grad.module, grad.run_name, remat, sizes)
    programs = {}
    for kind, comp in (("fwd", fwd), ("grad", grad)):
        # the step code runs the softmax/norm adjoints as row kernels: fusion leaves them
        module = ensure_fused(comp.module, rows=executor == "step") if gpu else comp.module
        programs[kind] = (module, comp.run_name)
    compile_s = time.perf_counter() - t0
    inputs = cast_inputs(make_inputs(fwd.primal, sizes), dtype)
    if gpu:
        import cupy as cp
        from adc_runtime.cuda import CudaExecutor, peak_memory_hook
        from adc_runtime.cuda_step import CudaStepExecutor
        arrays = {k: cp.asarray(v) for k, v in inputs.items()}
        resident = sum(a.nbytes for a in arrays.values())
        clock = clock_for("cupy")
        executors = {}

        def stepper(kind):
            module, name = programs[kind]
            fn = module[name]
            ex = CudaStepExecutor(module, cp, {}, kernel_specs(module), graphs=graphs,
                                  fused_attention=fused_attention) if executor == "step" \
                else CudaExecutor(module, cp, {}, kernel_specs(module),
                                  fused_attention=fused_attention)
            executors[kind] = ex
            args = [arrays[a.name] for a in fn.args]
            return lambda: ex.call(fn, args)
        to_numpy = cp.asnumpy
    else:
        clock = clock_for(None)

        def stepper(kind):
            module, name = programs[kind]
            fn = module[name]
            ex = Executor(module, np, {})
            args = [inputs[a.name] for a in fn.args]
            return lambda: ex.call(fn, args)
        to_numpy = np.asarray

    if gpu:
        label += f" ({executor}{', graphs' if graphs else ''}" \
                 f"{'' if fused_attention else ', library attention'})"
    row = Row(model, label)
    steps = {kind: stepper(kind) for kind in ("fwd", "grad")}
    compile_s += clock.warm(steps["fwd"]) + clock.warm(steps["grad"])
    row.compile_s = compile_s
    row.fwd_ms, row.grad_ms = clock.time(steps["fwd"]), clock.time(steps["grad"])
    if gpu:
        ex = executors["grad"]
        before = dict(ex.launches)
        steps["grad"]()
        row.extra["adc_launches"] = {k: ex.launches[k] - before[k] for k in before}
        row.launches = cuda_kernels_per_step(steps["grad"])
    outs = steps["grad"]()
    row.grads = {n[len("grad_"):]: to_numpy(o) for n, o in zip(grad.output_names(), outs)
                 if n.startswith("grad_")}
    # peak memory of one step by a fresh executor: its buffer arena is allocated in it
    if gpu:
        hook = peak_memory_hook(cp)
        with hook:
            stepper("grad")()
            cp.cuda.get_current_stream().synchronize()
        row.peak_bytes = resident + hook.peak
    else:
        module, name = programs["grad"]
        ex = Executor(module, np, {})
        ex.call(module[name], [inputs[a.name] for a in module[name].args])
        row.peak_bytes = ex.peak
    return row


def cuda_kernels_per_step(step) -> int | None:
    """The CUDA kernels one call of `step` launches, as torch.profiler (CUPTI) sees them:
    every kernel of the process, CuPy's and cuBLAS's included; None without torch."""
    if not installed("torch"):
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events()  # device-side events, less copies and fills
               if str(getattr(e, "device_type", "")).endswith("CUDA")
               and not e.name.startswith(("Memcpy", "Memset")))


def standin_launches(model: str, sizes: dict) -> dict:
    """adc's launches per gradient step on the host stand-in of CuPy (tests/cuda_host.py:
    the generated kernels' exact source run by g++): ``adc`` kernels (generated, row and
    multi-tensor kernels, counted by the stand-in as it ran them) and ``library`` ops
    (each one or more CuPy kernels or a cuBLAS call on a GPU)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    import tempfile
    from cuda_host import HostKernels, host_cupy
    from cuda_raw_host import with_raw_modules
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    from adc_runtime.cuda_step import CudaStepExecutor
    grad = load(model, sizes, "reverse")
    module = ensure_fused(grad.module, rows=True)
    cache = Path(tempfile.gettempdir()) / "adc-cuda-host"
    cache.mkdir(exist_ok=True)
    ran: list = []
    cp = with_raw_modules(host_cupy(HostKernels(cache), ran), cache, ran)
    fn = module[grad.run_name]
    inputs = make_inputs(grad.primal, sizes)
    ex = CudaStepExecutor(module, cp, {}, kernel_specs(module))
    args = [inputs[a.name] for a in fn.args]
    with np.errstate(all="ignore"):
        ex.call(fn, args)
        before, n = dict(ex.launches), len(ran)
        ex.call(fn, args)
    counted = {k: ex.launches[k] - before[k] for k in before}
    assert counted["adc"] == len(ran) - n, (counted, len(ran) - n)
    return counted


# ---- peers ---------------------------------------------------------------------------

def run_torch(model: str, sizes: dict, compiled: bool, clock_for, gpu: bool,
              use_cudnn: bool = True, dtype: str = "f32") -> Row:
    """PyTorch eager or compiled; without `use_cudnn`, convolutions run PyTorch's own
    im2col and GEMM kernels instead of cuDNN's."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    # cuDNN's flags through their context manager: a process that imported PyTorch's test
    # utilities (the OpInfo suite) has frozen their global setters
    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=cudnn.enabled and use_cudnn, benchmark=cudnn.benchmark,
                     deterministic=cudnn.deterministic, allow_tf32=False):
        row = _torch_row(torch, model, sizes, compiled, clock_for, gpu, dtype)
    if not use_cudnn:
        row.runner += " (no cuDNN)"
    return row


def _torch_row(torch, model: str, sizes: dict, compiled: bool, clock_for, gpu: bool,
               dtype: str) -> Row:
    dev = "cuda" if gpu else "cpu"
    fwd = load(model, sizes, "forward")
    params = set(fwd.primal.params) or {a.name for a in fwd.primal.args}
    names = [a.name for a in fwd.primal.args]
    inputs = make_inputs(fwd.primal, sizes)
    low = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    ts = [torch.tensor(inputs[n], device=dev) for n in names]
    ts = [(t.to(low) if t.is_floating_point() else t).requires_grad_(n in params)
          for n, t in zip(names, ts)]
    wrt = [t for n, t in zip(names, ts) if n in params]
    ops = peers.torch_ops()
    loss = lambda *a: peers.MODELS[model](ops, *a)  # noqa: E731
    t0 = time.perf_counter()
    if compiled:
        loss = torch.compile(loss)
    clock = clock_for("torch")

    def fwd_step():
        with torch.no_grad():
            return loss(*ts)

    def grad_step():
        return torch.autograd.grad(loss(*ts), wrt)

    row = Row(model, "torch.compile" if compiled else "torch eager")
    warm = clock.warm(fwd_step) + clock.warm(grad_step)
    row.compile_s = (time.perf_counter() - t0) if compiled else None
    row.extra["warm_s"] = warm
    row.fwd_ms, row.grad_ms = clock.time(fwd_step), clock.time(grad_step)
    if gpu:
        row.launches = cuda_kernels_per_step(grad_step)
    wrt_names = [n for n in names if n in params]
    row.grads = {n: g.detach().float().cpu().numpy() for n, g in zip(wrt_names, grad_step())}
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        grad_step()
        torch.cuda.synchronize()
        row.peak_bytes = torch.cuda.max_memory_allocated()
    return row


def run_jax(model: str, sizes: dict, clock_for, gpu: bool, dtype: str = "f32") -> Row:
    import jax
    import jax.numpy as jnp
    fwd = load(model, sizes, "forward")
    params = set(fwd.primal.params) or {a.name for a in fwd.primal.args}
    names = [a.name for a in fwd.primal.args]
    inputs = make_inputs(fwd.primal, sizes)
    low = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}[dtype]
    xs = [jnp.asarray(inputs[n], dtype=low if inputs[n].dtype.kind == "f" else None)
          for n in names]
    argnums = tuple(k for k, n in enumerate(names) if n in params)
    ops = peers.jax_ops()
    loss = lambda *a: peers.MODELS[model](ops, *a)  # noqa: E731
    t0 = time.perf_counter()
    f, g = jax.jit(loss), jax.jit(jax.grad(loss, argnums=argnums))
    clock = clock_for("jax")
    fwd_step = lambda: f(*xs).block_until_ready()  # noqa: E731
    grad_step = lambda: jax.block_until_ready(g(*xs))  # noqa: E731
    clock.warm(fwd_step)
    clock.warm(grad_step)
    row = Row(model, "jax.jit", compile_s=time.perf_counter() - t0)
    row.fwd_ms, row.grad_ms = clock.time(fwd_step), clock.time(grad_step)
    row.grads = {names[k]: np.asarray(g, dtype=np.float32) for k, g in zip(argnums, g(*xs))}
    if gpu:
        stats = jax.devices()[0].memory_stats() or {}
        row.peak_bytes = stats.get("peak_bytes_in_use")
        row.note = "peak since start"
    return row


def installed(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


# ---- the table -----------------------------------------------------------------------

def _f(x, fmt):
    return "-" if x is None else format(x, fmt)


def _ratio(a, b):
    return "-" if a is None or b is None or not b else f"{a / b:.2f}"


def grad_difference(row: Row, ref: Row | None) -> float | None:
    """The largest relative difference ||g - g_ref|| / ||g_ref|| over the parameters."""
    if ref is None or row is ref or not row.grads or set(row.grads) != set(ref.grads):
        return None
    return max(float(np.linalg.norm(row.grads[n].astype(np.float64) - ref.grads[n]) /
                     max(np.linalg.norm(ref.grads[n].astype(np.float64)), 1e-30))
               for n in ref.grads)


def table(rows: list[Row]) -> str:
    head = ("| model | runner | forward ms | gradient ms | grad / fwd | compile s | peak MiB "
            "| adc grad / this | adc peak / this | gradient rel. diff vs adc | kernels / step |")
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model in dict.fromkeys(r.model for r in rows):
        group = [r for r in rows if r.model == model]
        adc = next((r for r in group if r.runner.startswith("adc")), None)
        for r in group:
            mine = r.runner.startswith("adc")
            peak = None if r.peak_bytes is None else r.peak_bytes / 2**20
            lines.append(
                f"| {model} | {r.runner} | {_f(r.fwd_ms, '.3f')} | {_f(r.grad_ms, '.3f')} | "
                f"{_ratio(r.grad_ms, r.fwd_ms)} | {_f(r.compile_s, '.2f')} | "
                f"{_f(peak, '.3f')}{' (' + r.note + ')' if r.note else ''} | "
                f"{'-' if mine else _ratio(adc and adc.grad_ms, r.grad_ms)} | "
                f"{'-' if mine else _ratio(adc and adc.peak_bytes, r.peak_bytes)} | "
                f"{_f(grad_difference(r, adc), '.1e')} | {_launches(r)} |")
    return "\n".join(lines)


def _launches(r: Row) -> str:
    """Kernels per gradient step (torch.profiler), and adc's own count where it has one."""
    own = r.extra.get("adc_launches")
    text = "-" if r.launches is None else str(r.launches)
    if own:
        text += f" (adc {own['adc']} + library {own['library']})"
    return text


def header(gpu: bool, args) -> str:
    if gpu:
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        where = f"GPU: {name}"
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            os.cpu_count()
        where = (f"CPU: {platform.processor() or platform.machine()}, {cores} cores "
                 f"({args.size} sizes)")
    versions = [f"numpy {np.__version__}"]
    for mod in ("cupy", "torch", "jax"):
        if installed(mod):
            versions.append(f"{mod} {__import__(mod).__version__}")
    return (f"Benchmark of {datetime.date.today().isoformat()}, {where}; {args.dtype}, TF32 off; "
            f"median of {args.repeats} x {args.steps} steps after {args.warmup} warm-up "
            f"steps; {', '.join(versions)}. adc's peak memory row is the gradient step.\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help="small sizes on the CPU (NumPy, "
                   "torch CPU): exercises the script without a GPU")
    p.add_argument("--size", choices=sorted(SIZES), help="model sizes (default: full on "
                   "the GPU, small with --cpu)")
    p.add_argument("--steps", type=int, default=20, help="steps per timed block (default 20)")
    p.add_argument("--repeats", type=int, default=5, help="timed blocks (default 5)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps (default 3)")
    p.add_argument("--models", default="mlp,transformer_block,deep_mlp")
    p.add_argument("--runners", default="adc,torch,torch.compile,jax",
                   help="which runners (those not installed are skipped)")
    p.add_argument("--out", default=str(HERE / "results.md"), help="Markdown file to write")
    p.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32",
                   help="the floating type of every runner (adc runs no bf16: its row says "
                        "why)")
    p.add_argument("--executor", choices=("step", "interp"), default="step",
                   help="adc on the GPU: generated step code (default) or the interpreter")
    p.add_argument("--attention", choices=("fused", "library"), default="fused",
                   help="adc on the GPU: attention by its fused kernel (default) or by "
                        "cuBLAS and CuPy's softmax")
    p.add_argument("--graphs", action="store_true",
                   help="capture runs of generated kernels into CUDA graphs")
    p.add_argument("--launches", action="store_true",
                   help="print adc's launches per gradient step on the host stand-in of "
                        "CuPy (needs g++; no GPU) and exit")
    args = p.parse_args(argv)
    if args.launches:
        for model in args.models.split(","):
            sizes = SIZES[args.size or "small"][model]
            print(f"{model}: adc launches per gradient step on the host stand-in: "
                  f"{standin_launches(model, sizes)}")
        return 0
    gpu = not args.cpu
    args.size = args.size or ("small" if args.cpu else "full")
    sizes_of = SIZES[args.size]
    runners = set(args.runners.split(","))

    def clock_for(kind):
        if gpu and kind == "cupy":
            import cupy
            return Clock(args.steps, args.repeats, args.warmup, cupy.cuda.Event,
                         lambda: cupy.cuda.get_current_stream().synchronize())
        if gpu and kind == "torch":
            import torch
            return Clock(args.steps, args.repeats, args.warmup,
                         lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize)
        return Clock(args.steps, args.repeats, args.warmup)

    rows: list[Row] = []
    for model in args.models.split(","):
        sizes = sizes_of[model]
        if "adc" in runners:
            for remat in REMAT.get(model, ("none",)):
                rows.append(run_adc(model, sizes, remat, clock_for, gpu, args.executor,
                                    args.graphs, args.dtype, args.attention == "fused"))
        if installed("torch"):
            if "torch" in runners:
                rows.append(run_torch(model, sizes, False, clock_for, gpu, dtype=args.dtype))
            if "torch.compile" in runners and gpu:  # on the CPU it needs a C++ toolchain
                rows.append(run_torch(model, sizes, True, clock_for, gpu, dtype=args.dtype))
            if "torch" in runners and gpu and model in CONVOLUTIONS:
                rows.append(run_torch(model, sizes, False, clock_for, gpu, use_cudnn=False,
                                      dtype=args.dtype))
        if installed("jax") and "jax" in runners:
            rows.append(run_jax(model, sizes, clock_for, gpu, args.dtype))
        print(f"done: {model}", file=sys.stderr)
    text = header(gpu, args) + "\n" + table(rows) + "\n"
    print(text)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)  # a reader never sees half a table
    return 0


if __name__ == "__main__":
    sys.exit(main())
