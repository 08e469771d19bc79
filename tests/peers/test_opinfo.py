"""adc against PyTorch's own op tests: the float64 autograd samples of the OpInfo database
(``torch.testing._internal.common_methods_invocations.op_db``), each run as a one-op TDSL
program and compared in value, gradient, tangent and Hessian-vector product
(``opinfo_check``; the map of ops is ``opinfo_map``).

By default each mapped OpInfo runs a few samples (two that adc runs, one it refuses); the
whole set runs with ``-m slow`` (one test printing the table) or with ``ADC_OPINFO=all``
(every sample of every op, op by op). ``python tests/peers/opinfo_table.py`` prints the
table without pytest.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # PyTorch's op_db imports it

from opinfo_call import Call  # noqa: E402
from opinfo_map import INTERNAL, MAP, UNMAPPED  # noqa: E402
from opinfo_table import STATUSES, mapped_ops, run_op, table  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # inside torch.func.jvp
FULL = os.environ.get("ADC_OPINFO") == "all"
# the share of all samples that pass (docs/peers.md); a drop is a regression
PASS_FLOOR = 0.9


@pytest.fixture(scope="module")
def ops():
    torch.set_num_threads(1)
    return {name: (info, entry) for name, info, entry in mapped_ops()}


def few(entry, per_kind=(2, 1), scan=100):
    """The first samples adc should run and the first it should refuse (among the first
    `scan` samples, once there are enough to run)."""
    def pick(pairs):
        run, refused = [], []
        for i, s in pairs:
            if i >= scan and len(run) >= per_kind[0]:
                break
            c = Call()
            try:
                entry.translate(c, s)
            except Exception:  # the check reports it
                return [(i, s)]
            (refused if c.refusals else run).append((i, s))
            if len(run) >= per_kind[0] and len(refused) >= per_kind[1]:
                break
        return run[:per_kind[0]] + refused[:per_kind[1]]
    return pick


@pytest.mark.parametrize("name", list(MAP))
def test_opinfo_samples(ops, name):
    info, entry = ops[name]
    counts, notes = run_op(name, info, entry, pick=None if FULL else few(entry))
    fails = [f"[{i}] {out.detail}\n{out.program}" for i, out in notes if out.status == "fail"]
    assert not fails, f"{name}: " + "\n".join(fails)
    assert counts["pass"] + counts["refused"] + counts["convention"] > 0


@pytest.mark.slow
def test_opinfo_table(ops, capsys):
    """Every sample of every mapped op: no failure, and the share that passes holds."""
    rows, fails = [], []
    for name, (info, entry) in ops.items():
        counts, notes = run_op(name, info, entry)
        rows.append((name, entry, counts))
        fails += [f"{name}[{i}]: {out.detail}" for i, out in notes if out.status == "fail"]
    text = table(rows)
    with capsys.disabled():
        print("\n" + text)
    assert not fails, "\n".join(fails)
    total = sum(sum(c[s] for s in STATUSES) for _, _, c in rows)
    assert sum(c["pass"] for _, _, c in rows) >= PASS_FLOOR * total


def test_every_op_is_mapped_or_says_why():
    """A new TDSL op gets an OpInfo entry here, or a line saying why there is none."""
    from adcompiler.ops import registry
    mapped = {e.adc for e in MAP.values()}
    public = set(registry.REGISTRY) - INTERNAL
    missing = sorted(public - mapped - set(UNMAPPED))
    assert not missing, f"map these ops to an OpInfo in opinfo_map.py, or list them in " \
                        f"UNMAPPED: {missing}"
    assert not mapped & set(UNMAPPED)


# ---- the harness itself: it must see a wrong answer, and tell a kink from a bug ------------

def _sample(x, *args, **kwargs):
    """A sample whose float tensors all require grad."""
    from torch.testing._internal.opinfo.core import SampleInput
    args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point()
                 else a for a in args)
    return SampleInput(x.requires_grad_(), args=args, kwargs=kwargs)


def test_a_wrong_op_fails(ops):
    from opinfo_check import check
    from opinfo_map import Entry
    from opinfo_tensor import unary
    info, _ = ops["exp"]
    s = _sample(torch.linspace(-1, 1, 5, dtype=torch.float64))
    assert check(info, Entry("sin", unary("sin")), s, 0).status == "fail"
    assert check(info, MAP["exp"], s, 0).status == "pass"


def test_a_wrong_derivative_fails(ops):
    """exp(x) and exp(stop_gradient(x)) agree in value only."""
    from opinfo_check import check
    from opinfo_map import Entry
    info, _ = ops["exp"]
    s = _sample(torch.linspace(-1, 1, 5, dtype=torch.float64))
    out = check(info, Entry("exp", lambda c, s: f"exp(stop_gradient({c.t(s.input)}))"), s, 0)
    assert out.status == "fail" and out.detail.startswith("grad x0")


def test_an_accepted_refusal_fails(ops):
    from opinfo_check import check
    from opinfo_map import Entry

    def claims_refusal(c, s):
        c.refuse("nothing adc lacks")
        return f"exp({c.t(s.input)})"
    info, _ = ops["exp"]
    s = _sample(torch.ones(3, dtype=torch.float64))
    out = check(info, Entry("exp", claims_refusal), s, 0)
    assert out.status == "fail" and "accepted" in out.detail


def test_pool_indices_are_compared_and_a_wrong_one_fails(ops):
    """max_pool2d(return_indices=True): the values with every derivative, and the indices
    by max_pool2d_indices; wrong indices make the sample a failure."""
    from opinfo_check import check
    from opinfo_map import Entry
    info, entry = ops["nn.functional.max_pool2d"]
    x = torch.arange(30, dtype=torch.float64).reshape(1, 5, 6).remainder(7)   # ties
    s = _sample(x, kernel_size=3, stride=2, padding=1, dilation=(1, 2), ceil_mode=True,
                return_indices=True)
    out = check(info, entry, s, 0)
    assert out.status == "pass" and "results" in out.checks, out.detail

    def shifted(c, s):   # every index one element later
        expr = entry.translate(c, s)
        c.also = [(k, f"{e} + 1") for k, e in c.also]
        return expr
    out = check(info, Entry("max_pool2d", shifted), _sample(x.clone(), **s.kwargs), 0)
    assert out.status == "fail" and out.detail.startswith("result 1"), out.detail


def _kinks():
    f = dict(dtype=torch.float64)
    x = torch.tensor([-1.0, 0.0, 0.0, 2.0], **f)
    return [
        ("nn.functional.relu", (x,), {}),                                 # relu'(0) = 0
        ("abs", (x,), {}),                                                # abs'(0) = 0
        ("maximum", (x, torch.tensor([0.0, 0.0, 1.0, 2.0], **f)), {}),   # ties split
        ("minimum", (x, torch.tensor([0.0, 0.0, 1.0, 2.0], **f)), {}),
        ("max.binary", (x, torch.tensor([-1.0, 0.0, 1.0, 2.0], **f)), {}),
        ("amax", (torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], **f),), {"dim": 1}),
        ("amin", (torch.tensor([[1.0, 1.0, 3.0]], **f),), {"dim": -1}),
        ("max.reduction_no_dim", (torch.tensor([[1.0, 3.0], [3.0, 0.0]], **f),), {}),
        ("clamp", (x, torch.tensor([-1.0, 0.5, 0.0, 1.0], **f),          # x at either bound
                   torch.tensor([1.0, 0.0, 1.0, 2.0], **f)), {}),
        ("nn.functional.max_pool2d", (torch.tensor([[[[1.0, 2.0], [2.0, 2.0]]]], **f),),
         {"kernel_size": 2}),                                             # first maximum
    ]


@pytest.mark.parametrize("name,args,kwargs", _kinks(), ids=[k[0] for k in _kinks()])
def test_kinks_where_adc_and_pytorch_agree(ops, name, args, kwargs):
    """The kink conventions of tdsl.md section 5 that PyTorch shares: samples placed on the
    kink pass (values, gradients, tangents and hvp)."""
    from opinfo_check import check
    info, entry = ops[name]
    sample = _sample(args[0].clone(), *[a.clone() for a in args[1:]], **kwargs)
    out = check(info, entry, sample, 0)
    assert out.status == "pass", out.detail


def test_ties_of_max_with_dim_are_a_convention_and_of_amax_a_pass(ops):
    """max(x, dim) sends a tied slice's gradient to one index, adc splits it (tdsl.md
    section 5): the sample counts as a convention, not a pass; amax splits as adc does."""
    from opinfo_check import check
    x = torch.tensor([[1.0, 3.0, 3.0], [0.5, 2.0, 1.0]], dtype=torch.float64)
    info, entry = ops["max.reduction_with_dim"]
    assert check(info, entry, _sample(x.clone(), 1), 0).status == "convention"
    assert check(info, entry, _sample(x[1:].clone(), 1), 0).status == "pass"
    info, entry = ops["amax"]
    assert check(info, entry, _sample(x.clone(), dim=1), 0).status == "pass"
