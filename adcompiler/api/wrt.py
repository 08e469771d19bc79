"""What a transform differentiates and how per-input results are returned: `wrt` names
or `argnums` positions (`wrt_shape`), the default inputs, and the check that `grad`'s
function has one scalar float result (`require_scalar`)."""
from __future__ import annotations

from typing import Sequence, Union

from ..diagnostics import AdcError
from ..ir.core import Function

Wrt = Union[str, Sequence[str], None]


class Shape:
    """How a list of per-input arrays is returned: one array, a tuple, or a dict."""

    def __init__(self, names: list[str], style: str):
        self.names, self.style = names, style   # style: "one", "tuple" or "dict"

    def pack(self, values: list):
        if self.style == "one":
            return values[0]
        if self.style == "dict":
            return dict(zip(self.names, values))
        return tuple(values)


def one_or_tuple(values: list, single: bool):
    return values[0] if single else tuple(values)


def default_wrt(fn: Function) -> list[str]:
    """The ``param`` inputs, or every float input when none is marked (as ``adc run``)."""
    state = set(fn.attrs.get("state", ()))
    floats = [a.name for a in fn.args if a.type.is_float and a.name not in state]
    return [n for n in floats if n in fn.params] or floats


def wrt_shape(fn: Function, wrt, argnums=None) -> Shape:
    """`wrt` (a name or names) or `argnums` (an input position or positions) as a `Shape`;
    neither: the default inputs, as a tuple."""
    if wrt is not None and argnums is not None:
        raise TypeError("give wrt= or argnums=, not both")
    if argnums is not None:
        n = len(fn.args)
        single = isinstance(argnums, int) and not isinstance(argnums, bool)
        if not single and not isinstance(argnums, (list, tuple)):
            raise TypeError(f"argnums must be an input position (an int) or a list or tuple "
                            f"of them, got {argnums!r}")
        nums = [argnums] if single else list(argnums)
        for i in nums:
            if not isinstance(i, int) or isinstance(i, bool) or not -n <= i < n:
                raise TypeError(f"argnums: {i!r} is not an input position of "
                                f"'{fn.name}', which takes {n} inputs")
        wrt = fn.arg_names[nums[0]] if single else [fn.arg_names[i] for i in nums]
    if isinstance(wrt, str):
        return Shape([wrt], "one")
    if wrt is not None and (not isinstance(wrt, (list, tuple))
                            or not all(isinstance(w, str) for w in wrt)):
        raise TypeError(f"wrt must be an input's name or a list or tuple of names, got "
                        f"{wrt!r}")
    names = list(wrt) if wrt is not None else default_wrt(fn)
    if not names:
        raise AdcError(f"'{fn.name}' has no float inputs to differentiate")
    return Shape(names, "tuple")


def result_label(fn: Function, k: int) -> str:
    """How a result is named in messages: its name in the program, else its position."""
    name = fn.returned[k].name if fn.body.ops else None
    if name and name.isidentifier():
        return f"'{name}'"
    return f"result {k}" if len(fn.result_types) > 1 else "its result"


def require_scalar(fn: Function, what: str, has_aux: bool = False) -> None:
    """`what` (``grad``, ...) differentiates one scalar float result of `fn`: the only one,
    or the first with `has_aux`. Anything else is an error naming the result and type."""
    types = fn.result_types
    listing = ", ".join(f"{result_label(fn, k)}: {t}" for k, t in enumerate(types))
    if has_aux and len(types) < 2:
        raise AdcError(f"{what}(has_aux=True) needs '{fn.name}' to return (value, aux, ...), "
                       f"but it returns one result ({listing})")
    if not has_aux and fn.attrs.get("state"):
        raise AdcError(f"{what}: '{fn.name}' has state inputs "
                       f"({', '.join(fn.attrs['state'])}): pass has_aux=True, and their new "
                       f"values come back as the aux results")
    if not has_aux and len(types) != 1:
        raise AdcError(f"{what} needs one scalar float result, but '{fn.name}' returns "
                       f"{len(types)} ({listing}); pass has_aux=True to differentiate the "
                       "first and return the others beside the gradient, or use vjp")
    t = types[0]
    if not (t.is_float and t.shape == ()):
        raise AdcError(f"{what} needs a scalar float result, but {result_label(fn, 0)} of "
                       f"'{fn.name}' is {t}; use vjp (or jacrev) for a non-scalar result, "
                       "or reduce it in the program (sum, mean)")
