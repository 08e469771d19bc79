"""adc's runtime (import name ``adc_runtime``): the kernel table and the executor.

It depends on NumPy (or CuPy) only, so that emitted Python programs need nothing else.
"""
from .kernels import KERNELS, kernel  # noqa: F401
