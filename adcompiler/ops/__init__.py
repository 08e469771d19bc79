"""Op families. Importing this package registers every op (see `registry`)."""
from . import registry  # noqa: F401
from . import control, create, elementwise, reduce, linalg, shape, nn  # noqa: F401  (registration)
from .registry import REGISTRY, get  # noqa: F401
