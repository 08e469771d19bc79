"""Kernels of neural-net ops."""
from . import kernel  # noqa: F401
