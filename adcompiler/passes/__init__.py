"""Compiler passes: one per module, registered by name for pipeline strings (`pipeline`).

Importing this package registers the generic passes; other pass modules in the package
(``reverse``, ``remat``, ...) are imported on first lookup of a name not yet registered.
"""
from .pipeline import (FunctionPass, ModulePass, PASSES, get_pass, make_pass,  # noqa: F401
                       parse_pipeline, pass_spec, register_pass, run_pipeline)
from .clone import clone_block, clone_function, clone_module  # noqa: F401
from . import activity, canonicalize, cse, dce, inline, scan_inputs  # noqa: F401  (registration)
from .activity import analyze_activity  # noqa: F401
