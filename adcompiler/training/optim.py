"""Optimizers and learning-rate schedules, with `torch.optim`'s update formulas and defaults.

An optimizer here is a description (a frozen dataclass); the ``train-step`` pass turns it
into IR: its `update` rule emits the new parameter and the new state of one parameter,
given its gradient, the scheduled learning rate and the step counter, so that the whole
update is part of the compiled step program::

    opt = adc.optim.adam(lr=adc.optim.cosine(1e-3, steps=1000, warmup=100))
    step = adc.train_step("samples/mlp.tdsl", opt, clip=1.0)

The step counter (``step`` in the optimizer state) counts the updates already made; the
update it drives uses the schedule's value at that count (as ``scheduler.step()`` after
each ``optimizer.step()``) and, for Adam, bias corrections at count + 1 (torch's
``state["step"]`` after its increment). Scalars (schedule, bias corrections) are computed in
f64 and cast to each parameter's dtype, as torch turns its Python floats into the tensor's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from ..diagnostics import AdcError

__all__ = ["Schedule", "Optimizer", "constant", "warmup", "cosine", "sgd", "adam", "adamw",
           "parse_optimizer"]


# ---- schedules -------------------------------------------------------------------------

@dataclass(frozen=True)
class Schedule:
    """The learning rate as a function of the number of updates made, ``t``.

    ``constant``: `lr`. ``warmup``: ``lr * (f + (1 - f) * min(t, warmup) / warmup)``, torch's
    ``LinearLR(start_factor=f, total_iters=warmup)``. ``cosine``: that warm-up, then
    ``min_lr + (lr - min_lr) * (1 + cos(pi * (t - warmup) / (steps - warmup))) / 2``, torch's
    ``CosineAnnealingLR(T_max=steps - warmup, eta_min=min_lr)`` (after ``SequentialLR`` at
    the warm-up's end); like torch's, the cosine rises again past `steps`.
    """

    kind: str
    lr: float
    steps: int = 0
    warmup: int = 0
    start_factor: float = 1.0 / 3.0
    min_lr: float = 0.0

    def __post_init__(self):
        _number(self.lr, "lr", 0.0)
        _number(self.start_factor, "start_factor", 0.0, 1.0, open_low=True)
        if self.kind not in ("constant", "warmup", "cosine"):
            raise AdcError(f"unknown schedule '{self.kind}' (constant, warmup, cosine)")
        if self.kind == "warmup" and self.warmup < 1:
            raise AdcError(f"a warm-up schedule needs warmup >= 1 steps, got {self.warmup}")
        if self.kind == "cosine" and not 0 <= self.warmup < self.steps:
            raise AdcError(f"a cosine schedule needs 0 <= warmup < steps, got warmup="
                           f"{self.warmup}, steps={self.steps}")

    def __call__(self, t: int) -> float:
        """The learning rate after `t` updates (plain Python, for logs and plots)."""
        if self.kind != "constant" and t < self.warmup:
            return self.lr * (self.start_factor + (1 - self.start_factor) * t / self.warmup)
        if self.kind == "cosine":
            c = math.cos(math.pi * (t - self.warmup) / (self.steps - self.warmup))
            return self.min_lr + (self.lr - self.min_lr) * (1 + c) / 2
        return self.lr

    def emit(self, b, t):
        """IR for the learning rate (an f64 scalar) at `t`, an f64 scalar."""
        c = lambda v: b.const(float(v), "f64")  # noqa: E731
        lr = c(self.lr)
        if self.kind == "constant":
            return lr
        frac = b.emit("div", b.emit("minimum", t, c(self.warmup)), c(self.warmup))
        warm = b.emit("mul", lr, b.emit("add", c(self.start_factor),
                                        b.emit("mul", c(1 - self.start_factor), frac)))
        if self.kind == "warmup":
            return warm
        phase = b.emit("div", b.emit("mul", c(math.pi), b.emit("sub", t, c(self.warmup))),
                       c(self.steps - self.warmup))
        half = b.emit("div", b.emit("add", c(1.0), b.emit("cos", phase)), c(2.0))
        cos = b.emit("add", c(self.min_lr), b.emit("mul", c(self.lr - self.min_lr), half))
        if self.warmup == 0:
            return cos
        return b.emit("where", b.emit("lt", t, c(self.warmup)), warm, cos)


def constant(lr: float) -> Schedule:
    return Schedule("constant", lr)


def warmup(lr: float, steps: int, start_factor: float = 1.0 / 3.0) -> Schedule:
    """Linear warm-up from ``lr * start_factor`` to `lr` over `steps` updates (torch's
    ``LinearLR``, whose default `start_factor` is 1/3), then `lr`."""
    return Schedule("warmup", lr, warmup=steps, start_factor=start_factor)


def cosine(lr: float, steps: int, min_lr: float = 0.0, warmup: int = 0,
           start_factor: float = 1.0 / 3.0) -> Schedule:
    """Cosine decay from `lr` to `min_lr` at update `steps` (warm-up included), after an
    optional linear warm-up of `warmup` updates."""
    return Schedule("cosine", lr, steps=steps, warmup=warmup, start_factor=start_factor,
                    min_lr=min_lr)


def _number(v, name: str, low: float | None = None, high: float | None = None,
            open_low: bool = False, open_high: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        raise AdcError(f"{name} must be a number, got {v!r}")
    if low is not None and (v < low or (open_low and v == low)):
        raise AdcError(f"{name} must be {'>' if open_low else '>='} {low}, got {v}")
    if high is not None and (v > high or (open_high and v == high)):
        raise AdcError(f"{name} must be {'<' if open_high else '<='} {high}, got {v}")
    return float(v)


# ---- optimizers ------------------------------------------------------------------------

@dataclass(frozen=True)
class Optimizer:
    """One of ``sgd``, ``adam``, ``adamw`` with its hyperparameters (torch's names)."""

    kind: str
    lr: Schedule
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def __post_init__(self):
        if self.kind not in ("sgd", "adam", "adamw"):
            raise AdcError(f"unknown optimizer '{self.kind}' (sgd, adam, adamw)")
        if not isinstance(self.lr, Schedule):
            object.__setattr__(self, "lr", constant(_number(self.lr, "lr", 0.0)))
        _number(self.momentum, "momentum", 0.0)
        _number(self.dampening, "dampening")
        _number(self.weight_decay, "weight_decay", 0.0)
        _number(self.eps, "eps", 0.0)
        if len(self.betas) != 2:
            raise AdcError(f"betas must be two numbers, got {self.betas!r}")
        for k, beta in enumerate(self.betas):
            _number(beta, f"betas[{k}]", 0.0, 1.0, open_high=True)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise AdcError("Nesterov momentum needs momentum > 0 and dampening = 0")

    @property
    def slots(self) -> tuple[str, ...]:
        """The per-parameter state, by torch's names (``state[p][name]``)."""
        if self.kind == "sgd":
            return ("momentum_buffer",) if self.momentum else ()
        return ("exp_avg", "exp_avg_sq")

    def prepare(self, s: "Scalars", dtypes) -> None:
        """Emit the scalars that the updates of parameters of `dtypes` share, ahead of every
        update: each parameter's update is then one run of consecutive elementwise ops,
        which a runtime may compile into one loop (`adc_runtime.fused_runs`)."""
        for dt in dtypes:
            if self.kind == "sgd":
                s.cast(s.lr64, dt)
                if self.momentum and self.dampening != 0:
                    s.first  # noqa: B018  (emitted once, cached)
                continue
            if self.kind == "adamw" and self.weight_decay:
                s.cast(self._decay(s), dt)
            s.cast(self._bc2_sqrt(s), dt)
            s.cast(self._step_size(s), dt)

    def update(self, s: "Scalars", p, g, state: dict) -> tuple:
        """Emit the update of parameter `p` with gradient `g`; returns (new p, new state)."""
        dt = p.type.dtype
        b, c = s.b, lambda v: s.const(v, dt)  # noqa: E731
        if self.kind == "sgd":
            return self._sgd(s, p, g, state, c)
        if self.kind == "adamw" and self.weight_decay:
            p = b.emit("mul", p, s.cast(self._decay(s), dt))
        elif self.weight_decay:
            g = b.emit("add", g, b.emit("mul", p, c(self.weight_decay)))
        b1, b2 = self.betas
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m = b.emit("add", m, b.emit("mul", b.emit("sub", g, m), c(1 - b1)))   # m.lerp_(g, 1-b1)
        v = b.emit("add", b.emit("mul", v, c(b2)), b.emit("mul", b.emit("mul", g, c(1 - b2)), g))
        denom = b.emit("add", b.emit("div", b.emit("sqrt", v), s.cast(self._bc2_sqrt(s), dt)),
                       c(self.eps))
        p = b.emit("sub", p, b.emit("mul", b.emit("div", m, denom),
                                    s.cast(self._step_size(s), dt)))
        return p, {"exp_avg": m, "exp_avg_sq": v}

    def _decay(self, s: "Scalars"):
        """AdamW's ``1 - lr * weight_decay`` (f64)."""
        b = s.b
        return s.scalar(("decay", self.weight_decay), lambda: b.emit(
            "sub", s.const(1.0, "f64"), b.emit("mul", s.lr64, s.const(self.weight_decay, "f64"))))

    def _step_size(self, s: "Scalars"):
        """Adam's ``lr / (1 - beta1**t)`` (f64)."""
        b, b1 = s.b, self.betas[0]
        return s.scalar(("step_size", b1), lambda: b.emit(
            "div", s.lr64, b.emit("sub", s.const(1.0, "f64"),
                                  b.emit("pow", s.const(b1, "f64"), s.t64))))

    def _bc2_sqrt(self, s: "Scalars"):
        """Adam's ``sqrt(1 - beta2**t)`` (f64)."""
        b, b2 = s.b, self.betas[1]
        return s.scalar(("bc2_sqrt", b2), lambda: b.emit(
            "sqrt", b.emit("sub", s.const(1.0, "f64"), b.emit("pow", s.const(b2, "f64"), s.t64))))

    def _sgd(self, s: "Scalars", p, g, state: dict, c) -> tuple:
        b, dt = s.b, p.type.dtype
        if self.weight_decay:
            g = b.emit("add", g, b.emit("mul", p, c(self.weight_decay)))
        new_state = {}
        if self.momentum:
            buf = b.emit("add", b.emit("mul", state["momentum_buffer"], c(self.momentum)),
                         g if self.dampening == 0 else b.emit("mul", g, c(1 - self.dampening)))
            if self.dampening != 0:  # torch's first step copies the gradient undamped
                buf = b.emit("where", s.first, g, buf)
            new_state["momentum_buffer"] = buf
            g = b.emit("add", g, b.emit("mul", buf, c(self.momentum))) if self.nesterov else buf
        return b.emit("sub", p, b.emit("mul", g, s.cast(s.lr64, dt))), new_state


class Scalars:
    """The scalars an update shares across parameters, emitted once each: constants and
    casts per dtype, the learning rate (`lr64`), the count of this update (`t64`, from 1)
    and whether it is the first (`first`)."""

    def __init__(self, b, step, schedule: Schedule):
        self.b, self.cache = b, {}
        done = b.emit("cast", step, dtype="f64")
        self.lr64 = schedule.emit(b, done)
        self.t64 = b.emit("add", done, self.const(1.0, "f64"))
        self.step = step

    @property
    def first(self):
        return self.scalar("first", lambda: self.b.emit(
            "eq", self.step, self.b.const(0, self.step.type.dtype)))

    def scalar(self, key, make):
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    def const(self, value: float, dtype: str):
        return self.scalar(("const", float(value), dtype),
                           lambda: self.b.const(float(value), dtype))

    def cast(self, v, dtype: str):
        if v.type.dtype == dtype:
            return v
        return self.scalar(("cast", v, dtype), lambda: self.b.emit("cast", v, dtype=dtype))


LR = Union[float, Schedule]


def sgd(lr: LR, momentum: float = 0.0, dampening: float = 0.0, nesterov: bool = False,
        weight_decay: float = 0.0) -> Optimizer:
    """``torch.optim.SGD``: ``buf = momentum * buf + (1 - dampening) * g`` (``buf = g`` at
    the first step), ``p -= lr * (g + momentum * buf if nesterov else buf)``; weight decay
    adds ``weight_decay * p`` to the gradient first."""
    return Optimizer("sgd", lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                     weight_decay=weight_decay)


def adam(lr: LR = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
         weight_decay: float = 0.0) -> Optimizer:
    """``torch.optim.Adam`` (weight decay added to the gradient, L2 style)."""
    return Optimizer("adam", lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)


def adamw(lr: LR = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 1e-2) -> Optimizer:
    """``torch.optim.AdamW``: decoupled decay, ``p *= 1 - lr * weight_decay``, then Adam."""
    return Optimizer("adamw", lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)


_KEYS = {"lr": "lr", "momentum": "momentum", "dampening": "dampening", "nesterov": "nesterov",
         "weight_decay": "weight_decay", "wd": "weight_decay", "eps": "eps", "b1": "b1",
         "b2": "b2", "beta1": "b1", "beta2": "b2"}
_MAKERS = {"sgd": sgd, "adam": adam, "adamw": adamw}


def parse_optimizer(text: str) -> Optimizer:
    """``"adam:lr=1e-3,wd=0.01"`` -> an `Optimizer` (keys: lr, momentum, dampening,
    nesterov, weight_decay or wd, eps, b1 and b2 for the betas)."""
    name, _, rest = text.partition(":")
    name = name.strip().lower()
    if name not in _MAKERS:
        raise AdcError(f"unknown optimizer '{name}' (sgd, adam, adamw)")
    kwargs: dict = {}
    given: dict[str, str] = {}   # field -> the key that set it (wd and weight_decay are one)
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, val = (s.strip() for s in item.partition("="))
        field = _KEYS.get(key)
        if field is not None and field in given:
            twice = f"option '{key}' is given twice" if given[field] == key else \
                f"'{given[field]}' and '{key}' are the same option"
            raise AdcError(f"optimizer '{name}': {twice}; give it once")
        if field is not None:
            given[field] = key
        allowed = ("momentum", "dampening", "nesterov") if name == "sgd" else ("b1", "b2", "eps")
        if not eq or field is None or field not in ("lr", "weight_decay") + allowed:
            raise AdcError(f"optimizer '{name}' has no option '{item}' (options: lr, "
                           f"{', '.join(allowed)}, weight_decay)")
        if field == "nesterov":
            if val.lower() not in ("true", "false", "1", "0"):
                raise AdcError(f"nesterov must be true or false, got '{val}'")
            kwargs[field] = val.lower() in ("true", "1")
            continue
        try:
            kwargs[field] = float(val)
        except ValueError:
            raise AdcError(f"{key} must be a number, got '{val}'") from None
    if name == "sgd" and "lr" not in kwargs:
        raise AdcError("optimizer 'sgd' needs a learning rate (sgd:lr=0.1)")
    if "b1" in kwargs or "b2" in kwargs:
        kwargs["betas"] = (kwargs.pop("b1", 0.9), kwargs.pop("b2", 0.999))
    return _MAKERS[name](**kwargs)


def option_fields(opt: Optimizer) -> dict:
    """`opt` as the ``train-step`` pass's options (the inverse of `from_fields`)."""
    s = opt.lr
    return {"optimizer": opt.kind, "lr": s.lr, "momentum": opt.momentum,
            "dampening": opt.dampening, "nesterov": opt.nesterov,
            "weight_decay": opt.weight_decay, "beta1": opt.betas[0], "beta2": opt.betas[1],
            "eps": opt.eps, "schedule": s.kind, "steps": s.steps, "warmup": s.warmup,
            "start_factor": s.start_factor, "min_lr": s.min_lr}


def from_fields(o) -> Optimizer:
    """The `Optimizer` that the ``train-step`` pass `o` describes."""
    sched = Schedule(o.schedule, o.lr, steps=o.steps, warmup=o.warmup,
                     start_factor=o.start_factor, min_lr=o.min_lr)
    wd = o.weight_decay if o.weight_decay is not None else (1e-2 if o.optimizer == "adamw"
                                                            else 0.0)
    return Optimizer(o.optimizer, sched, momentum=o.momentum, dampening=o.dampening,
                     nesterov=o.nesterov, weight_decay=wd, betas=(o.beta1, o.beta2),
                     eps=o.eps)

