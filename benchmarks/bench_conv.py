"""Convolution, pooling and batch normalization on the CPU against PyTorch eager and
jax.jit, on one thread.

    python benchmarks/bench_conv.py [--repeat 20] [--threads 1]

The cases of the issue's benchmark: ``conv2d`` of x ``[32, 16, 32, 32]`` with w
``[32, 16, 3, 3]`` and padding 1, ``max_pool2d`` (kernel 2) of x and ``batchnorm`` (training
mode) of x, each forward and gradient; in float32. A gradient is that of
``sum(op(...) * g)`` with a fixed ``g`` (the op's own backward, and one multiply and sum in
every framework) with respect to every float input. adc runs its compiled callables
(`adc.function`, `adc.value_and_grad`); PyTorch runs ``torch.nn.functional`` with autograd;
JAX runs ``jax.jit`` of ``lax.conv_general_dilated``, ``lax.reduce_window`` and a written-out
batch norm, and of their ``jax.value_and_grad`` (left out where jax is not installed). Each
figure is the median CPU time of `repeat` calls after two warm-up calls; a ratio is adc's
time over the peer's (below 1: adc is faster). The adc kernels of conv2d's gradient are also
timed one by one, to say where the time goes. The results agree to float32 rounding
(checked before timing).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

CONV = """\
def f(x: f32[32, 16, 32, 32], w: f32[32, 16, 3, 3], g: f32[32, 32, 32, 32]) -> f32 {
    return sum(conv2d(x, w, padding=1) * g)
}
"""
POOL = """\
def f(x: f32[32, 16, 32, 32], g: f32[32, 16, 16, 16]) -> f32 {
    return sum(max_pool2d(x, 2) * g)
}
"""
NORM = """\
def f(x: f32[32, 16, 32, 32], gamma: f32[16], beta: f32[16], g: f32[32, 16, 32, 32]) -> f32 {
    return sum(batchnorm(x, gamma, beta) * g)
}
"""


def median_time(fn, repeat: int) -> float:
    """The median CPU time of one call (the process's CPU clock: on one thread it is the
    call's own work, whatever else the machine runs)."""
    fn(), fn()
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def close(a, b, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    err = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)
    if err > 1e-4:
        raise SystemExit(f"{what}: adc and torch differ (relative {err:.2e})")


def case(name, src, inputs, wrt, torch_fn, jax_fn, repeat):
    """[(label, adc s, torch s, jax s or None)] of the forward and the gradient."""
    import torch
    import adcompiler as adc
    module = adc.compile_source(src, f"{name}.tdsl")
    fwd = adc.function(module)
    grad = adc.value_and_grad(module, wrt=wrt)
    tin = {k: torch.from_numpy(v) for k, v in inputs.items()}

    def torch_fwd():
        with torch.no_grad():
            return torch_fn(**tin)

    def torch_grad():
        held = {k: v.requires_grad_(k in wrt) for k, v in tin.items()}
        loss = torch_fn(**held)
        loss.backward()
        return loss, [held[k].grad for k in wrt]

    close(fwd(**inputs), torch_fwd().numpy(), f"{name} forward")
    value, grads = grad(**inputs)
    _, tgrads = torch_grad()
    for k, a, b in zip(wrt, grads, tgrads):
        close(a, b.numpy(), f"{name} d/d{k}")
    peers = {"forward": [lambda: fwd(**inputs), torch_fwd],
             "gradient": [lambda: grad(**inputs), torch_grad]}
    if jax_fn is not None:
        import jax
        order = list(inputs)
        jin = [jax.numpy.asarray(inputs[k]) for k in order]
        jf = jax.jit(jax_fn)
        jg = jax.jit(jax.value_and_grad(jax_fn, argnums=tuple(order.index(k) for k in wrt)))
        close(jf(*jin), fwd(**inputs), f"{name} forward (jax)")
        for k, a, b in zip(wrt, grads, jg(*jin)[1]):
            close(b, a, f"{name} d/d{k} (jax)")
        peers["forward"].append(lambda: jax.block_until_ready(jf(*jin)))
        peers["gradient"].append(lambda: jax.block_until_ready(jg(*jin)))
    rows = []
    for what, calls in peers.items():
        times = [median_time(c, repeat) for c in calls]
        rows.append((f"{name} {what}", *times, *([None] * (3 - len(times)))))
    return rows


def jax_ops():
    """The cases' functions in JAX, or Nones where jax is not installed."""
    try:
        import jax.numpy as jnp
        from jax import lax
    except ImportError:
        return None, None, None

    def conv(x, w, g):
        return jnp.sum(lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)]) * g)

    def pool(x, g):
        y = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        return jnp.sum(y * g)

    def norm(x, gamma, beta, g):
        m = jnp.mean(x, axis=(0, 2, 3), keepdims=True)
        v = jnp.mean(jnp.square(x - m), axis=(0, 2, 3), keepdims=True)
        y = (x - m) * lax.rsqrt(v + 1e-5) * gamma[:, None, None] + beta[:, None, None]
        return jnp.sum(y * g)
    return conv, pool, norm


def kernel_times(inputs, repeat):
    """The NumPy kernels of conv2d's forward and adjoints, one by one."""
    from adc_runtime.kernels import KERNELS
    x, w, g = inputs["x"], inputs["w"], inputs["g"]
    calls = {
        "conv2d": lambda: KERNELS["conv2d"](np, x, w, padding=1),
        "conv_input_grad": lambda: KERNELS["conv_input_grad"](np, g, w, (32, 32), padding=1),
        "conv_weight_grad": lambda: KERNELS["conv_weight_grad"](np, x, g, (3, 3), padding=1),
    }
    return {k: median_time(c, repeat) for k, c in calls.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    # XLA's thread pool, set before jax is imported
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                               + ("true" if args.threads > 1 else "false")
                               + f" intra_op_parallelism_threads={args.threads}").strip()
    import torch
    from threadpoolctl import threadpool_limits
    threadpool_limits(args.threads)
    torch.set_num_threads(args.threads)
    F = torch.nn.functional
    jconv, jpool, jnorm = jax_ops()
    if jconv is not None:
        import jax
        jax.config.update("jax_default_matmul_precision", "highest")
    rng = np.random.default_rng(0)
    conv_in = {"x": rng.standard_normal((32, 16, 32, 32), dtype=np.float32),
               "w": rng.standard_normal((32, 16, 3, 3), dtype=np.float32) * 0.1,
               "g": rng.standard_normal((32, 32, 32, 32), dtype=np.float32)}
    pool_in = {"x": conv_in["x"], "g": rng.standard_normal((32, 16, 16, 16), dtype=np.float32)}
    norm_in = {"x": conv_in["x"], "gamma": rng.standard_normal(16, dtype=np.float32),
               "beta": rng.standard_normal(16, dtype=np.float32),
               "g": rng.standard_normal((32, 16, 32, 32), dtype=np.float32)}
    rows = case("conv2d", CONV, conv_in, ("x", "w"),
                lambda x, w, g: (F.conv2d(x, w, padding=1) * g).sum(), jconv, args.repeat)
    rows += case("max_pool2d", POOL, pool_in, ("x",),
                 lambda x, g: (F.max_pool2d(x, 2) * g).sum(), jpool, args.repeat)
    rows += case("batchnorm", NORM, norm_in, ("x", "gamma", "beta"),
                 lambda x, gamma, beta, g: (F.batch_norm(x, None, None, gamma, beta,
                                                         training=True) * g).sum(),
                 jnorm, args.repeat)
    versions = f"torch {torch.__version__}, numpy {np.__version__}"
    if jconv is not None:
        versions += f", jax {jax.__version__}"
    print(f"{args.threads} thread(s), float32, median CPU time of {args.repeat} calls "
          f"({versions}); load {os.getloadavg()[0]:.1f}")
    head = f"{'case':<22}{'adc ms':>9}{'torch ms':>10}{'adc/torch':>11}"
    if jconv is not None:
        head += f"{'jax ms':>9}{'adc/jax':>9}"
    print(head)
    for name, ta, tt, tj in rows:
        line = f"{name:<22}{ta * 1e3:>9.2f}{tt * 1e3:>10.2f}{ta / tt:>11.2f}"
        if tj is not None:
            line += f"{tj * 1e3:>9.2f}{ta / tj:>9.2f}"
        print(line)
    print("adc's kernels of conv2d's gradient, one by one:")
    for name, t in kernel_times(conv_in, args.repeat).items():
        print(f"  {name:<26}{t * 1e3:>10.2f} ms")


if __name__ == "__main__":
    main()
