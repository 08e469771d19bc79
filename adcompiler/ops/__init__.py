"""Op families. Importing this package registers every op (see `registry`).

As `adc.ops`, the package also names every op as a function that Python code compiled by
adc calls (``adc.ops.softmax(x, axis=-1)``, `namespace`). No family module is named like an
op, so that the attribute is the op's."""
from . import registry  # noqa: F401
from . import control, create, elementwise, reduce, linalg, shape  # noqa: F401
from . import nn, gather, collective, along_axis, sdpa, norm  # noqa: F401
from . import conv, pool, padding  # noqa: F401
from . import random, state  # noqa: F401
from .registry import REGISTRY, get  # noqa: F401


def __getattr__(name: str):
    """``adc.ops.NAME``: the op NAME (`namespace.op_function`)."""
    if name.startswith("__"):
        raise AttributeError(name)
    from .namespace import op_function
    return op_function(name)
