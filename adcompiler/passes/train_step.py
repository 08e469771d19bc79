"""The ``train-step`` pass: a loss function becomes one training-step function.

``<fn>_step(params..., state..., batch...) -> (loss, new_params..., new_state...,
grad_norm, grad_norm_<p>..., lr)`` holds, in this order:

* the forward and the adjoint of `fn` (its ``reverse`` adjoint, spliced in), or with
  ``accumulate = K`` a loop over K micro-batches (each batch input gets a leading axis K)
  whose carries sum the losses and gradients, starting from zeros: nothing to forget to
  reset. Loss and gradients are then divided by K, so for a loss that is a mean over its
  rows the step equals one step on the K-times batch;
* the gradients as named values, ``grad_<p>``: the point where each becomes final (a pass
  that combines gradients across processes rewrites their uses; `gradient_values` finds them);
* the norms ``grad_norm_<p> = sqrt(sum(g*g))`` and ``grad_norm = sqrt(sum(norms**2))``, and
  with `clip` the gradients scaled by ``min(clip / (grad_norm + 1e-6), 1)``, as
  ``torch.nn.utils.clip_grad_norm_`` does;
* the optimizer update (`adcompiler.training.optim`), the learning rate computed from the step counter.

The state is the counter ``step`` (an i64 scalar, updates made so far) and each parameter's
slots, named as torch's (``exp_avg_W1``, ``exp_avg_sq_W1``, ``momentum_buffer_W1``), with a
``_`` prefix where a name is taken. ``attrs["in_place"]`` maps each parameter and state input
to the result that replaces it, for a runtime that updates in place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from ..diagnostics import AdcError
from ..ir.builder import Builder
from ..ir.core import Block, Function, Module, Value
from ..ir.types import TensorType
from .clone import clone_op
from .pipeline import ModulePass, parse_pipeline, register_pass
from .reverse import Reverse
from ..ops.random import key_input

STEP_SITE = 0x73746570   # the site of the fold that gives each step its key ("step")

CLEANUP = "inline,canonicalize,cse,dce"
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


@register_pass("train-step")
@dataclass(frozen=True)
class TrainStep(ModulePass):
    """Add ``<fn>_step`` (or `name`), the training step of the loss `fn` for the inputs
    `wrt` (default: the ``param`` inputs). Optimizer options as in `adcompiler.training.optim`;
    ``weight_decay = none`` is the optimizer's default; `remat` is the checkpointing policy
    of the adjoint (`bind` gives sizes for byte budgets)."""

    fn: str = ""
    wrt: tuple[str, ...] = ()
    name: str = ""
    optimizer: Literal["sgd", "adam", "adamw"] = "sgd"
    lr: float = 1e-3
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: Optional[float] = None
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    schedule: Literal["constant", "warmup", "cosine"] = "constant"
    steps: int = 0
    warmup: int = 0
    start_factor: float = 1.0 / 3.0
    min_lr: float = 0.0
    clip: Optional[float] = None
    accumulate: int = 1
    remat: str = "none"
    bind: tuple[str, ...] = ()

    def __call__(self, module: Module) -> Module:
        from ..training.optim import from_fields
        opt = from_fields(self)
        if self.accumulate < 1:
            raise AdcError(f"accumulate must be >= 1, got {self.accumulate}")
        if self.clip is not None and not self.clip > 0:
            raise AdcError(f"clip must be a positive norm, got {self.clip}")
        fn_name = self.fn or module.main.name
        if fn_name not in module:
            raise AdcError(f"no function '{fn_name}' (functions: {', '.join(module.functions)})")
        fn = module[fn_name]
        state = fn.attrs.get("state", ())
        declared = fn.result_types[:len(fn.result_types) - len(state)]
        if len(declared) != 1 or declared[0].rank or not declared[0].is_float:
            raise AdcError(f"a training step needs a loss: '{fn_name}' must return one "
                           f"float scalar, not ({', '.join(map(str, declared))})", fn.loc)
        if state and self.accumulate > 1:
            raise AdcError(f"accumulate={self.accumulate}: '{fn_name}' has state inputs "
                           f"({', '.join(state)}), which micro-batches would have to update "
                           f"one after another; train with accumulate 1", fn.loc)
        from .remat import Remat, parse_bindings
        if self.remat != "none":
            module = _bind_trip_counts(module, fn_name, parse_bindings(self.bind))
        # the state results carry no derivative: the loss alone is seeded
        passes = [Reverse(wrt=self.wrt, fn=fn_name, seed=(0,) if state else ()),
                  *parse_pipeline(CLEANUP)]
        if self.remat != "none":
            passes += [Remat(policy=self.remat, fn=f"{fn_name}_grad", bind=self.bind),
                       *parse_pipeline("dce")]
        for p in passes:
            module = p(module)
        adjoint = module[f"{fn_name}_grad"]
        step = build_step(module[fn_name], adjoint, list(adjoint.attrs["wrt"]), opt,
                          self.clip, self.accumulate, self.name or f"{fn_name}_step")
        if step.name in module:
            raise AdcError(f"the module already has a function '{step.name}'")
        module.add(step)
        return module


def _bind_trip_counts(module: Module, fn_name: str, bind: dict[str, int]) -> Module:
    """`module` with the symbolic trip counts of `fn_name`'s loops (and its callees')
    bound from `bind`, as ``adc compile --bind`` does: a loop's checkpoint schedule is
    made for a known number of steps, and the bound types then refuse a batch of another
    length. A loop whose count stays symbolic is refused, since a remat policy it would
    silently leave out stores every step."""
    from .to_dtype import bind_dims
    from ..ops.registry import has_trait
    seen, todo, counts = set(), [fn_name], {}
    while todo:
        name = todo.pop()
        if name in seen or name not in module:
            continue
        seen.add(name)
        for op in module[name].body.walk():
            if has_trait(op, "calls"):
                todo.append(op.attrs["callee"])
            n = op.attrs.get("n") if has_trait(op, "loop") else None
            if isinstance(n, str):
                counts.setdefault(n, op.loc)
    missing = {n: loc for n, loc in counts.items() if n not in bind}
    if missing:
        n, loc = next(iter(missing.items()))
        raise AdcError(f"remat in a training step needs the loop's trip count: bind {n} "
                       f"(adc train --bind {n}=N, or train_step(..., dims={{'{n}': N}}))",
                       loc)
    used = {n: bind[n] for n in counts}
    return bind_dims(module, used) if used else module


def build_step(fn: Function, adjoint: Function, wrt: list[str], opt, clip: float | None,
               k: int, name: str) -> Function:
    taken = set(fn.arg_names)

    def fresh(n: str) -> str:
        while n in taken:
            n = "_" + n
        taken.add(n)
        return n

    params = [fn.arg(p) for p in wrt]
    model_state = list(fn.attrs.get("state", ()))
    key = key_input(fn)
    batch = [a for a in fn.args if a.name not in wrt and a.name not in model_state
             and a is not key]
    step_name = fresh("step")
    slots = [(s, p, fresh(f"{s}_{p.name}")) for s in opt.slots for p in params]
    inputs = {p.name: p.type for p in params}
    inputs[step_name] = TensorType("i64", ())
    inputs.update({n: p.type for _, p, n in slots})
    inputs.update({n: fn.arg(n).type for n in model_state})
    for a in batch:
        inputs[a.name] = _stacked(a.type, k) if k > 1 and a.type.rank else a.type
    if key is not None:   # the seed's key: each step draws from it folded with the step
        inputs[key.name] = key.type
    body = Block(list(inputs.values()), list(inputs))
    b = Builder(body, fn.loc)
    arg = {a.name: a for a in body.args}

    if key is not None:
        arg = {**arg, key.name: b.emit("rng_fold", arg[key.name], arg[step_name],
                                       site=STEP_SITE)}
    loss, outs = _loss_and_grads(b, adjoint, arg, wrt, batch, k)
    new_model_state, grads = outs[:len(model_state)], outs[len(model_state):]
    if loss.name is None and loss.defining_op is not None:
        loss.name = "loss"
    reserved = {f"grad_{p}" for p in wrt}
    for op in body.walk():  # the program's own values keep other names
        for r in op.results:
            if r.name in reserved:
                r.name += "_"
    seen: set[Value] = set()
    for j, (p, g) in enumerate(zip(wrt, grads)):
        if g.defining_op is None or g in seen or g is loss:
            # an input, or shared with another parameter: a copy of its own gets the name
            g = grads[j] = b.emit("mul", g, b.const(1.0, g.type.dtype))
        seen.add(g)
        g.name = f"grad_{p}"
    norms = [b.emit("sqrt", b.emit("sum", b.emit("mul", g, g))) for g in grads]
    for p, n in zip(wrt, norms):
        n.name = f"grad_norm_{p}"
    wide = "f64" if any(n.type.dtype == "f64" for n in norms) else norms[0].type.dtype
    stacked = b.emit("stack", *[n if n.type.dtype == wide else b.emit("cast", n, dtype=wide)
                                for n in norms])
    total = b.emit("sqrt", b.emit("sum", b.emit("mul", stacked, stacked)))
    total.name = "grad_norm"
    from ..training.optim import Scalars
    s = Scalars(b, arg[step_name], opt.lr)
    s.lr64.name = "lr"
    coef = None
    if clip is not None:
        coef = b.emit("div", s.const(clip, wide), b.emit("add", total, s.const(CLIP_EPS, wide)))
        coef = b.emit("minimum", coef, s.const(1.0, wide))
        coef.name = "clip_coef"
    # the scalars first, so that each parameter's clipping and update are consecutive ops
    dtypes = list(dict.fromkeys(g.type.dtype for g in grads))
    if coef is not None:
        for dt in dtypes:
            s.cast(coef, dt)
    opt.prepare(s, dtypes)
    new_params, new_slots = [], {}
    for p, g in zip(wrt, grads):
        if coef is not None:
            g = b.emit("mul", g, s.cast(coef, g.type.dtype))
        state = {sl: arg[n] for sl, q, n in slots if q.name == p}
        new_p, new_state = opt.update(s, arg[p], g, state)
        new_params.append(new_p)
        for sl, v in new_state.items():
            new_slots[(sl, p)] = v
    new_step = b.emit("add", arg[step_name], b.const(1, "i64"))
    new_state_values = [new_step] + [new_slots[(sl, p.name)] for sl, p, _ in slots] + \
        list(new_model_state)
    state_names = [step_name] + [n for *_, n in slots] + model_state
    for v, n in zip(new_params + new_state_values, wrt + state_names):
        if v.defining_op is not None and v.name is None:
            v.name = f"new_{n}"
    results = [loss, *new_params, *new_state_values, total, *norms, s.lr64]
    b.ret(results)
    outputs = ["loss", *wrt, *state_names, "grad_norm", *(f"grad_norm_{p}" for p in wrt), "lr"]
    attrs = {"train_step_of": fn.name, "params": tuple(wrt), "state": tuple(state_names),
             "batch": tuple(a.name for a in batch), "accumulate": k,
             "outputs": tuple(outputs), "slot_of": {n: p.name for _, p, n in slots},
             "in_place": {n: 1 + j for j, n in enumerate(wrt + state_names)}}
    if model_state:   # the function's own state inputs (running statistics and the like)
        attrs["model_state"] = tuple(model_state)
        attrs["state_init"] = dict(fn.attrs.get("state_init", {}))
    if "stacked" in fn.attrs:   # the layers of stacked groups, for paths outside
        attrs["stacked"] = fn.attrs["stacked"]
    return Function(name, body, [v.type for v in results], set(wrt), attrs, fn.loc)


def _stacked(t: TensorType, k: int) -> TensorType:
    return TensorType(t.dtype, (k,) + tuple(t.shape))


def _splice(b: Builder, fn: Function, args: dict[Value, Value]) -> list[Value]:
    """Copy `fn`'s body at `b` with its inputs replaced by `args`; returns its results."""
    value_map = dict(args)
    for op in fn.body.ops[:-1]:
        b.insert(clone_op(op, value_map))
    return [value_map.get(v, v) for v in fn.returned]


def _loss_and_grads(b: Builder, adjoint: Function, arg: dict, wrt: list[str],
                    batch: list[Value], k: int) -> tuple[Value, list[Value]]:
    """The loss and one gradient per parameter: one adjoint, or the mean over a loop of `k`."""
    if k == 1:
        outs = _splice(b, adjoint, {adjoint.arg(a.name): arg[a.name] for a in adjoint.args})
        return outs[0], outs[1:]
    scanned = [a for a in batch if a.type.rank]
    types = [adjoint.result_types[0]] + [adjoint.arg(p).type for p in wrt]
    loop = Block([TensorType("i64", ())] + types + [a.type for a in scanned],
                 ["mb"] + ["loss_sum"] + [f"grad_sum_{p}" for p in wrt]
                 + [a.name for a in scanned])
    sums, slices = loop.args[1:1 + len(types)], loop.args[1 + len(types):]
    mapping = {adjoint.arg(a.name): arg[a.name] for a in adjoint.args}
    mapping.update({adjoint.arg(a.name): s for a, s in zip(scanned, slices)})
    with b.inside(loop):
        key = key_input(adjoint)
        if key is not None:   # each micro-batch draws from a key of its own
            mapping[key] = b.emit("rng_fold", arg[key.name], loop.args[0], site=STEP_SITE)
        outs = _splice(b, adjoint, mapping)
        b.yield_([b.emit("add", acc, v) for acc, v in zip(sums, outs)])
    init = [b.emit("zeros", shape=t.shape, dtype=t.dtype) for t in types]
    op = b.for_(k, loop, init, [arg[a.name] for a in scanned],
                result_names=["loss_sum"] + [f"grad_sum_{p}" for p in wrt])
    means = [b.emit("div", v, b.const(float(k), v.type.dtype)) for v in op.results]
    return means[0], means[1:]


def gradient_values(fn: Function) -> dict[str, Value]:
    """The final gradient of each parameter of the step function `fn`, by parameter name:
    the top-level values named ``grad_<p>`` (before clipping and the update)."""
    wanted = {f"grad_{p}": p for p in fn.attrs.get("params", ())}
    found = {}
    for op in fn.body.ops:
        for r in op.results:
            if r.name in wanted:
                found.setdefault(wanted[r.name], r)
    return {p: found[p] for p in fn.attrs.get("params", ()) if p in found}
