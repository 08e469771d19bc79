"""Kernels of the random ops (the generator and its bits: `adc_runtime.random`)."""
from .. import random as philox
from .table import kernel


@kernel("uniform")
def uniform(xp, key, shape, dtype="f32", site=0):
    return philox.uniform(xp, key, site, tuple(shape), dtype)


@kernel("normal")
def normal(xp, key, shape, dtype="f32", site=0):
    return philox.normal(xp, key, site, tuple(shape), dtype)


@kernel("bernoulli")
def bernoulli(xp, key, p, shape, dtype="f32", site=0):
    mask = philox.bernoulli_mask(xp, key, site, tuple(shape), p)
    return mask.astype(xp.dtype({"f16": "float16", "f32": "float32", "f64": "float64"}[dtype]))


@kernel("rng_fold")
def rng_fold(xp, key, data, site=0):
    return philox.fold(xp, key, data, site)


@kernel("dropout")
def dropout(xp, x, key, p, site=0, training=False):
    if not training:
        return x
    keep = ~philox.bernoulli_mask(xp, key, site, x.shape, p)
    scale = x.dtype.type(1.0 / (1.0 - p))
    return xp.where(keep, x * scale, x.dtype.type(0))
