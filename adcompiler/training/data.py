"""What a training run reads: the data arrays, their mini-batches, and the initial parameters.

Data (spec §8): one array per non-param input of the loss function, by input name, all with
the same number of rows (their leading axis). Each epoch draws one permutation of the rows
from a `numpy.random.Generator` seeded by ``--seed`` and cuts it into ``rows // batch``
batches; the rows left over at the end of an epoch are not used (every step then has the same
shapes: one compiled step, one memory plan). With ``batch == rows`` the one batch holds every
row, so full-batch training does not depend on the shuffle.

Parameters come from ``--init PARAMS.npz`` by path (``m.blocks.3.W``, `files.paths`), and
those it leaves out are drawn by role and scheme (`training.init`: gains 1, biases 0,
weights as ``torch.nn``'s defaults unless ``--init-scheme`` says otherwise) from their own
Generator seeded by ``--seed``.
"""
from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from ..files.folders import Rows
from ..files.inputs import DimBinder, _convert, load_data
from ..diagnostics import AdcError, UnboundDimError
from ..ir.core import Function
from ..ir.types import NUMPY_DTYPE, TensorType, resolve_dim



def param_names(fn: Function, wrt=None) -> list[str]:
    """The inputs a run trains: `wrt` (a group's path: every input below it), or those
    marked ``param``, in input order."""
    if wrt:
        from ..files.paths import expand_wrt
        wrt = expand_wrt(fn, list(wrt))
    for n in wrt or ():
        if n in fn.attrs.get("state", ()):
            raise AdcError(f"--wrt: cannot train '{n}': it is a state input (read and "
                           f"replaced by each step, never differentiated)", fn.loc)
        if n not in fn.arg_names:
            raise AdcError(f"--wrt: '{n}' is not an input of '{fn.name}' (inputs: "
                           f"{', '.join(fn.arg_names)})")
    chosen = set(wrt) if wrt else fn.params
    names = [a.name for a in fn.args if a.name in chosen]
    if not names:
        raise AdcError(f"'{fn.name}' has no input marked param: nothing to train", fn.loc)
    for n in names:
        if not fn.arg(n).type.is_float:
            raise AdcError(f"param '{n}' has type {fn.arg(n).type}: only float inputs can "
                           "be trained", fn.loc)
    return names


def data_names(fn: Function, params: list[str]) -> list[str]:
    """The inputs a batch gives: neither trained, nor state, nor the key of random ops."""
    from ..ops.random import key_input
    state, key = set(fn.attrs.get("state", ())), key_input(fn)
    return [a.name for a in fn.args if a.name not in params and a.name not in state
            and a is not key]


def check_loss(fn: Function) -> None:
    """A loss returns one float scalar (beside the new values of its state inputs)."""
    types = fn.result_types[:len(fn.result_types) - len(fn.attrs.get("state", ()))]
    if len(types) != 1 or types[0].shape != () or not types[0].is_float:
        got = ", ".join(map(str, types))
        raise AdcError(f"'{fn.name}' must return one float scalar (the loss) to be trained; "
                       f"it returns {got}", fn.loc)


def load_arrays(path: str, what: str, folder: bool = False) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` data or parameter file by name (no pickled objects); with
    `folder`, a data folder is read lazily (`files.folders`: memory-mapped rows)."""
    if folder and os.path.isdir(path):
        from ..files.folders import open_folder
        return open_folder(path, what)
    if not path.endswith(".npz"):
        also = " or a folder of .npy files or .npz shards" if folder else ""
        raise AdcError(f"{what} file '{path}' must be a .npz file{also}")
    # data (what may be a folder) holds rows in every array: checked from the headers
    return {k: a for k, (a, _) in load_data(path, same_rows=folder).items()}


def check_data(fn: Function, params: list[str], arrays: Mapping[str, np.ndarray], path: str,
               binder: DimBinder) -> dict[str, np.ndarray]:
    """The data inputs of `fn` (those not in `params`) from `arrays`, converted to their
    declared dtypes, with the same number of rows and trailing axes that match the declared
    types."""
    want = data_names(fn, params)
    for k in arrays:
        if k not in want:
            extra = " (a param: give initial values with --init)" if k in params else ""
            raise AdcError(f"{path}: unknown array '{k}'{extra}; the data inputs of "
                           f"'{fn.name}' are {', '.join(want) or 'none'}")
    out, rows = {}, None
    for name in want:
        t = fn.arg(name).type
        if name not in arrays:
            raise AdcError(f"{path}: missing array '{name}' (data input {t})")
        a = arrays[name]
        if isinstance(a, Rows):   # read lazily: converted block by block as read
            a = a.converted(lambda block, name=name, t=t: _convert(name, block, False, t, path))
        else:
            a = _convert(name, np.asarray(a), False, t, path)
        if a.ndim != len(t.shape) or a.ndim == 0:
            raise AdcError(f"{path}: array '{name}' has shape {a.shape}; data input {t} "
                           "needs the same rank, with the rows on the leading axis")
        if rows is None:
            rows = (name, a.shape[0])
        elif a.shape[0] != rows[1]:
            raise AdcError(f"{path}: array '{name}' has {a.shape[0]} rows but "
                           f"'{rows[0]}' has {rows[1]}")
        trailing = TensorType(t.dtype, t.shape[1:])
        try:
            binder.check_shape(name, a.shape[1:], trailing, path)
        except AdcError as e:   # named by the whole type and shape, rows included
            if f"is declared {trailing} " not in e.message:
                raise
            raise AdcError(f"{path}: input '{name}' is declared {t} but has shape "
                           f"{tuple(int(n) for n in a.shape)}") from None
        out[name] = a
    if rows is None:
        raise AdcError(f"'{fn.name}' has no data inputs (every input is a param)", fn.loc)
    return out


def bind_batch(fn: Function, params: list[str], batch: int, binder: DimBinder) -> set[str]:
    """Bind the leading (row) dimension of every data input to `batch`; returns the
    symbols bound so (evaluation runs other batch sizes)."""
    rows = set()
    for name in data_names(fn, params):
        t = fn.arg(name).type
        d = t.shape[0]
        if isinstance(d, int):
            if d != batch:
                raise AdcError(f"data input '{name}' is declared {t}: its rows are fixed at "
                               f"{d}, so --batch must be {d}, not {batch}", fn.loc)
        elif d.isidentifier():
            binder.bind(d, batch, "--batch")
            rows.add(d)
        elif resolve_dim(d, binder.env) != batch:
            raise AdcError(f"data input '{name}' is declared {t}: its rows are {d}, which "
                           f"is not --batch {batch}", fn.loc)
    return rows


def rows_of(data: Mapping[str, np.ndarray]) -> int:
    return next(iter(data.values())).shape[0]


def epoch_batches(rows: int, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch's batches: row indices of a permutation drawn from `rng`, cut in
    ``rows // batch`` pieces (full-batch: the rows in order, nothing drawn)."""
    if batch == rows:
        return [np.arange(rows)]
    perm = rng.permutation(rows)
    return [perm[k * batch:(k + 1) * batch] for k in range(rows // batch)]


def take_rows(data: Mapping[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: a[idx] for k, a in data.items()}


# ---- parameters -----------------------------------------------------------------------

def param_shapes(fn: Function, names: list[str], env: Mapping[str, int]) -> dict[str, tuple]:
    out = {}
    for n in names:
        t = fn.arg(n).type
        try:
            out[n] = tuple(resolve_dim(d, env) for d in t.shape)
        except UnboundDimError as e:
            raise AdcError(f"the shape of param '{n}' ({t}) needs dimension '{e.dim}', which "
                           f"no data array sets: bind it (--bind {e.dim}=SIZE, or dims="
                           f"{{'{e.dim}': SIZE}}) or give the param's value (--init, or "
                           f"params=)") from None
    return out


def draw_params(fn: Function, names: list[str], env: Mapping[str, int], scheme: str,
                seed: int, module=None) -> dict[str, np.ndarray]:
    """Initial values of the params by role and `scheme` (`training.init`), drawn in input
    order; the roles are read from `module`'s `fn` (calls inlined) when it is given."""
    from . import init
    if scheme not in init.SCHEMES:
        raise AdcError(f"unknown init scheme '{scheme}' (choose from "
                       f"{', '.join(init.SCHEMES)})")
    found = init.roles(module, fn, names) if module is not None else {}
    rng = np.random.default_rng(seed)
    out = {}
    for n, shape in param_shapes(fn, names, env).items():
        dtype = NUMPY_DTYPE[fn.arg(n).type.dtype]
        role, fans = found.get(n, ("other", None))
        out[n] = init.draw(role, fans, shape, dtype, scheme, rng, env)
    return out


def check_params(fn: Function, names: list[str], arrays: Mapping[str, np.ndarray],
                 path: str, binder: DimBinder, partial: bool = False) -> dict[str, np.ndarray]:
    """Initial values from ``--init``: arrays by parameter path (`files.paths`), each of its
    param's declared type; with `partial`, params left out are not an error (the caller
    draws them)."""
    from ..files.paths import flat_paths, join
    arrays = join(fn, flat_paths(arrays), path, list(names) + list(fn.attrs.get("state", ())))
    for k in arrays:
        if k not in names and k not in fn.attrs.get("state", ()):
            raise AdcError(f"{path}: unknown array '{k}'; the params of '{fn.name}' are "
                           f"{', '.join(names)}")
    out = {}
    for n in names:
        t = fn.arg(n).type
        if n not in arrays:
            if partial:
                continue
            raise AdcError(f"{path}: missing array '{n}' (param {t})")
        a = _convert(n, np.asarray(arrays[n]), False, t, path)
        binder.check_shape(n, a.shape, t, path)
        out[n] = a
    return out
