"""adc's runtime (import name ``adc_runtime``): the kernel table and the executor.

It depends on NumPy (or CuPy) only, so that emitted Python programs need nothing else.
"""
from .errors import AdcError, RunError, UnboundDimError  # noqa: F401  (no NumPy)


def __getattr__(name: str):
    """`KERNELS` and `kernel` on first use: importing the errors alone stays cheap."""
    if name in ("KERNELS", "kernel"):
        from . import kernels
        return getattr(kernels, name)
    raise AttributeError(f"module 'adc_runtime' has no attribute {name!r}")
