"""Linear algebra: matmul (`@`), transpose, einsum."""
from __future__ import annotations
