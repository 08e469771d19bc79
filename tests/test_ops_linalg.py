"""matmul, transpose, einsum: values against NumPy, reverse mode against finite differences,
batch broadcasting and 1-D operands, spec errors."""
import numpy as np
import pytest

from adcompiler.diagnostics import ShapeError
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block
from adcompiler.ir.types import TensorType
from gradcheck import check_grads, check_second_order
from test_ops_shape import evaluate, rand, symbolic_grads

MATMUL_SHAPES = [
    ((3,), (3,)),                 # dot product -> scalar
    ((3,), (3, 4)),               # vector @ matrix
    ((2, 3), (3,)),               # matrix @ vector
    ((2, 3), (3, 4)),
    ((2, 2, 3), (3, 4)),          # batched @ matrix
    ((2, 3), (5, 3, 4)),          # matrix @ batched
    ((3,), (2, 3, 4)),            # vector @ batched
    ((2, 2, 3), (3,)),            # batched @ vector
    ((4, 1, 2, 3), (3, 3, 2)),    # batch dims broadcast: (4, 1) with (3,) -> (4, 3)
    ((1, 2, 3), (2, 3, 2)),       # size-1 batch dim broadcasts
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul_values(sa, sb):
    a, b = rand(*sa), rand(*sb)
    got = evaluate("matmul", [a, b])
    want = np.matmul(a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul_grads(sa, sb):
    check_grads("matmul", [rand(*sa), rand(*sb)])


def test_matmul_in_f32_and_symbolic_batch():
    a, b = rand(3, 2, 4, dtype=np.float32), rand(4, 5, dtype=np.float32)
    got = evaluate("matmul", [a, b], shapes=[("B", 2, 4), (4, 5)])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, a @ b, rtol=1e-6)
    symbolic_grads("matmul", [rand(3, 2, 4), rand(4, 5)], {}, [("B", 2, 4), (4, 5)])
    symbolic_grads("matmul", [rand(4), rand(3, 4, 2)], {}, [(4,), ("B", 4, 2)])


@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1], [-1, 0, 1]], ids=str)
def test_transpose(perm):
    x = rand(2, 3, 4)
    attrs = {} if perm is None else {"perm": perm}
    want = np.transpose(x, None if perm is None else perm)
    np.testing.assert_array_equal(evaluate("transpose", [x], attrs), want)
    check_grads("transpose", [x], attrs)


EINSUMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("ij->i", [(2, 3)]),                   # j summed by the only operand: broadcast back
    ("ij->ji", [(2, 3)]),
    ("i,j->ij", [(2,), (3,)]),
    ("ij,ij->", [(2, 3), (2, 3)]),
    ("ijk,k->ij", [(2, 3, 2), (2,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 4)]),
    ("ab,cd->", [(2, 2), (3, 1)]),         # every index summed by one operand
    ("i->", [(4,)]),
    ("ij, jk -> ki", [(2, 3), (3, 2)]),     # spaces are ignored
]


@pytest.mark.parametrize("spec,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_values(spec, shapes):
    args = [rand(*s) for s in shapes]
    got = evaluate("einsum", args, {"spec": spec})
    want = np.einsum(spec, *args)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("spec,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_grads(spec, shapes):
    check_grads("einsum", [rand(*s) for s in shapes], {"spec": spec})


@pytest.mark.parametrize("op,shapes,attrs", [
    ("matmul", [(2, 3), (3, 2)], {}),
    ("matmul", [(3,), (2, 3, 2)], {}),
    ("matmul", [(2, 2, 3), (3,)], {}),
    ("transpose", [(2, 3)], {}),
    ("einsum", [(2, 3), (3, 2)], {"spec": "ij,jk->ki"}),
    ("einsum", [(2, 3)], {"spec": "ij->i"}),
])
def test_second_order(op, shapes, attrs):
    check_second_order(op, [rand(*s) for s in shapes], attrs)


def _type_of(op, shapes, attrs=None):
    body = Block([TensorType("f32", s) for s in shapes])
    return Builder(body).emit(op, *body.args, **(attrs or {})).type


def test_symbolic_types():
    assert _type_of("matmul", [("B", "T", 4), (4, "H")]) == TensorType("f32", ("B", "T", "H"))
    assert _type_of("matmul", [(1, "T", 4), ("B", 4, 2)]).shape == ("B", "T", 2)
    assert _type_of("einsum", [("B", 4), (4, "H")], {"spec": "bi,ih->hb"}).shape == ("H", "B")


@pytest.mark.parametrize("op,shapes,attrs,message", [
    ("matmul", [(2, 3), (4, 2)], {}, "contracts dims that differ"),
    ("matmul", [(), (3,)], {}, "rank >= 1"),
    ("matmul", [(2, 2, 3), (3, 3, 4)], {}, "cannot be broadcast"),
    ("matmul", [("B", 3), ("T", 2)], {}, "contracts dims that differ"),
    ("transpose", [(2, 3)], {"perm": [0, 2]}, "not a permutation"),
    ("transpose", [(2, 3)], {"perm": ["a", 0]}, "not a permutation"),
    ("einsum", [(3, 3)], {"spec": "ii->i"}, "repeated subscript"),
    ("einsum", [(3, 3)], {"spec": "ij"}, "exactly one '->'"),
    ("einsum", [(3, 3)], {"spec": "...i->i"}, "ellipsis"),
    ("einsum", [(3, 3)], {"spec": "ij->k"}, "appears in no input"),
    ("einsum", [(3, 3)], {"spec": "ij,jk->ik"}, "2 input terms but 1 operands"),
    ("einsum", [(3, 3), (2, 3)], {"spec": "ij,jk->ik"}, "subscript 'j' has sizes 3 and 2"),
    ("einsum", [(3, 3)], {"spec": "ijk->i"}, "3 subscripts"),
])
def test_type_errors(op, shapes, attrs, message):
    with pytest.raises(ShapeError, match=message):
        _type_of(op, shapes, attrs)
