"""Op families. Importing this package registers every op (see `registry`)."""
from . import registry  # noqa: F401
from . import control, create, elementwise, reduce, linalg, shape  # noqa: F401
from . import nn, gather, collective, along_axis, attention, norm  # noqa: F401
from . import conv, pool, pad  # noqa: F401
from . import random  # noqa: F401
from .registry import REGISTRY, get  # noqa: F401
