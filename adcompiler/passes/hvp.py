"""Second derivatives by composing the two modes on their own output.

* Forward-over-reverse (``hvp``): the JVP pass applied to the adjoint program ``f_grad``.
  ``f_hvp(inputs..., t_<w>...)`` returns ``f``'s results, the gradients (as ``f_grad``) and
  one Hessian-vector product per differentiated input: the tangents of the gradients
  along the direction ``t``. A non-scalar result is seeded with ones, as in reverse mode,
  so the Hessian is that of the sum of the results' elements.
* Reverse-over-forward: reverse mode applied to the tangent program, seeded on the
  tangents only. ``f_rof(inputs..., t_<w>...)`` returns the result tangents followed by
  one gradient of their summed elements per differentiated input: the same numbers as
  ``f_hvp``'s products, reached the other way round (a cross-check).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Module
from .ad import ADPass, resolve_wrt
from .clone import clone_function
from .dce import DCE
from .inline import Inline
from .jvp import build_tangent
from .pipeline import register_pass
from .reverse import Reverse, build_adjoint


def forward_over_reverse(module: Module, fn_name: str, wrt: list[str]) -> Module:
    """`module`, mutated: ``<fn>_grad`` and ``<fn>_hvp`` added."""
    wrt = resolve_wrt(module[fn_name], wrt)
    n = len(module[fn_name].result_types)
    m = Reverse(wrt=tuple(wrt), fn=fn_name).run(module)
    grad_name = f"{fn_name}_grad"
    # the adjoint calls grad rules; their bodies are differentiated like any code
    m = DCE(fn=grad_name).run(Inline(fn=grad_name).run(m))
    grad_fn = m[grad_name]
    hvp = build_tangent(m, grad_fn, wrt, f"{fn_name}_hvp",
                        outputs=list(range(n, n + len(wrt))))
    hvp.attrs = {"hvp_of": fn_name, "wrt": tuple(wrt)}
    if "stacked" in grad_fn.attrs:   # the layers of stacked groups, for paths outside
        hvp.attrs["stacked"] = grad_fn.attrs["stacked"]
    m.add(hvp)
    return DCE(fn=hvp.name).run(m)


def reverse_over_forward(module: Module, fn_name: str, wrt: list[str]) -> Module:
    """A copy of `module` with ``<fn>_jvp`` and ``<fn>_rof`` added."""
    wrt = resolve_wrt(module[fn_name], wrt)
    m = Inline(fn=fn_name)(module)  # a copy: later steps mutate it
    fn = m[fn_name]
    jvp = build_tangent(m, fn, wrt, f"{fn_name}_jvp")
    m.add(jvp)
    n = len(fn.result_types)
    # the tangent outputs alone, so that reverse mode seeds only them
    tangents_only, _ = clone_function(jvp, f"{fn_name}_jvp_tangents")
    ret = tangents_only.body.ops[-1]
    ret.operands = ret.operands[n:]
    tangents_only.result_types = tangents_only.result_types[n:]
    m.add(tangents_only)
    # calls to tangent rules become code that reverse mode differentiates
    m = DCE(fn=tangents_only.name).run(Inline(fn=tangents_only.name).run(m))
    rof = build_adjoint(m, m[tangents_only.name], wrt, f"{fn_name}_rof")
    rof.attrs = {"rof_of": fn_name, "wrt": tuple(wrt)}
    m.add(rof)
    del m.functions[tangents_only.name]
    return DCE(fn=rof.name).run(m)


@register_pass("hvp")
@dataclass(frozen=True)
class HVP(ADPass):
    """Add ``<fn>_grad`` and ``<fn>_hvp`` (forward-over-reverse) for `fn`.

    `wrt` names the differentiated inputs (default: the inputs marked ``param``); with
    `check`, also add ``<fn>_jvp`` and ``<fn>_rof`` (reverse-over-forward).
    """

    check: bool = False

    def derive(self, module: Module, fn_name: str) -> Module:
        # the check works on a copy, made before forward_over_reverse mutates `module`
        rof = reverse_over_forward(module, fn_name, list(self.wrt)) if self.check else None
        m = forward_over_reverse(module, fn_name, list(self.wrt))
        if rof is not None:
            for name in (f"{fn_name}_jvp", f"{fn_name}_rof"):
                m.add(rof[name])
        return m
