"""Kernels of linear-algebra ops."""
from . import kernel  # noqa: F401
