"""Training data bigger than memory: a folder of arrays read lazily (``adc train --data DIR``).

A data folder holds either one ``NAME.npy`` file per data input, or shards: ``.npz`` files,
each with every data input by name, whose rows follow one another in the order of the
shards' names (``part-00000.npz``, ``part-00001.npz``, ...). ``.npy`` files and the members
of an ``.npz`` written by ``numpy.savez`` (stored, not compressed) are memory-mapped: a batch
reads its rows and nothing else. A compressed member (``numpy.savez_compressed``) cannot be
mapped; it is read whole when the folder is opened, within the memory limit. Headers are
checked as `read` checks them (no pickled objects); a file shorter than its header says, a
shard without some input or with other trailing axes is an `AdcError` naming the file.
"""
from __future__ import annotations

import math
import mmap
import os
import struct
import zipfile
from typing import Callable

import numpy as np

from adc_runtime.datafiles import BROKEN, read_npy, read_npy_header

from ..diagnostics import AdcError
from ..memory.limit import check_fits

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")   # a zip member's local file header


class Rows:
    """An array of rows (its leading axis) held in parts that are read only where indexed;
    `convert` (set by `converted`) is applied to each block read, so a dtype conversion
    does not read the whole array."""

    def __init__(self, parts: list, convert: Callable | None = None):
        self.parts = parts
        self.bounds = np.cumsum([0] + [p.shape[0] for p in parts])
        self.shape = (int(self.bounds[-1]), *parts[0].shape[1:])
        self.convert = convert
        self.dtype = (convert(self._empty()) if convert else self._empty()).dtype

    ndim = property(lambda self: len(self.shape))

    def __len__(self) -> int:
        return self.shape[0]

    def _empty(self) -> np.ndarray:
        return np.empty((0, *self.shape[1:]), self.parts[0].dtype)

    def converted(self, convert: Callable[[np.ndarray], np.ndarray]) -> "Rows":
        """These rows with `convert` applied to each block read (checked on no rows now)."""
        return Rows(self.parts, convert)

    def __getitem__(self, idx) -> np.ndarray:
        """Rows by a slice or a 1-d array of row numbers, as a NumPy array."""
        if isinstance(idx, slice):
            idx = np.arange(*idx.indices(self.shape[0]))
        idx = np.asarray(idx)
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise TypeError("rows are read by a slice or a 1-d array of row numbers")
        idx = np.where(idx < 0, idx + self.shape[0], idx)
        if idx.size and (idx.min() < 0 or idx.max() >= self.shape[0]):
            raise IndexError(f"row index out of range for {self.shape[0]} rows")
        out = np.empty((len(idx), *self.shape[1:]), self.parts[0].dtype)
        which = np.searchsorted(self.bounds, idx, side="right") - 1
        for k in np.unique(which):
            sel = which == k
            out[sel] = self.parts[k][idx[sel] - self.bounds[k]]
        return self.convert(out) if self.convert else out


def is_data_folder(path: str) -> bool:
    return os.path.isdir(path)


def open_folder(path: str, what: str) -> dict[str, Rows]:
    """The arrays of data folder `path` by name (module docstring), memory-mapped."""
    names = sorted(os.listdir(path))
    npy = [n for n in names if n.endswith(".npy")]
    npz = [n for n in names if n.endswith(".npz")]
    for n in npy + npz:   # a device or a pipe would be read forever, or wait for a writer
        if not os.path.isfile(os.path.join(path, n)):
            raise AdcError(f"{what} folder '{path}': '{n}' is not a regular file")
    if npy and npz:
        raise AdcError(f"{what} folder '{path}' holds both .npy files and .npz shards: give "
                       "one array per input (NAME.npy) or shards (*.npz), not both")
    if npy:
        arrays = {n[:-4]: _map_npy(os.path.join(path, n)) for n in npy}
        for name, a in arrays.items():
            if a.ndim == 0:
                raise AdcError(f"'{os.path.join(path, name)}.npy' is a scalar, not rows")
        return {name: Rows([a]) for name, a in arrays.items()}
    if not npz:
        raise AdcError(f"{what} folder '{path}' holds no .npy or .npz files")
    shards = [_open_npz(os.path.join(path, n)) for n in npz]
    first = os.path.join(path, npz[0])
    out = {}
    for name, a in shards[0].items():
        parts = [a]
        for n, shard in zip(npz[1:], shards[1:]):
            where = os.path.join(path, n)
            if name not in shard:
                raise AdcError(f"shard '{where}' has no array '{name}' ('{first}' has)")
            b = shard[name]
            if b.ndim == 0 or b.shape[1:] != a.shape[1:] or b.dtype != a.dtype:
                raise AdcError(f"shard '{where}': array '{name}' is {b.dtype}{list(b.shape)}, "
                               f"but {a.dtype}{list(a.shape)} in '{first}' (shards differ "
                               "only in their rows)")
            parts.append(b)
        for n, shard in zip(npz[1:], shards[1:]):
            extra = set(shard) - set(shards[0])
            if extra:
                raise AdcError(f"shard '{os.path.join(path, n)}' has array "
                               f"'{sorted(extra)[0]}', which '{first}' has not")
        if a.ndim == 0:
            raise AdcError(f"shard '{first}': array '{name}' is a scalar, not rows")
        out[name] = Rows(parts)
    return out


def _map_npy(path: str) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = read_npy_header(f, f"'{path}'")
            offset = f.tell()
    except AdcError:
        raise
    except BROKEN as e:
        raise AdcError(f"'{path}' is damaged or not a .npy file ({type(e).__name__}: "
                       f"{e})") from None
    return _map(path, offset, shape, fortran, dtype, f"'{path}'")


def _map(path: str, offset: int, shape: tuple, fortran: bool, dtype: np.dtype,
         what: str) -> np.ndarray:
    nbytes = math.prod(shape) * dtype.itemsize
    if offset + nbytes > os.path.getsize(path):
        raise AdcError(f"{what} is truncated (its header says {nbytes:,} bytes of data)")
    if not shape or nbytes == 0:
        return np.zeros(shape, dtype)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        # batches read scattered rows: the kernel's read-around would bring in ~100 times
        # the rows asked for
        mapped.madvise(mmap.MADV_RANDOM)
    return np.ndarray(shape, dtype, buffer=mapped, offset=offset,
                      order="F" if fortran else "C")


def is_mapped(a: np.ndarray) -> bool:
    """Whether `a` is a view of a memory-mapped file (as `open_folder` maps them)."""
    return isinstance(a.base, mmap.mmap)


def _open_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz shard: stored members mapped, compressed ones read."""
    out = {}
    try:
        with zipfile.ZipFile(path) as z, open(path, "rb") as raw:
            for info in z.infolist():
                if info.filename.endswith("/"):
                    continue
                if not info.filename.endswith(".npy"):
                    raise AdcError(f"'{path}': member '{info.filename}' is not a .npy array")
                name, what = info.filename[:-4], f"'{path}': array '{info.filename[:-4]}'"
                if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1:
                    raw.seek(info.header_offset)
                    fields = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
                    start = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1]
                    raw.seek(start)
                    shape, fortran, dtype = read_npy_header(raw, what)
                    if raw.tell() - start + math.prod(shape) * dtype.itemsize > info.file_size:
                        raise AdcError(f"{what} is truncated (its header says more data "
                                       "than the member holds)")
                    out[name] = _map(path, raw.tell(), shape, fortran, dtype, what)
                else:
                    with z.open(info) as f:
                        out[name] = read_npy(f, what, check_fits)
    except AdcError:
        raise
    except (*BROKEN, struct.error) as e:
        raise AdcError(f"'{path}' is damaged or not an .npz archive ({type(e).__name__}: "
                       f"{e})") from None
    return out
