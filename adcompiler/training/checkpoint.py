"""Training checkpoints: one ``.npz`` file, written atomically, read without pickle.

Keys: ``param/<name>`` for each parameter, ``state/<path>`` for each array of the optimizer
state (its nested dicts and sequences flattened with ``/``), and ``meta``, a 0-d string array
holding JSON: the format version, the model's signature (function, parameter names, shapes
and dtypes), the step, the epoch, the batch within it, the shuffling Generator's state at the
epoch's start, and the loss scaler's state. A write goes to a temporary file in the same
folder, is flushed to disk, and renamed over the old checkpoint: a run killed during the write
leaves the previous checkpoint whole.
"""
from __future__ import annotations

import json
import os
import zipfile
from typing import Any, Mapping

import numpy as np

from ..files.write import write_atomic
from ..diagnostics import AdcError

FORMAT = "adc-checkpoint"
VERSION = 1


def host(a) -> np.ndarray:
    """`a` as a NumPy array (a CuPy array is copied to the host)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def model_signature(fn_name: str, params: Mapping[str, np.ndarray]) -> dict:
    return {"fn": fn_name,
            "params": {k: [list(v.shape), str(v.dtype)]
                       for k, v in params.items()}}


def flatten(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """Nested dicts, lists and tuples of arrays -> ``{"a/0/b": array}``."""
    if isinstance(tree, Mapping):
        items = [(str(k), v) for k, v in tree.items()]
    elif isinstance(tree, (list, tuple)):
        items = [(str(k), v) for k, v in enumerate(tree)]
    else:
        return {prefix.rstrip("/"): host(tree)}
    out: dict[str, np.ndarray] = {}
    for k, v in items:
        out.update(flatten(v, f"{prefix}{k}/"))
    return out


def unflatten(template: Any, flat: Mapping[str, np.ndarray], path: str, prefix: str = ""):
    """The structure of `template` with its leaves taken from `flat` (as `flatten` wrote)."""
    if isinstance(template, Mapping):
        return {k: unflatten(v, flat, path, f"{prefix}{k}/") for k, v in template.items()}
    if isinstance(template, (list, tuple)):
        return type(template)(unflatten(v, flat, path, f"{prefix}{k}/")
                              for k, v in enumerate(template))
    key = prefix.rstrip("/")
    if key not in flat:
        raise AdcError(f"checkpoint '{path}': optimizer state '{key}' is missing (saved "
                       "with another optimizer?)")
    got, want = flat[key], host(template)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AdcError(f"checkpoint '{path}': optimizer state '{key}' is {got.dtype}"
                       f"{list(got.shape)}, this run's is {want.dtype}{list(want.shape)}")
    return type(template)(got) if isinstance(template, (int, float)) else got


def save(path: str, params: Mapping[str, np.ndarray], state: Any, meta: dict) -> None:
    """Write a checkpoint atomically (module docstring)."""
    arrays = {f"param/{k}": host(v) for k, v in params.items()}
    arrays.update({f"state/{k}": v for k, v in flatten(state).items()})
    meta = {"format": FORMAT, "version": VERSION, **meta}
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    write_atomic(path, lambda f: np.savez(f, **arrays))


def load(path: str) -> tuple[dict, dict, dict]:
    """``(params, flat_state, meta)`` of a checkpoint; a file that is not one, or that holds
    pickled objects, is an `AdcError` naming it."""
    if not os.path.exists(path):
        raise AdcError(f"checkpoint '{path}' does not exist")
    if not zipfile.is_zipfile(path):
        raise AdcError(f"cannot read checkpoint '{path}': not an .npz archive")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as e:
        if "pickle" in str(e):
            raise AdcError(f"checkpoint '{path}' holds pickled objects; refusing to load it "
                           "(checkpoints hold plain arrays only)") from None
        raise AdcError(f"cannot read checkpoint '{path}': {e}") from None
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise AdcError(f"cannot read checkpoint '{path}': {e}") from None
    try:
        meta = json.loads(str(arrays.pop("meta")))
        assert meta.get("format") == FORMAT
    except Exception:
        raise AdcError(f"'{path}' is not an adc training checkpoint (no valid 'meta' "
                       "entry)") from None
    if meta.get("version") != VERSION:
        raise AdcError(f"checkpoint '{path}' has format version {meta.get('version')}; "
                       f"this adc reads version {VERSION}")
    params = {k[6:]: v for k, v in arrays.items() if k.startswith("param/")}
    state = {k[6:]: v for k, v in arrays.items() if k.startswith("state/")}
    return params, state, meta


def check_model(path: str, meta: dict, signature: dict) -> None:
    """A checkpoint of another model (function, param names, shapes, dtypes) is an error
    that says what differs."""
    saved = meta.get("model", {})
    if saved == signature:
        return
    if saved.get("fn") != signature["fn"]:
        why = f"it trains function '{saved.get('fn')}', this run '{signature['fn']}'"
    else:
        a, b = saved.get("params", {}), signature["params"]
        diff = sorted(set(a) ^ set(b))
        if diff:
            why = f"its params differ by {', '.join(diff)}"
        else:
            k = next(k for k in b if a[k] != b[k])
            why = (f"param '{k}' is {a[k][1]}{a[k][0]} there, {b[k][1]}{b[k][0]} in this "
                   "run")
    raise AdcError(f"checkpoint '{path}' is from another model: {why}")
