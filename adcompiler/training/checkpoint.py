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
    """``(params, flat_state, meta)`` of a checkpoint; a file that is not one (a device, a
    folder, not an archive, pickled objects, an array past the memory limit by its header,
    no valid `meta`) is an `AdcError` naming it; `check_meta` checks the fields a training run
    reads."""
    from ..files.read import read_bytes, read_npz
    raw = read_bytes(path, "checkpoint")
    try:
        arrays = read_npz(raw, path)
    except AdcError as e:
        if "Python objects" in e.message:
            raise AdcError(f"checkpoint '{path}' holds pickled objects; refusing to load it "
                           "(checkpoints hold plain arrays only)") from None
        raise AdcError(f"cannot read checkpoint '{path}': {e.message}") from None
    try:
        meta = json.loads(str(arrays.pop("meta")))
        assert isinstance(meta, dict) and meta.get("format") == FORMAT
    except Exception:
        raise AdcError(f"'{path}' is not an adc training checkpoint (no valid 'meta' "
                       "entry)") from None
    if meta.get("version") != VERSION:
        raise AdcError(f"checkpoint '{path}' has format version {meta.get('version')}; "
                       f"this adc reads version {VERSION}")
    params = {k[6:]: v for k, v in arrays.items() if k.startswith("param/")}
    state = {k[6:]: v for k, v in arrays.items() if k.startswith("state/")}
    return params, state, meta


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# the fields of `meta` and what each must hold
_FIELDS = {"step": (_count, "a whole number, at least 0"),
           "epoch": (_count, "a whole number, at least 0"),
           "batch": (_count, "a whole number, at least 0"),
           "rng": (lambda v: isinstance(v, dict), "a random generator's state"),
           "scaler": (lambda v: v is None or isinstance(v, dict) and _number(v.get("scale"))
                      and _count(v.get("growth_tracker")), "none or a loss scaler's state"),
           "model": (lambda v: isinstance(v, dict) and isinstance(v.get("fn"), str)
                     and isinstance(v.get("params"), dict)
                     and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], list)
                             and all(_count(d) for d in p[0]) and isinstance(p[1], str)
                             for p in v["params"].values()),
                     "the model's signature (its function and params' shapes and dtypes)")}


def check_meta(path: str, meta: dict) -> None:
    """Every field a resumed run reads is there and of its kind (a file edited by hand, or
    damaged, is refused here rather than failing wherever the field is used)."""
    for key, (ok, what) in _FIELDS.items():
        if key not in meta:
            raise AdcError(f"checkpoint '{path}': its metadata has no '{key}' field")
        if not ok(meta[key]):
            raise AdcError(f"checkpoint '{path}': its metadata field '{key}' must be {what}, "
                           f"got {json.dumps(meta[key])[:80]}")


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
