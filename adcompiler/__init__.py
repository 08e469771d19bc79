"""adcompiler: compiler-style automatic differentiation for TDSL programs.

The public surface, importable from the package (see docs/api.md; docs/python.md for
Python functions)::

    import adcompiler as adc
    module = adc.compile_file("samples/backprop_tiny.tdsl")
    module = adc.run_pipeline(module, "inline,cse,reverse{wrt=W1,b1},dce")
    outputs = adc.run(module, "backprop_tiny_grad", inputs)
    dW1, db1 = adc.grad("samples/backprop_tiny.tdsl", wrt=("W1", "b1"))(**inputs)

Names are resolved on first use (PEP 562), so ``import adcompiler`` stays cheap for the
``adc`` command, which needs only a few of them; CuPy is imported only for
``device="cuda"``. Pass classes registered later (by a plugin, or a pass module added to
`adcompiler.passes`) are found by class name too: ``adc.Reverse``, ``adc.MyPass``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str | None]] = {
    # TDSL and IR text
    "parse_tdsl": ("adcompiler.api.program", "parse_tdsl"),
    "compile_source": ("adcompiler.frontend", "compile_source"),
    "compile_file": ("adcompiler.frontend", "compile_file"),
    "parse_ir": ("adcompiler.api.program", "parse_ir"),
    "load": ("adcompiler.api.program", "load"),
    # models from other frameworks
    "from_onnx": ("adcompiler.frontend.onnx", "from_onnx"),
    "from_torch": ("adcompiler.frontend.torch_export", "from_torch"),
    "Imported": ("adcompiler.frontend.importer.imported", "Imported"),
    # IR classes and construction
    "Module": ("adcompiler.ir.core", "Module"),
    "Function": ("adcompiler.ir.core", "Function"),
    "Block": ("adcompiler.ir.core", "Block"),
    "Op": ("adcompiler.ir.core", "Op"),
    "Value": ("adcompiler.ir.core", "Value"),
    "TensorType": ("adcompiler.ir.types", "TensorType"),
    "Builder": ("adcompiler.ir.builder", "Builder"),
    "FunctionBuilder": ("adcompiler.api.program", "FunctionBuilder"),
    "tensor_type": ("adcompiler.api.program", "tensor_type"),
    # checking, printing, emitting
    "verify": ("adcompiler.ir.verifier", "verify"),
    "VerifyError": ("adcompiler.ir.verifier", "VerifyError"),
    "print_module": ("adcompiler.ir.printer", "print_module"),
    "print_function": ("adcompiler.ir.printer", "print_function"),
    "emit_python": ("adcompiler.emit.python", "emit_python"),
    "emit_dot": ("adcompiler.emit.dot", "emit_dot"),
    # passes
    "run_pipeline": ("adcompiler.passes.pipeline", "run_pipeline"),
    "parse_pipeline": ("adcompiler.passes.pipeline", "parse_pipeline"),
    "register_pass": ("adcompiler.passes.pipeline", "register_pass"),
    "get_pass": ("adcompiler.passes.pipeline", "get_pass"),
    "pass_spec": ("adcompiler.passes.pipeline", "pass_spec"),
    "ModulePass": ("adcompiler.passes.pipeline", "ModulePass"),
    "FunctionPass": ("adcompiler.passes.pipeline", "FunctionPass"),
    "Inline": ("adcompiler.passes.inline", "Inline"),
    "Canonicalize": ("adcompiler.passes.canonicalize", "Canonicalize"),
    "CSE": ("adcompiler.passes.cse", "CSE"),
    "DCE": ("adcompiler.passes.dce", "DCE"),
    "Activity": ("adcompiler.passes.activity", "Activity"),
    "ScanInputs": ("adcompiler.passes.scan_inputs", "ScanInputs"),
    "Reverse": ("adcompiler.passes.reverse", "Reverse"),
    "JVP": ("adcompiler.passes.jvp", "JVP"),
    "Forward": ("adcompiler.passes.jvp", "JVP"),  # the older name of the jvp pass
    "HVP": ("adcompiler.passes.hvp", "HVP"),
    "Remat": ("adcompiler.passes.remat", "Remat"),
    "Batch": ("adcompiler.passes.batch", "Batch"),
    # running
    "run": ("adcompiler.api.program", "run"),
    "runner": ("adcompiler.api.program", "runner"),
    "blas_threads": ("adc_runtime.threads", "blas_threads"),
    "set_blas_threads": ("adc_runtime.threads", "set_blas_threads"),
    "blas_thread_count": ("adc_runtime.threads", "blas_thread_count"),
    # convenience layer
    "grad": ("adcompiler.api.pyfunc", "grad"),
    "jvp": ("adcompiler.api.pyfunc", "jvp"),
    "hvp": ("adcompiler.api.pyfunc", "hvp"),
    "value_and_grad": ("adcompiler.api.pyfunc", "value_and_grad"),
    "vjp": ("adcompiler.api.pyfunc", "vjp"),
    "function": ("adcompiler.api.pyfunc", "function"),
    "jit": ("adcompiler.api.pyfunc", "jit"),
    "show": ("adcompiler.api.show", "show"),
    "ops": ("adcompiler.ops", None),
    "Compiled": ("adcompiler.api.compiled", "Compiled"),
    "jacfwd": ("adcompiler.api.pyfunc", "jacfwd"),
    "jacrev": ("adcompiler.api.pyfunc", "jacrev"),
    "auto_jacobian": ("adcompiler.api.derivatives", "auto_jacobian"),
    "hessian": ("adcompiler.api.pyfunc", "hessian"),
    "check_grads": ("adcompiler.api.pycheck", "check_grads"),
    "vmap": ("adcompiler.api.pyfunc", "vmap"),
    "load_compiled": ("adcompiler.api.compiled", "load_compiled"),
    # training
    "train_step": ("adcompiler.training.python_step", "train_step"),
    "train": ("adcompiler.training.loop", "train"),
    "TrainResult": ("adcompiler.training.loop", "TrainResult"),
    "CompiledStep": ("adcompiler.training.step", "CompiledStep"),
    "optim": ("adcompiler.training.optim", None),
    "TrainStep": ("adcompiler.passes.train_step", "TrainStep"),
    # extension points
    "register_op": ("adcompiler.plugins", "register_op"),
    "Option": ("adcompiler.ops.registry", "Option"),
    "OpDef": ("adcompiler.ops.registry", "OpDef"),
    "get_op": ("adcompiler.ops.registry", "get"),
    "lookup_op": ("adcompiler.ops.registry", "lookup"),
    "load_plugins": ("adcompiler.plugins", "load_plugins"),
    # errors
    "AdcError": ("adcompiler.diagnostics", "AdcError"),
    "ShapeError": ("adcompiler.diagnostics", "ShapeError"),
    "RunError": ("adcompiler.diagnostics", "RunError"),
    "UnboundDimError": ("adcompiler.diagnostics", "UnboundDimError"),
    "PluginError": ("adcompiler.plugins", "PluginError"),
    "Loc": ("adcompiler.diagnostics", "Loc"),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is not None:
        module = importlib.import_module(target[0])
        value = module if target[1] is None else getattr(module, target[1])
        globals()[name] = value  # later lookups skip this function
        return value
    if name[:1].isupper():  # a pass class registered under a pipeline name
        from .passes.pipeline import PASSES, _discover
        _discover()
        for cls in PASSES.values():
            if cls.__name__ == name:
                return cls
    raise AttributeError(f"module 'adcompiler' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static view of the lazy names above, for type checkers and IDEs
    from .api.program import (FunctionBuilder as FunctionBuilder, load as load,
        parse_ir as parse_ir, parse_tdsl as parse_tdsl, run as run, runner as runner,
        tensor_type as tensor_type)
    from adc_runtime.threads import (blas_thread_count as blas_thread_count,
        blas_threads as blas_threads, set_blas_threads as set_blas_threads)
    from .api.compiled import (Compiled as Compiled, load_compiled as load_compiled)
    from .api.pyfunc import (function as function, grad as grad, hessian as hessian,
        hvp as hvp, jacfwd as jacfwd, jacrev as jacrev, jit as jit, jvp as jvp,
        value_and_grad as value_and_grad, vjp as vjp, vmap as vmap)
    from .api.pycheck import check_grads as check_grads
    from .api.derivatives import auto_jacobian as auto_jacobian
    from .api.show import show as show
    from . import ops as ops
    from .training import optim as optim
    from .training.step import CompiledStep as CompiledStep
    from .training.python_step import train_step as train_step
    from .training.loop import (TrainResult as TrainResult, train as train)
    from .passes.train_step import TrainStep as TrainStep
    from .diagnostics import (AdcError as AdcError, Loc as Loc, RunError as RunError,
        ShapeError as ShapeError, UnboundDimError as UnboundDimError)
    from .emit.dot import emit_dot as emit_dot
    from .emit.python import emit_python as emit_python
    from .frontend import (compile_file as compile_file, compile_source as compile_source)
    from .frontend.importer.imported import Imported as Imported
    from .frontend.onnx import from_onnx as from_onnx
    from .frontend.torch_export import from_torch as from_torch
    from .ir.builder import Builder as Builder
    from .ir.core import (Block as Block, Function as Function, Module as Module, Op as Op,
        Value as Value)
    from .ir.printer import (print_function as print_function, print_module as print_module)
    from .ir.types import TensorType as TensorType
    from .ir.verifier import (VerifyError as VerifyError, verify as verify)
    from .ops.registry import (OpDef as OpDef, Option as Option)
    from .passes.activity import Activity as Activity
    from .passes.canonicalize import Canonicalize as Canonicalize
    from .passes.cse import CSE as CSE
    from .passes.dce import DCE as DCE
    from .passes.jvp import JVP as JVP
    from .passes.hvp import HVP as HVP
    from .passes.inline import Inline as Inline
    from .passes.pipeline import (FunctionPass as FunctionPass, ModulePass as ModulePass,
        get_pass as get_pass, parse_pipeline as parse_pipeline, pass_spec as pass_spec,
        register_pass as register_pass, run_pipeline as run_pipeline)
    from .passes.remat import Remat as Remat
    from .passes.batch import Batch as Batch
    from .passes.reverse import Reverse as Reverse
    from .passes.scan_inputs import ScanInputs as ScanInputs
    from .plugins import (PluginError as PluginError, load_plugins as load_plugins,
        register_op as register_op)
    from .ops.registry import get as _get_op
    from .ops.registry import lookup as _lookup_op
    from .passes.jvp import JVP as _Forward
    get_op = _get_op
    lookup_op = _lookup_op
    Forward = _Forward
