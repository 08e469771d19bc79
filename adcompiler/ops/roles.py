"""What an op's operand says about the parameter it reads: the `param_role` rule of an op,
which initialization by role asks (`adcompiler.training.init`).

``param_role(op, k)`` returns ``(role, fans)`` for operand `k`, or None when the use says
nothing. Roles: ``gain`` and ``bias`` (a normalization's scale and shift), ``weight`` (a
factor of a product, with its ``(fan_in, fan_out)`` as `torch.nn.init` computes them; dims
may be symbolic, as products written ``"C*3"``), ``embedding`` (a table rows are taken
from), ``addend`` (added to something: a bias when that is a product), ``through`` (the
elements pass on to the result unchanged in role: a cast, a negation; views need no rule,
their trait says it).
"""
from __future__ import annotations

THROUGH = ("through", None)
ADDEND = ("addend", None)
EMBEDDING = ("embedding", None)


def norm(gain: int, bias: int | None = None):
    """The rule of a normalization whose operand `gain` scales and `bias` shifts."""
    def rule(op, k):
        if k == gain:
            return "gain", None
        if k == bias:
            return "bias", None
        return None
    return rule


def first_through(op, k):
    return THROUGH if k == 0 else None


def addend(op, k):
    return ADDEND


def table(op, k):
    return EMBEDDING if k == 0 else None


def product(op, k):
    """A factor of ``a @ b`` or an einsum: ``x @ W`` with ``W: [in, out]`` has fan-in ``in``;
    ``W @ x`` with ``W: [out, in]`` (torch's Linear) has fan-in ``in``; a vector factor is
    a layer of one output."""
    shape = op.operands[k].type.shape
    if len(shape) == 1:
        return "weight", (shape[0], 1)
    if len(shape) < 2:
        return "weight", None
    if k == 0 and len(op.operands) == 2 and not op.attrs.get("spec"):   # W @ x
        return "weight", (shape[-1], shape[-2])
    return "weight", (shape[-2], shape[-1])


def convolution(op, k):
    """The weight ``[O, C/groups, k...]`` of a convolution (``[C, O/groups, k...]`` of a
    transposed one): fan-in ``shape[1] * k...``, fan-out ``shape[0] * k...``."""
    if k != 1:
        return None
    shape = op.operands[1].type.shape
    receptive = 1
    for d in shape[2:]:
        receptive = _times(receptive, d)
    return "weight", (_times(shape[1], receptive), _times(shape[0], receptive))


def _times(a, b):
    if a == 1:
        return b
    return a * b if isinstance(a, int) and isinstance(b, int) else f"{a}*{b}"
