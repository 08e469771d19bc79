"""The compiled programs of a training run: the step (`adc.train_step`, or the mixed-precision
step of `mixed_precision`) and the forward program that evaluates validation data (no
adjoint, nothing kept for a backward pass).

``detect_anomaly`` swaps in `adc_runtime.anomaly.AnomalyExecutor` for both; otherwise they
run on the library's executor, which checks nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..api.program import Source, load, with_executor
from ..diagnostics import AdcError
from ..ir.core import Function, Module


@dataclass
class Prepared:
    """A loaded program (``--dtype`` applied) and the function to train."""

    module: Module
    fn: Function

    def step(self, optimizer, names: list[str], *, clip=None, accumulate: int = 1,
             remat: str | None = None, device: str = "cpu", precision: str | None = None,
             detect_anomaly: bool = False, dims: Mapping[str, int] | None = None,
             comm=None, bucket_mb: float = 25.0, seed: int = 0):
        """The training step: ``init(params)`` and ``(params, state, batch) -> (params,
        state, metrics)``; with `precision`, it has a `scaler` (`loss_scale.LossScaler`);
        with a communicator `comm`, it averages the loss and gradients over its processes
        (`adcompiler.training.distributed`)."""
        if precision is not None and comm is not None:
            raise AdcError("mixed precision does not combine with data-parallel training "
                           "yet: drop --precision or --distributed")
        if precision is not None:
            from .mixed_precision import MixedPrecisionStep
            return MixedPrecisionStep(self.module, self.fn.name, names, optimizer, precision,
                                      clip=clip, accumulate=accumulate, remat=remat,
                                      device=device, dims=dims,
                                      detect_anomaly=detect_anomaly)
        from .step import train_step
        step = train_step(self.module, optimizer, clip=clip, accumulate=accumulate,
                          fn=self.fn.name, wrt=names, remat=remat, device=device, dims=dims,
                          comm=comm, bucket_mb=bucket_mb, seed=seed)
        if detect_anomaly:
            step._runner = anomaly_runner(step.module, step.fn_name, device, donate=True)
            step._runner.seed = seed
        return step

    def forward(self, name: str, device: str = "cpu", detect_anomaly: bool = False,
                dims: Mapping[str, int] | None = None):
        """``evaluate(named_inputs) -> result``: function `name` of the module (the loss, a
        metric), forward only."""
        if name not in self.module:
            raise AdcError(f"no function '{name}' to evaluate (functions: "
                           f"{', '.join(self.module.functions)})")
        f = self.module[name]
        missing = [a.name for a in f.args if a.name not in self.fn.arg_names]
        declared = f.result_types[:len(f.result_types) - len(f.attrs.get("state", ()))]
        if missing or len(declared) != 1 or declared[0].shape != ():
            raise AdcError(f"'{name}' cannot be evaluated as a metric of '{self.fn.name}': "
                           "it must take inputs of the loss (by name) and return one "
                           "scalar", f.loc)
        from ..api.program import DEFAULT_PASSES, runner
        from ..passes.clone import clone_module
        from ..passes.pipeline import run_pipeline
        module = run_pipeline(clone_module(self.module), DEFAULT_PASSES)
        run = anomaly_runner(module, name, device) if detect_anomaly else \
            runner(module, name, device)
        dims = dict(dims or {})

        def evaluate(named):   # evaluation mode: dropout off, running statistics read
            outs, _ = run(named, dims)
            return outs[0]
        return evaluate


def anomaly_runner(module: Module, name: str, device: str, donate: bool = False):
    """The library's runner of `name` (its input checks included), with an executor that
    stops at the first non-finite op result."""
    from adc_runtime.anomaly import AnomalyExecutor
    return with_executor(module, name, device, AnomalyExecutor, donate)


def prepare(program: Source, fn: str | None = None, dtype: str | None = None,
            dims: Mapping[str, int] | None = None) -> Prepared:
    """Load `program`, pick `fn` (default: the main function) and apply `dtype`."""
    from ..passes.clone import clone_module
    module = load(program)
    if isinstance(program, Module):
        module = clone_module(module)
    if not module.functions:
        raise AdcError("the program defines no function")
    name = fn or module.main.name
    if name not in module:
        raise AdcError(f"no function '{name}' (functions: {', '.join(module.functions)})")
    if dtype is not None:
        from ..passes.to_dtype import to_dtype
        to_dtype(module, dtype)
    return Prepared(module, module[name])


