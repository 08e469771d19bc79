"""The IR's objects stay lean and behave as values (`adcompiler.ir.core`, `ir.types`)."""
from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest

from adcompiler.ir.core import NO_ATTRS, Block, Op, release
from adcompiler.ir.types import TensorType


def test_equal_types_are_one_object_however_made():
    t = TensorType("f32", (2, "B"))
    assert TensorType("f32", [2, "B"]) is t
    assert TensorType("f32", (np.int64(2), "B")) is t
    assert TensorType(dtype="f32", shape=(2, "B")) is t
    assert pickle.loads(pickle.dumps(t)) is t and copy.deepcopy(t) is t
    assert TensorType("f64", (2, "B")) != t and TensorType("f32", (2,)) != t
    assert (t.rank, t.is_float, TensorType("i64").rank, TensorType("i64").is_float) == \
        (2, True, 0, False)
    assert repr(t) == "TensorType(dtype='f32', shape=(2, 'B'))" and str(t) == "f32[2, B]"


def test_a_type_made_from_numpy_dims_holds_ints():
    t = TensorType("f32", (np.int64(7),))
    assert type(t.shape[0]) is int and TensorType("f32", (7,)) is t


def test_types_cannot_change():
    t = TensorType("f32", (3,))
    with pytest.raises(AttributeError):
        t.dtype = "f64"
    with pytest.raises(AttributeError):
        del t.shape
    with pytest.raises(AssertionError):
        TensorType("f12", ())


def test_ops_without_attrs_or_regions_share_empty_ones():
    t = TensorType("f32", (2,))
    block = Block([t])
    a = Op("neg", block.args, [t])
    b = Op("neg", a.results, [t], {})
    assert a.attrs is NO_ATTRS and b.attrs is NO_ATTRS and a.regions == () == b.regions
    with pytest.raises(TypeError, match="assign a new dict"):
        a.attrs["recompute"] = True
    a.attrs = {**a.attrs, "recompute": True}
    assert a.attrs == {"recompute": True} and b.attrs == {}
    assert copy.deepcopy(NO_ATTRS) is NO_ATTRS and pickle.loads(pickle.dumps(NO_ATTRS)) is NO_ATTRS


def test_an_op_with_attrs_or_regions_owns_them():
    t = TensorType("f32", (2,))
    attrs = {"axis": 0}
    body = Block([t])
    op = Op("for", [], [t], attrs, regions=[body])
    attrs["axis"] = 1
    assert op.attrs == {"axis": 0} and op.regions == (body,) and body.parent is op


@pytest.mark.parametrize("released", [True, False])
def test_a_released_op_is_freed_by_reference_counting(released):
    t = TensorType("f32", (2,))
    args = Block([t]).args
    gc.collect()
    gc.disable()
    try:
        op = Op("neg", args, [t])
        if released:
            release(op)
        del op
        # what the collector still finds: nothing after release, else the op's cycle
        assert (gc.collect() == 0) == released
    finally:
        gc.enable()
