"""The matrix products of a step, timed alone in each framework, so that a step's time can be
split into the products (BLAS) and everything else.

`record` runs adc's program once on its NumPy interpreter with the ``matmul`` and ``einsum``
kernels wrapped, and keeps each call's operands and spec: the products the step computes,
loop iterations included (the deep MLP's 64 layers). Each framework then computes that list
of products with its own matrix product: adc the same kernels (NumPy's OpenBLAS),
PyTorch ``torch.matmul``/``torch.einsum`` on its tensors (its own BLAS), JAX one ``jax.jit``
function returning every product (one dispatch, so the figure is XLA's products, not its
per-call overhead). A step's time less its framework's product time is its time outside
BLAS: the elementwise passes, reductions, copies and the framework's own overhead.

It is an estimate: a product timed in a loop of products may find its operands in the cache
where the step would not, and XLA may place a product's transposes differently inside a
larger program. The three frameworks are estimated the same way.
"""
from __future__ import annotations

import time


def record(module, fn_name: str, inputs: dict, dims: dict) -> list:
    """``[(op name, spec or None, operands)]`` of every product one call of `fn_name`
    computes, in order (copies of the operands)."""
    import numpy as np
    from adc_runtime import kernels
    from adc_runtime.executor import Executor, Runner
    calls: list = []
    saved = {name: kernels.KERNELS[name] for name in ("matmul", "einsum")}

    def recorder(name, kern):
        def run(xp, *operands, **attrs):
            if name == "matmul" or len(operands) >= 2:
                # copies in the operands' own memory order (a transposed view stays one)
                calls.append((name, attrs.get("spec"), [a.copy(order="K") for a in operands]))
            return kern(xp, *operands, **attrs)
        return run
    try:
        for name, kern in saved.items():
            kernels.KERNELS[name] = recorder(name, kern)
        run = Runner(module, fn_name, np,
                     lambda d: Executor(module, np, d, plan_buffers=False))
        run(inputs, dims)
    finally:
        kernels.KERNELS.update(saved)
    return calls


def numpy_products(calls):
    """adc's products as its compiled executor computes them: ``matmul`` into a buffer
    made once (its planned buffer), a two-operand einsum by its batched-product plan where
    it has one (`adc_runtime.kernels.linalg.einsum_matmul`), else the table kernel."""
    import functools
    import numpy as np
    from adc_runtime.kernels import KERNELS, OUT_KERNELS
    from adc_runtime.kernels.linalg import einsum_matmul
    prepared = []
    for name, spec, ops in calls:
        want = KERNELS[name](np, *ops, **({} if spec is None else {"spec": spec}))
        if name == "matmul":
            prepared.append(functools.partial(OUT_KERNELS["matmul"], np, *ops,
                                              out=np.empty_like(want)))
            continue
        plan = einsum_matmul(spec.replace(" ", ""), ops[0].shape, ops[1].shape, ops[0].dtype,
                             ops[1].dtype) if len(ops) == 2 else None
        prepared.append(functools.partial(plan, *ops) if plan is not None else
                        functools.partial(KERNELS["einsum"], np, *ops, spec=spec))

    def run():
        for call in prepared:
            call()
    return run


def torch_products(calls):
    import torch
    prepared = [(name, spec, [torch.from_numpy(a) for a in ops]) for name, spec, ops in calls]

    def run():
        with torch.no_grad():
            for name, spec, ops in prepared:
                if name == "matmul":
                    torch.matmul(*ops)
                else:
                    torch.einsum(spec.replace(" ", ""), *ops)
    return run


def jax_products(calls):
    """JAX's products in one jitted call, and the same call computing nothing but the sum
    of one operand's first element (its dispatch, which the products' time leaves out)."""
    import jax
    import jax.numpy as jnp
    specs = [(name, spec) for name, spec, _ in calls]
    operands = [[jnp.asarray(a) for a in ops] for _, _, ops in calls]

    def all_products(operands):
        return [jnp.matmul(*ops) if name == "matmul" else jnp.einsum(spec, *ops)
                for (name, spec), ops in zip(specs, operands)]

    def nothing(operands):
        return operands[0][0].reshape(-1)[0] + 1
    f, g = jax.jit(all_products), jax.jit(nothing)

    def run():
        jax.block_until_ready(f(operands))

    def dispatch():
        jax.block_until_ready(g(operands))
    return run, dispatch


def products(calls, frameworks) -> dict:
    """runner name -> a function computing the products in that framework; for JAX also
    ``"jax.jit dispatch"``, a jitted call of the same inputs that computes almost nothing
    (subtracted from its products' time: JAX's dispatch is work outside BLAS)."""
    out = {"adc": numpy_products(calls)}
    if "torch eager" in frameworks:
        out["torch eager"] = torch_products(calls)
    if "jax.jit" in frameworks:
        out["jax.jit"], out["jax.jit dispatch"] = jax_products(calls)
    return out


def timed(run, clock=time.process_time, repeats: int = 5, warmup: int = 2) -> float:
    """Milliseconds of one call of `run`: the least of `repeats` after `warmup` calls."""
    for _ in range(warmup):
        run()
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        run()
        best = min(best, clock() - t0)
    return best * 1e3
