"""Two-operand einsums computed as one batched matrix product (`einsum_matmul`): values
against numpy.einsum's own loop, the specs that must fall back to it, reverse mode through
the product against central differences, and both executors giving the same bits on the
transformer block, whose einsums all take the product."""
import numpy as np
import pytest

from adc_runtime.kernels.linalg import einsum, einsum_matmul
from gradcheck import check_grads
from test_compiled import assert_bits_equal, both, grad_module

# spec, shapes: every form a batched product takes
PRODUCTS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),               # one GEMM, no batch
    ("ij,jk->ki", [(2, 3), (3, 4)]),               # right operand first: swapped, no transpose
    ("ij,kj->ik", [(2, 3), (4, 3)]),               # transposed operand
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("bij,bjk->ibk", [(2, 2, 3), (2, 3, 2)]),      # batch letter not first in the output
    ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)]),       # two contracted letters
    ("jik,lkj->li", [(3, 2, 4), (5, 4, 3)]),       # two contracted, in different orders
    ("ij,ij->", [(2, 3), (2, 3)]),                 # 0-d result
    ("i,i->", [(4,)] * 2),
    ("ijk,k->ij", [(2, 3, 2), (2,)]),              # no free letter on the right
    ("k,ijk->ji", [(2,), (2, 3, 2)]),              # nor on the left
    ("bi,bi->b", [(3, 4), (3, 4)]),                # batched dot products
    ("btd,hdk->bhtk", [(2, 3, 5), (2, 5, 4)]),     # the transformer block's and adjoints
    ("btd,hdk->bhkt", [(2, 3, 5), (2, 5, 4)]),
    ("bhtk,hkd->btd", [(2, 2, 3, 4), (2, 4, 5)]),
    ("bhtk,btd->hdk", [(2, 2, 3, 4), (2, 3, 5)]),
    ("btd,bhtk->hkd", [(2, 3, 5), (2, 2, 3, 4)]),
    ("bhtk,bhsk->bhts", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij,jk->ik", [(1, 3), (3, 1)]),               # size-1 axes
    ("bij,bjk->bik", [(1, 1, 1), (1, 1, 1)]),
    ("ij,jk->ik", [(0, 3), (3, 4)]),               # size-0 axes: free, contracted, batch
    ("ij,jk->ik", [(2, 0), (0, 4)]),
    ("bij,bjk->bik", [(0, 2, 3), (0, 3, 2)]),
    ("ijk,jkl->il", [(2, 3, 0), (3, 0, 5)]),
]

# spec, shapes: not one product (or not valid), so numpy.einsum computes them
FALLBACKS = [
    ("ii,i->i", [(3, 3), (3,)]),                   # repeated letters
    ("ij,jj->i", [(2, 3), (3, 3)]),
    ("ii,ij->j", [(3, 3), (3, 4)]),
    ("i,j->ij", [(2,), (3,)]),                     # nothing contracted
    ("bi,bi->bi", [(2, 3), (2, 3)]),
    ("ij,jk->k", [(2, 3), (3, 4)]),                # i summed by one operand alone
    ("ab,cd->", [(2, 2), (3, 1)]),
]


def _args(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec,shapes", PRODUCTS, ids=[f"{s}-{sh}" for s, sh in PRODUCTS])
def test_products_match_numpy_einsum(spec, shapes, dtype):
    a, b = _args(shapes, dtype)
    assert einsum_matmul(spec, a.shape, b.shape, a.dtype, b.dtype) is not None
    got = einsum(np, a, b, spec=spec)
    # numpy.einsum's default path: its own C loop, no BLAS, in double precision
    want = np.einsum(spec, a.astype(np.float64), b.astype(np.float64))
    assert got.dtype == dtype and got.shape == want.shape and isinstance(got, np.ndarray)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert not np.shares_memory(got, a) and not np.shares_memory(got, b)  # the kernel is fresh


@pytest.mark.parametrize("spec,shapes", FALLBACKS, ids=[s for s, _ in FALLBACKS])
def test_other_specs_fall_back_to_numpy_einsum(spec, shapes):
    a, b = _args(shapes, np.float64)
    assert einsum_matmul(spec, a.shape, b.shape, a.dtype, b.dtype) is None
    np.testing.assert_array_equal(einsum(np, a, b, spec=spec),
                                  np.einsum(spec, a, b, optimize=True))


@pytest.mark.parametrize("dtypes", [(np.float32, np.float64), (np.float16,) * 2,
                                    (np.int64,) * 2, (np.int32, np.float32)], ids=str)
def test_other_dtypes_fall_back_to_numpy_einsum(dtypes):
    a, b = (x.astype(t) for x, t in zip(_args([(2, 3), (3, 4)], np.float64), dtypes))
    assert einsum_matmul("ij,jk->ik", a.shape, b.shape, a.dtype, b.dtype) is None
    got = einsum(np, a, b, spec="ij,jk->ik")
    want = np.einsum("ij,jk->ik", a, b, optimize=True)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_mismatched_sizes_fall_back_and_numpy_reports_them():
    a, b = _args([(2, 3), (4, 5)], np.float64)
    assert einsum_matmul("ij,jk->ik", a.shape, b.shape, a.dtype, b.dtype) is None
    with pytest.raises(ValueError):
        einsum(np, a, b, spec="ij,jk->ik")


@pytest.mark.parametrize("spec,shapes", [p for p in PRODUCTS if 0 not in sum(p[1], ())],
                         ids=[s for s, sh in PRODUCTS if 0 not in sum(sh, ())])
def test_products_reverse_mode_against_central_differences(spec, shapes):
    # the adjoint's einsums are two-operand products as well (ct with the other operand)
    check_grads("einsum", _args(shapes, np.float64, seed=1), {"spec": spec})


TRANSFORMER = """
def block(x: f32[B, T, D], param Wq: f32[H, D, K], param Wk: f32[H, D, K],
          param Wv: f32[H, D, K], param Wo: f32[H, K, D]) -> f32 {
    q = einsum("btd,hdk->bhtk", x, Wq)
    kt = einsum("btd,hdk->bhkt", x, Wk)
    v = einsum("btd,hdk->bhtk", x, Wv)
    p = softmax(q @ kt * 0.125, axis=-1)
    att = einsum("bhtk,hkd->btd", p @ v, Wo)
    return mean((x + att) * (x + att))
}
"""


def test_transformer_gradient_bit_identical_in_both_executors():
    m = grad_module(TRANSFORMER, "block", ["Wq", "Wk", "Wv", "Wo"])
    rng = np.random.default_rng(0)
    shapes = {"x": (2, 5, 6), "Wq": (3, 6, 4), "Wk": (3, 6, 4), "Wv": (3, 6, 4),
              "Wo": (3, 4, 6)}
    inputs = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    specs = [op.attrs["spec"] for op in m["block_grad"].body.ops if op.name == "einsum"]
    f32 = np.dtype(np.float32)
    for spec in specs:  # every one of them a product (any sizes: ones)
        a, b = (tuple(1 for _ in term) for term in spec.split("->")[0].split(","))
        assert einsum_matmul(spec, a, b, f32, f32) is not None, spec
    assert len(set(specs)) >= 6
    want, got = both(m, "block_grad", inputs, calls=3)
    assert_bits_equal(want, got)
