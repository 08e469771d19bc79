"""Check one OpInfo sample against adc: the value, the reverse-mode gradient (against
``torch.autograd``), the forward-mode tangent (against ``torch.func.jvp``) and, where the
OpInfo supports it, the Hessian-vector product (against double backward).

Every sample ends in one of: ``pass``; ``refused`` (it uses something adc does not have,
and adc said so with a located AdcError at the op's line); ``convention`` (it reaches a kink
where adc's documented convention differs from PyTorch's, the value agrees and only a
derivative differs); ``fail`` (anything else: a wrong value or derivative, an error where a
result was due, a result where an error was due); ``torch error`` (PyTorch itself rejects
the sample; not counted).
"""
from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass

import numpy as np
import torch

import adcompiler as adc
from adcompiler.diagnostics import AdcError, InternalError
from opinfo_call import TDSL_DTYPES, Call

RTOL, ATOL = 1e-7, 1e-9  # float64 throughout
OP_LINE = 2              # the line of the op in the generated program


@dataclass
class Outcome:
    status: str          # pass | refused | convention | fail | torch error
    detail: str = ""
    program: str = ""
    reasons: tuple = ()  # what adc lacks, for a refused sample
    checks: tuple = ()   # which comparisons ran: value, gradient, tangent, hvp


def tdsl_type(t) -> str:
    dtype = TDSL_DTYPES[t.dtype] if isinstance(t, torch.Tensor) else "f64"
    shape = list(t.shape) if isinstance(t, torch.Tensor) else []
    return f"{dtype}[{', '.join(map(str, shape))}]" if shape else dtype


def program(c: Call, expr: str, result, seeded: bool = False) -> str:
    """``def f(inputs) -> T { return EXPR }``; `seeded`: ``sum(EXPR * ct)``, a scalar."""
    params = [f"{n}: {tdsl_type(t)}" for n, t in c.inputs.items()]
    if seeded:
        params.append(f"ct: {tdsl_type(result)}")
        return f"def f({', '.join(params)}) -> f64 {{\n    return sum({expr} * ct)\n}}\n"
    return f"def f({', '.join(params)}) -> {tdsl_type(result)} {{\n    return {expr}\n}}\n"


def _rebuild(obj, swap: dict):
    if isinstance(obj, torch.Tensor):
        return swap.get(id(obj), obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_rebuild(x, swap) for x in obj)
    if isinstance(obj, dict):
        return {k: _rebuild(v, swap) for k, v in obj.items()}
    return obj


class Torch:
    """The sample as a function of its differentiated tensors, and PyTorch's derivatives."""

    def __init__(self, op, sample, c: Call, wrt: list[str]):
        self.op, self.sample, self.pick = op, sample, c.pick
        self.ids = [id(c.inputs[n]) for n in wrt]
        self.primals = [c.inputs[n].detach().clone() for n in wrt]

    def __call__(self, *xs):
        s = self.sample
        swap = dict(zip(self.ids, xs))
        # tensors the sample holds but adc does not read (running statistics) are copied,
        # so that an in-place update by PyTorch leaves the sample as it was
        args = _rebuild((s.input, s.args, s.kwargs), swap)
        args = _rebuild(args, {id(t): t.detach().clone() for t in _tensors(args)
                               if id(t) not in {id(x) for x in xs}})
        with _math_attention():
            out = self.op(args[0], *args[1], **args[2])
        return out[self.pick] if self.pick is not None else out

    def leaves(self):
        return [p.clone().requires_grad_() for p in self.primals]

    def vjp(self, ct):
        xs = self.leaves()
        out = self(*xs)
        return out, _grad(out, xs, ct)

    def jvp(self, tangents, forward_ad: bool):
        if forward_ad:
            try:
                return torch.func.jvp(self, tuple(self.primals), tuple(tangents))[1]
            except (RuntimeError, NotImplementedError):
                pass
        # J t as the derivative of the linear map u -> J^T u (double backward)
        xs = self.leaves()
        out = self(*xs)
        u = torch.zeros_like(out, requires_grad=True)
        g = torch.autograd.grad(out, xs, u, create_graph=True, allow_unused=True)
        terms = [(gi * ti).sum() for gi, ti in zip(g, tangents) if gi is not None
                 and gi.requires_grad]
        return _grad(sum(terms), [u], None)[0] if terms else torch.zeros_like(out)

    def hvp(self, ct, v):
        xs = self.leaves()
        g = torch.autograd.grad((self(*xs) * ct).sum(), xs, create_graph=True,
                                allow_unused=True)
        terms = [(gi * vi).sum() for gi, vi in zip(g, v) if gi is not None and gi.requires_grad]
        if not terms:
            return [torch.zeros_like(x) for x in xs]
        return _grad(sum(terms), xs, None)


def _math_attention():
    """PyTorch's reference attention, whose double backward exists (the fused CPU kernel
    has none)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.MATH])


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def _grad(out, xs, ct):
    if not out.requires_grad:
        return [torch.zeros_like(x) for x in xs]
    g = torch.autograd.grad(out, xs, ct, allow_unused=True)
    return [torch.zeros_like(x) if gi is None else gi for gi, x in zip(g, xs)]


def mismatch(what: str, got, want) -> str:
    """'' when `got` matches `want` (float64 tolerances, NaN where NaN), else what differs."""
    got = np.asarray(got)
    want = want.detach().numpy(force=True) if isinstance(want, torch.Tensor) else np.asarray(want)
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, PyTorch {want.shape}"
    if got.dtype != want.dtype:
        return f"{what}: dtype {got.dtype}, PyTorch {want.dtype}"
    if np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
        return ""
    with np.errstate(invalid="ignore"):
        err = np.abs(got.astype(np.float64) - want) - RTOL * np.abs(want)
    err = np.where(np.isnan(err), np.inf, err)
    at = np.unravel_index(int(np.argmax(err)), got.shape) if got.ndim else ()
    return f"{what}: at {list(at)} got {got[at]!r}, PyTorch {want[at]!r}"


def _located(e: Exception) -> bool:
    return (isinstance(e, AdcError) and not isinstance(e, InternalError)
            and getattr(e, "loc", None) is not None and e.loc.line == OP_LINE)


def check(info, entry, sample, index: int, second_order: bool = True) -> Outcome:
    """Run the four checks of one sample (see the module docstring)."""
    c = Call()
    try:
        expr = entry.translate(c, sample)
    except Exception as e:  # a sample shape the translator does not know: a harness bug
        return Outcome("fail", f"translator: {type(e).__name__}: {e}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = info.op(sample.input, *sample.args, **sample.kwargs)
        results, want = want, (want[c.pick] if c.pick is not None else want)
    except Exception as e:
        return Outcome("torch error", f"{type(e).__name__}: {str(e).splitlines()[0]}")
    src = program(c, expr, want)
    names = list(c.inputs)
    arrays = [c.inputs[n].detach().numpy(force=True).copy() for n in names]
    if c.refusals:
        try:
            adc.function(src)
        except Exception as e:
            if _located(e):
                return Outcome("refused", "; ".join(c.refusals) + f" -> {e}", src,
                               tuple(c.refusals))
            return Outcome("fail", f"refused without a located error: {type(e).__name__}: {e}",
                           src)
        return Outcome("fail", "adc accepted a call it was expected to refuse: "
                       + "; ".join(c.refusals), src)
    try:
        outcome = _compare(info, entry, sample, index, c, src, expr, names, arrays, want,
                           second_order)
        return _also(c, names, arrays, results, outcome)
    except Exception as e:
        return Outcome("fail", f"{type(e).__name__}: {str(e).splitlines()[0]}", src)


def _also(c, names, arrays, results, outcome: Outcome) -> Outcome:
    """The tuple's other results that adc computes by calls of their own (``c.also``),
    compared by value; one that differs makes the sample a failure."""
    if outcome.status != "pass" or not c.also:
        return outcome
    for k, expr in c.also:
        src = program(c, expr, results[k])
        with np.errstate(all="ignore"):
            got = adc.function(src)(*arrays)
        problem = mismatch(f"result {k}", got, results[k])
        if problem:
            return Outcome("fail", problem, src, checks=outcome.checks)
    return Outcome("pass", "", outcome.program, checks=outcome.checks + ("results",))


def _compare(info, entry, sample, index, c, src, expr, names, arrays, want, second_order):
    rng = np.random.default_rng(zlib.crc32(f"{info.name}.{info.variant_test_name}:{index}"
                                           .encode()))
    with np.errstate(all="ignore"):
        got = adc.function(src)(*arrays)
    problems, checks = [mismatch("value", got, want)], ["value"]
    wrt = [n for n in names if c.inputs[n].dtype.is_floating_point and c.inputs[n].requires_grad]
    float_out = isinstance(want, torch.Tensor) and want.dtype.is_floating_point
    if wrt and float_out and info.supports_autograd:
        ref = Torch(info.op, sample, c, wrt)
        ct = rng.standard_normal(tuple(want.shape))
        with np.errstate(all="ignore"):
            _, pullback = adc.vjp(src, wrt=tuple(wrt))(*arrays)
            grads = pullback(ct)
        _, tgrads = ref.vjp(torch.from_numpy(ct))
        problems += [mismatch(f"grad {n}", g, tg) for n, g, tg in zip(wrt, grads, tgrads)]
        checks += ["gradient", "tangent"]
        tangents = [rng.standard_normal(tuple(c.inputs[n].shape)) for n in wrt]
        with np.errstate(all="ignore"):
            _, tangent = adc.jvp(src, wrt=tuple(wrt))(*arrays, *tangents)
        ttan = ref.jvp([torch.from_numpy(t) for t in tangents], info.supports_forward_ad)
        problems.append(mismatch("tangent", tangent, ttan))
        if second_order and (info.supports_gradgrad or info.supports_fwgrad_bwgrad):
            seeded = program(c, expr, want, seeded=True)
            v = [rng.standard_normal(tuple(c.inputs[n].shape)) for n in wrt]
            with np.errstate(all="ignore"):
                h = adc.hvp(seeded, wrt=tuple(wrt))(*arrays, ct, *v)
            th = ref.hvp(torch.from_numpy(ct), [torch.from_numpy(x) for x in v])
            problems += [mismatch(f"hvp {n}", hi, ti) for n, hi, ti in zip(wrt, h, th)]
            checks.append("hvp")
    problems, checks = [p for p in problems if p], tuple(checks)
    if not problems:
        return Outcome("pass", "", src, checks=checks)
    derivative_only = not problems[0].startswith("value")
    if entry.convention and entry.kink is not None and derivative_only and entry.kink(sample):
        return Outcome("convention", "; ".join(problems), src, checks=checks)
    return Outcome("fail", "; ".join(problems), src, checks=checks)
