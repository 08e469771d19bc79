"""Mixed-precision training (``--precision f16|bf16``): the program runs in low precision,
the parameters live in f32 (master weights), and dynamic loss scaling keeps small gradients
from flushing to zero.

Each step casts the master weights to the low precision and runs the adjoint of ``loss *
scale`` (the loss cast to f32 first, so the scaled loss itself cannot overflow); the
gradients are cast to f32 and divided by `scale`. f16 is an IR dtype with NumPy kernels;
bf16 is not, so a bf16 program is the f32 one run by `adc_runtime.rounding`'s executor,
which rounds every op's result to bf16 (CPU only). When one holds an Inf or a NaN, the step is skipped and
the scale halves (`loss_scale.LossScaler`, torch.amp.GradScaler's rules). Otherwise the f32
gradients go to the optimizer: a compiled training step (`adc.train_step`) of the program
``sum(p * g_p)``, whose gradient with respect to each ``p`` is exactly ``g_p``, so that
clipping, the norms and the update are those of every other run, in f32.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..diagnostics import AdcError
from ..ir.core import Module
from .loss_scale import LossScaler


def _scaled_loss(module: Module, fn_name: str, names: list[str]) -> tuple[Module, str]:
    """`module` plus ``<fn>_scaled(inputs..., loss_scale: f32) = f32(fn(inputs)) * scale``."""
    from ..api.program import FunctionBuilder
    f = module[fn_name]
    name = f"{fn_name}_scaled"
    while name in module:
        name = "_" + name
    fb = FunctionBuilder(name, {**{a.name: a.type for a in f.args}, "loss_scale": "f32"},
                         params=names)
    (loss,) = fb.call(f, fb.block.args[:len(f.args)])
    if loss.type.dtype != "f32":
        loss = fb.emit("cast", loss, dtype="f32")
    out = Module(dict(module.functions))
    fb.finish(fb.emit("mul", loss, fb.block.args[-1]), module=out)
    return out, name


def _apply_program(types: Mapping[str, Any]) -> str:
    """TDSL of ``apply(g_p..., param p...) = sum(p * g_p) + ...``: its gradient for each
    ``p`` is ``g_p``."""
    def t(ty):
        return f"f32[{', '.join(map(str, ty.shape))}]" if ty.shape else "f32"
    args = [f"g_{n}: {t(ty)}" for n, ty in types.items()] + \
        [f"param {n}: {t(ty)}" for n, ty in types.items()]
    body = " + ".join(f"sum({n} * g_{n})" for n in types)
    return f"def apply({', '.join(args)}) -> f32 {{\n    return {body}\n}}\n"


def _executor(precision: str, detect_anomaly: bool):
    """The executor class of the low-precision program, or None for the library's own."""
    from adc_runtime.anomaly import AnomalyExecutor
    if precision == "bf16":
        from adc_runtime.rounding import RoundingExecutor, bfloat16
        try:
            bfloat16()
        except ImportError as e:
            raise AdcError(f"--precision bf16: {e}") from None
        if detect_anomaly:
            return type("AnomalyRoundingExecutor", (AnomalyExecutor, RoundingExecutor), {})
        return RoundingExecutor
    return AnomalyExecutor if detect_anomaly else None


class MixedPrecisionStep:
    """A training step with f16 compute, f32 master weights and dynamic loss scaling; the
    interface of `adc.train_step`'s steps, plus `scaler`."""

    def __init__(self, module: Module, fn_name: str, names: list[str], optimizer,
                 precision: str, *, clip=None, accumulate: int = 1, remat=None,
                 device: str = "cpu", dims=None, detect_anomaly: bool = False):
        from ..passes.to_dtype import to_dtype
        from .step import train_step
        from ..passes.clone import clone_module
        from ..api.transforms import value_and_grad
        if precision not in ("f16", "bf16"):
            raise AdcError(f"unknown precision '{precision}' (f16, bf16)")
        if precision == "bf16" and device != "cpu":
            raise AdcError("--precision bf16 runs on the CPU only (its rounding executor "
                           "needs ml_dtypes' NumPy bfloat16)")
        if remat:
            raise AdcError("--precision f16 does not combine with --remat or "
                           "--memory-budget yet")
        f = module[fn_name]
        bad = [n for n in names if f.arg(n).type.dtype != "f32"]
        if bad:
            raise AdcError(f"--precision f16 keeps f32 master weights: param '{bad[0]}' is "
                           f"{f.arg(bad[0]).type}")
        low = clone_module(module) if precision == "bf16" else \
            to_dtype(clone_module(module), "f16")
        scaled, name = _scaled_loss(low, fn_name, names)
        self.grad = value_and_grad(scaled, name, wrt=list(names), device=device, dims=dims)
        # --detect-anomaly: the Inf that a too large loss scale makes is what loss scaling
        # expects (the step is skipped and the scale halves), not an anomaly; a step is run
        # again by the checking executor only when the scaling cannot explain its Inf or NaN
        # (`_check`)
        self.checked = None
        for executor, checks in ((_executor(precision, False), False),
                                 (_executor(precision, detect_anomaly), True)):
            if executor is None or checks and not detect_anomaly:
                continue
            from ..api.program import with_executor
            target = self.grad
            if checks:
                target = self.checked = value_and_grad(scaled, name, wrt=list(names),
                                                       device=device, dims=dims)
            target._runner = with_executor(target.module, target.fn_name, device, executor)
        self.low = np.float16 if precision == "f16" else np.float32
        types = {n: f.arg(n).type for n in names}
        self.apply = train_step(_apply_program(types), optimizer, clip=clip, device=device,
                                dims=dims)
        self.names, self.accumulate = list(names), accumulate
        self.scaler = LossScaler()
        self.module, self.fn_name = self.apply.module, self.apply.fn_name

    def _check(self, value: float, grads, inputs: dict, scale: float) -> None:
        """With --detect-anomaly, run a micro-batch again under the checking executor (which
        raises at the first op that makes a NaN or an Inf) when the loss is not finite (the
        forward does not see the scale), or when a gradient is at a scale of at most 1 (no
        scaling up to blame)."""
        if self.checked is None:
            return
        if np.isfinite(value) and (scale > 1 or all(np.isfinite(np.asarray(g)).all()
                                                    for g in grads)):
            return
        self.checked(**inputs, loss_scale=np.float32(scale))

    def init(self, params: Mapping[str, Any]) -> dict:
        return self.apply.init(params)

    def __call__(self, params, state, batch) -> tuple[dict, dict, dict]:
        scale = self.scaler.scale
        low = {n: np.asarray(params[n]).astype(self.low) for n in self.names}
        k = self.accumulate
        rows = next(iter(batch.values())).shape[0] // k
        loss, grads = 0.0, {n: 0.0 for n in self.names}
        for j in range(k):
            part = {n: a[j * rows:(j + 1) * rows] for n, a in batch.items()}
            value, gs = self.grad(**part, **low, loss_scale=np.float32(scale))
            loss += float(value) / scale / k
            for n, g in zip(self.names, gs):
                grads[n] = grads[n] + np.asarray(g, np.float32) / np.float32(scale * k)
            self._check(float(value), gs, {**part, **low}, scale)
        found_inf = not all(np.isfinite(g).all() for g in grads.values())
        self.scaler.update(found_inf)
        if found_inf:
            metrics = {"loss": np.asarray(loss), "grad_norm": np.asarray(np.inf),
                       "skipped": np.asarray(1.0), "loss_scale": np.asarray(scale)}
            return params, state, metrics
        params, state, metrics = self.apply(params, state, {f"g_{n}": grads[n]
                                                            for n in self.names})
        metrics.update(loss=np.asarray(loss), skipped=np.asarray(0.0),
                       loss_scale=np.asarray(scale))
        return params, state, metrics
