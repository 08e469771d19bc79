"""Inputs of a run: loading IN.npz / IN.json, checking them against a function's signature,
binding symbolic dimensions, and drawing seeded random inputs when none are given.

Rules (spec §7): float data is converted to the declared float width; any other dtype or
shape mismatch, a missing input or an unknown name is an `AdcError` naming the input. JSON
has no dtypes, so JSON numbers are accepted for float inputs and integral JSON numbers for
integer inputs.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from adc_runtime.inputs import dim_conflict, shape_error
from adc_runtime.random import seed_key

from ..diagnostics import AdcError, Loc, RunError
from ..ir.core import Function
from ..ir.types import NUMPY_DTYPE, TensorType, dim_symbols, is_symbol, resolve_dim
from ..labels import index_bounds
from ..ops.random import key_input
from ..ops.registry import has_trait

RANDOM_INT_HIGH = 2      # integer inputs with no known range are drawn from [0, 2)
DEFAULT_DIM = 4          # size of a symbolic dimension nothing binds, in a random-input run


def load_data(path: str, same_rows: bool = False) -> dict[str, tuple[np.ndarray, bool]]:
    """The arrays in `path` (.npz or .json) by name, each with a flag "came from JSON"
    (`datafiles` says what is refused; `same_rows`: `read.read_npz`'s)."""
    if not path.endswith((".json", ".npz")):
        raise AdcError(f"inputs file '{path}' must end in .npz or .json")
    from .read import read_json_arrays, read_npz
    raw = _read_bytes(path, "inputs file")
    if path.endswith(".json"):
        return {k: (v, True) for k, v in read_json_arrays(raw, path).items()}
    return {k: (v, False) for k, v in read_npz(raw, path, same_rows).items()}


def load_files(paths: str | Sequence[str]) -> tuple[dict, dict[str, str]]:
    """The arrays of one or more inputs files merged by name (as `load_data`), and the file
    each came from; a name in two files is an error naming both."""
    data: dict = {}
    origin: dict[str, str] = {}
    for path in [paths] if isinstance(paths, str) else paths:
        for name, value in load_data(path).items():
            if name in origin:
                raise AdcError(f"input '{name}' is in two inputs files, '{origin[name]}' and "
                               f"'{path}': give each input once")
            data[name], origin[name] = value, path
    return data, origin


def read_inputs(fn: Function, paths: str | Sequence[str], binder: "DimBinder",
                seed: int = 0) -> dict:
    """`fn`'s inputs from one or more inputs files (`load_files`), checked by `check_inputs`,
    their symbolic dimensions bound and integer labels checked against their ranges."""
    data, origin = load_files(paths)
    label = files_label(paths)
    inputs = check_inputs(fn, data, label, binder, origin, seed)
    require_bound(fn, binder)
    check_index_ranges(fn, inputs, binder.env, label)
    return inputs


def files_label(paths: str | Sequence[str]) -> str:
    """How messages name one or several inputs files."""
    return paths if isinstance(paths, str) else ", ".join(paths)


def _read_bytes(path: str, what: str) -> bytes:
    from .read import read_bytes
    return read_bytes(path, what)


def _convert(name: str, arr: np.ndarray, from_json: bool, t: TensorType, path: str):
    """The library's rule (`adc_runtime.inputs`): JSON numbers are untyped, .npz typed."""
    from adc_runtime.inputs import convert_input
    try:
        return convert_input(name, arr, t.dtype, str(t), np, typed=not from_json)
    except RunError as e:
        raise AdcError(f"{path}: {e.message}") from None


class DimBinder:
    """Binds symbolic dimensions, remembering where each size came from for error messages."""

    def __init__(self, bound: Mapping[str, int] | None = None):
        self.env: dict[str, int] = dict(bound or {})
        self.origin = {k: "--bind" for k in self.env}

    def bind(self, sym: str, size: int, origin: str) -> None:
        if sym in self.env and self.env[sym] != size:
            raise dim_conflict(sym, self.env[sym], self.origin[sym], size, origin)
        self.env.setdefault(sym, size)
        self.origin.setdefault(sym, origin)

    def check_shape(self, name: str, shape: tuple, t: TensorType, path: str) -> None:
        """Bind the symbols of `t` from the actual `shape`; a mismatch names the input (in
        the library's words, `adc_runtime.inputs.shape_error`, after the file's name)."""
        def bad() -> AdcError:
            want = tuple(resolve_dim(d, self.env) if known(d) else d for d in t.shape)
            e = shape_error(name, str(t), shape, None if want == tuple(t.shape) else want)
            return AdcError(f"{path}: {e.message}")

        def known(d) -> bool:  # polynomial dims (2*B, T-1) are checked once all is bound
            return isinstance(d, int) or all(s in self.env for s in dim_symbols(d))
        if len(shape) != len(t.shape):
            raise bad()
        for d, n in zip(t.shape, shape):
            if is_symbol(d):
                self.bind(d, n, f"input '{name}'")
        if any(known(d) and resolve_dim(d, self.env) != n for d, n in zip(t.shape, shape)):
            raise bad()


def check_inputs(fn: Function, data: dict, path: str, binder: DimBinder,
                 origin: Mapping[str, str] | None = None, seed: int = 0) -> dict:
    """Validate loaded `data` against `fn`'s inputs; returns arrays of the declared dtypes.
    Messages name `path`, or the file `origin` says an input came from. The key input of a
    function that draws random values is the key of `seed` unless `data` holds it."""
    from .paths import join_loaded
    data = join_loaded(fn, data, path)   # the layers of stacked groups, stacked
    names = fn.arg_names
    where = dict(origin or {})
    for key in data:
        if key not in names:
            # fn may be a derived program (f_grad): list the inputs, not its name
            raise AdcError(f"{where.get(key, path)}: unknown input '{key}' (the inputs are "
                           f"{', '.join(names) or 'none'})")
    out = {}
    for arg in fn.args:
        if arg.name not in data and arg is key_input(fn):
            out[arg.name] = seed_array(seed)
            continue
        if arg.name not in data and arg.name in fn.attrs.get("state", ()):
            out[arg.name] = state_array(fn, arg, binder.env)   # its initial value
            continue
        if arg.name not in data:
            raise AdcError(f"{path}: missing input '{arg.name}' ({arg.type})")
        arr, from_json = data[arg.name]
        at = where.get(arg.name, path)
        arr = _convert(arg.name, np.asarray(arr), from_json, arg.type, at)
        binder.check_shape(arg.name, arr.shape, arg.type, at)
        out[arg.name] = arr
    return out


def seed_array(seed: int) -> np.ndarray:
    """The key of `seed`, as the key input of a function that draws takes it."""
    try:
        return np.asarray(seed_key(seed), dtype=np.int64)
    except ValueError as e:
        raise AdcError(f"--seed: {e}") from None


def state_array(fn: Function, arg, env: Mapping[str, int]) -> np.ndarray:
    """The initial value of state input `arg` (``state v: f32[C] = 1``; default 0)."""
    shape = tuple(resolve_dim(d, env) for d in arg.type.shape)
    return np.full(shape, fn.attrs.get("state_init", {}).get(arg.name, 0),
                   dtype=NUMPY_DTYPE[arg.type.dtype])


def function_symbols(fn: Function) -> list[str]:
    """Every symbolic dimension `fn` mentions, in order of first appearance."""
    seen: dict[str, None] = {}
    types = [a.type for a in fn.args] + [r.type for op in fn.walk() for r in op.results]
    for t in types:
        for d in t.shape:
            if isinstance(d, str):
                seen.update(dict.fromkeys(dim_symbols(d)))
    for op in fn.walk():
        if has_trait(op, "loop") and isinstance(op.attrs.get("n"), str):
            seen.update(dict.fromkeys(dim_symbols(op.attrs["n"])))
    return list(seen)


def check_binds(fns: list[Function], bound: Mapping[str, int]) -> None:
    """Every ``--bind`` names a symbolic dimension of `fns` (a typo is not ignored)."""
    known = {s for fn in fns for s in function_symbols(fn)}
    for sym in bound:
        if sym not in known:
            names = ", ".join(sorted(known)) or "none"
            raise AdcError(f"--bind {sym}={bound[sym]}: the program has no symbolic "
                           f"dimension '{sym}' (its dimensions: {names})")


def require_bound(fn: Function, binder: DimBinder) -> None:
    for sym in function_symbols(fn):
        if sym not in binder.env:
            raise AdcError(f"dimension {sym} is not bound by any input; pass --bind {sym}=SIZE")


def check_index_ranges(fn: Function, inputs: dict, env: Mapping[str, int], path: str) -> None:
    """Integer class labels must lie in [0, n) (`adcompiler.labels`, as in the library)."""
    from ..labels import check_labels
    try:
        check_labels(fn, inputs, env)
    except RunError as e:
        raise AdcError(f"{path}: {e.message}") from None


def random_inputs(fn: Function, binder: DimBinder, seed: int) -> tuple[dict, list[str]]:
    """Seeded random inputs for `fn`: floats ~ N(0, 1); integers in [0, n) when the input
    feeds cross_entropy labels, take indices or one_hot (n = the class count), else
    [0, RANDOM_INT_HIGH); bools uniform. Returns the inputs and notes on what was chosen."""
    notes = []
    for sym in function_symbols(fn):
        if sym not in binder.env:
            binder.bind(sym, DEFAULT_DIM, "the default")
            notes.append(f"{sym}={DEFAULT_DIM}")
    from ..memory.limit import check_arrays_fit
    check_arrays_fit([a.type for a in fn.args], binder.env, "the random inputs")
    rng = np.random.default_rng(seed)
    high = index_bounds(fn, binder.env)
    out = {}
    for arg in fn.args:
        t = arg.type
        if arg is key_input(fn):
            out[arg.name] = seed_array(seed)
            continue
        if arg.name in fn.attrs.get("state", ()):
            out[arg.name] = state_array(fn, arg, binder.env)
            continue
        shape = tuple(resolve_dim(d, binder.env) for d in t.shape)
        dtype = np.dtype(NUMPY_DTYPE[t.dtype])
        if t.is_float:
            out[arg.name] = rng.standard_normal(shape).astype(dtype)
        elif t.dtype == "bool":
            out[arg.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[arg.name] = rng.integers(0, high.get(arg.name, RANDOM_INT_HIGH), shape,
                                         dtype=dtype)
    return out, notes


def parse_binds(items: list[str] | None) -> dict[str, int]:
    """``["B=32", "T=8"]`` -> ``{"B": 32, "T": 8}``."""
    env: dict[str, int] = {}
    for item in items or []:
        for part in item.split(","):
            name, eq, value = part.partition("=")
            name = name.strip()
            if not eq or not name.isidentifier() or not value.strip().isdigit():
                raise AdcError(f"--bind expects NAME=SIZE (e.g. B=32), got '{part}'")
            if name in env and env[name] != int(value):
                raise AdcError(f"dimension {name} is bound twice by --bind "
                               f"({env[name]} and {int(value)})")
            env[name] = int(value)
    return env
