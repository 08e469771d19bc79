"""The root of adc's exceptions, kept here so that the runtime's errors are `AdcError`s
without the runtime importing the compiler (`adcompiler.diagnostics` re-exports them).

    AdcError            anything a program, its data or options can cause (never our bug)
    ├── ShapeError      a type rule failed (adcompiler.diagnostics)
    ├── VerifyError     malformed IR (adcompiler.ir.verifier)
    ├── PluginError     a plugin failed to load (adcompiler.plugins)
    └── RunError        the data of a run: input names, shapes, dtypes, values
        └── UnboundDimError   a symbolic dimension nothing binds (also a KeyError)

    InternalError       a bug of adc's own found at a known place of a program (not an
                        AdcError: the command line reports it located and exits 3)
"""
from __future__ import annotations


class AdcError(Exception):
    """An error in a user's program, data or options (never an internal bug); `loc` is a
    source location (``file``, ``line``, ``col``) or None."""

    def __init__(self, message: str, loc=None):
        super().__init__(message)
        self.message = message
        self.loc = loc

    def with_loc(self, loc) -> "AdcError":
        """Attach `loc` unless the error already carries a location."""
        if self.loc is None and loc is not None:
            self.loc = loc
        return self

    def __str__(self) -> str:
        return self.message


class RunError(AdcError):
    """A problem with the data given to a run (bad input names, shapes, dtypes or bindings,
    or values an op cannot take); `loc` is the source location of the op, when known."""


class UnboundDimError(RunError, KeyError):
    """A symbolic dimension that no input shape and no binding sets. It is a `KeyError` too,
    for code that looks dimensions up in a dict of bindings."""

    def __init__(self, dim: str):
        super().__init__(f"symbolic dimension '{dim}' is not bound: no input's shape sets "
                         f"it (bind it with dims={{'{dim}': N}}, or --bind {dim}=N)")
        self.dim = dim


class InternalError(Exception):
    """A fault of adc itself that shows at a known op of the user's program, such as a
    generated CUDA kernel that does not compile: reported like an `AdcError` (``FILE:LINE:COL``
    and caret), but with the exit status of an internal error."""

    def __init__(self, message: str, loc=None):
        super().__init__(message)
        self.message = message
        self.loc = loc

    def __str__(self) -> str:
        return f"{self.loc}: {self.message}" if self.loc is not None else self.message
