"""The CLI's front half: load a program (TDSL or IR text), pick the function, decide what to
differentiate, and run the pass pipeline for a mode."""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import AdcError
from ..api.program import DEFAULT_PASSES
from ..ir.core import Function, Module

# runs right before a derivative pass: loops then scan the stacked values they read as X[i],
# so that reverse mode stacks their cotangents instead of carrying full-size accumulators
DERIVATIVE_PREP = "scan-inputs"
GRAD_SUFFIX = "_grad"  # reverse{fn=f} adds the adjoint program as f_grad


@dataclass
class Compiled:
    """A program compiled for one mode."""

    module: Module
    primal: Function      # the function as written: its inputs and results
    run_name: str         # what to execute: the primal, or its adjoint `<fn>_grad`
    wrt: list[str]        # differentiated inputs (reverse mode), in input order
    notes: list[str]      # things the user should be told on stderr

    @property
    def n_results(self) -> int:
        return len(self.primal.result_types)

    @property
    def run_fn(self) -> Function:
        return self.module[self.run_name]

    def output_names(self) -> list[str]:
        """OUT.npz keys of the run function's outputs (spec §7); a function run as it is
        names them as the pass that derived it would (``grad_<w>``...)."""
        from ..api.outputs import output_names, result_keys
        if self.run_name == self.primal.name:
            return output_names(self.module, self.run_fn)
        outs = result_keys(self.n_results, self.primal.attrs.get("state", ()))
        return outs + [f"grad_{w}" for w in self.wrt]


def read_source(path: str) -> str | None:
    """The text of `path` for error rendering (undecodable bytes replaced), if readable."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return None


def load_module(path: str) -> Module:
    """Parse `path`: IR text for ``.ir``/``.adcir`` files, TDSL otherwise."""
    from ..files.read import read_bytes
    raw = read_bytes(path, "program", f"cannot read '{path}': no such file")
    from ..frontend import compile_file, path_kind
    if path_kind(path) == "ir":
        from ..ir.parser import parse_module
        from ..ir.verifier import verify
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise AdcError(f"'{path}' is not UTF-8 text") from None
        module = parse_module(text, path)
        verify(module)
        return module
    return compile_file(path)


def select_function(module: Module, name: str | None) -> Function:
    """``--fn NAME``, or the last plain ``def`` of the module."""
    if not module.functions:
        raise AdcError("the program defines no function")
    if name is None:
        return module.main
    if name not in module:
        raise AdcError(f"--fn: no function '{name}' (functions: "
                       f"{', '.join(module.functions)})")
    return module[name]


def resolve_wrt(fn: Function, wrt: list[str] | None, notes: list[str]) -> list[str]:
    """``--wrt`` checked against `fn`'s inputs; default: the ``param`` inputs, or every float
    input when none is marked."""
    state = set(fn.attrs.get("state", ()))
    floats = [a.name for a in fn.args if a.type.is_float and a.name not in state]
    if wrt:
        from ..files.paths import expand_wrt
        try:
            wrt = expand_wrt(fn, wrt)   # a group's path: every input below it
        except AdcError as e:
            raise AdcError(f"--wrt: {e.message}") from None
        for w in wrt:
            if w not in fn.arg_names:
                raise AdcError(f"--wrt: '{w}' is not an input of '{fn.name}' (inputs: "
                               f"{', '.join(fn.arg_names) or 'none'})")
            if w in state:
                raise AdcError(f"--wrt: cannot differentiate with respect to '{w}': it is a "
                               f"state input (read and replaced by a step, never "
                               f"differentiated)", fn.loc)
            if w not in floats:
                raise AdcError(f"--wrt: cannot differentiate with respect to '{w}': it has "
                               f"type {fn.arg(w).type}, not a float type")
        return [a for a in fn.arg_names if a in wrt]
    params = [a for a in floats if a in fn.params]
    if params:
        return params
    if not floats:
        raise AdcError(f"'{fn.name}' has no float inputs to differentiate")
    notes.append(f"no input of '{fn.name}' is marked param: differentiating every float "
                 f"input ({', '.join(floats)})")
    return floats


def seeding(fn: Function, seed_output: str | None, notes: list[str]) -> tuple[int, ...]:
    """The results reverse mode seeds: ``--seed-output NAME`` alone, or every result (the
    spec's convention, like ``backward(ones_like(out))``), which a note states unless the
    function has one scalar result."""
    from ..api.outputs import result_keys
    state = fn.attrs.get("state", ())
    types = fn.result_types
    keys = result_keys(len(types), state)
    if state and seed_output is None:   # the state results carry no derivative
        types = types[:len(types) - len(state)]
        keys = keys[:len(types)]
        if len(types) == 1 and types[0].shape == ():
            return (0,)
    if seed_output is not None and seed_output in keys[len(keys) - len(state):]:
        raise AdcError(f"--seed-output: '{seed_output}' is the new value of a state input: "
                       f"no gradient flows through a state update")
    if seed_output is not None:
        if seed_output not in keys:
            raise AdcError(f"--seed-output: no result '{seed_output}' (results: "
                           f"{', '.join(keys)})")
        k = keys.index(seed_output)
        if not types[k].is_float:
            raise AdcError(f"--seed-output: result '{seed_output}' has type {types[k]}, "
                           "not a float type")
        return (k,)
    if len(types) != 1 or types[0].shape != ():
        listing = ", ".join(f"{k} {t}" for k, t in zip(keys, types) if t.is_float)
        notes.append(f"every float result of '{fn.name}' ({listing}) is seeded with ones: "
                     "the gradients are those of the sum of all their elements, like "
                     "backward(ones_like(out)); --seed-output NAME differentiates one result")
    return tuple(range(len(types))) if state else ()


def build_pipeline(mode: str, fn: str, wrt: list[str], passes: str | None,
                   seed: tuple[int, ...] = ()) -> str:
    """The pipeline for `mode`. `passes` (default `DEFAULT_PASSES`) runs as written in
    forward mode; in reverse mode it runs before and after ``reverse{...}``, with
    `DERIVATIVE_PREP` just before it, unless it names a reverse pass itself, in which case
    it is used as written."""
    passes = DEFAULT_PASSES if passes is None else passes.strip()
    if mode == "forward" or "reverse" in [p.split("{")[0].strip() for p in passes.split(",")]:
        return passes
    seed_opt = f" seed={','.join(map(str, seed))}" if seed else ""
    rev = f"reverse{{wrt={','.join(wrt)} fn={fn}{seed_opt}}}"
    return ",".join(p for p in (passes, DERIVATIVE_PREP, rev, passes) if p)


def prepare_module(path: str, fn_name: str | None, dtype: str | None,
                   bind: dict | None) -> tuple[Module, Function]:
    """Load `path`, pick the function, and apply ``--dtype`` and ``--bind`` to the module."""
    from ..passes.to_dtype import bind_dims, to_dtype
    module = load_module(path)
    fn = select_function(module, fn_name)
    if dtype:
        to_dtype(module, dtype)
    if bind:
        bind_dims(module, bind)
    return module, fn


def compile_program(path: str, mode: str, fn_name: str | None = None,
                    wrt: list[str] | None = None, passes: str | None = None,
                    dtype: str | None = None, bind: dict | None = None,
                    print_ir_after_all: bool = False,
                    seed_output: str | None = None, rederive: bool = True,
                    train_mode: bool = False) -> Compiled:
    """Load `path` and compile it for `mode` (``forward`` or ``reverse``); `seed_output`
    names the one result reverse mode differentiates (default: all, seeded with ones).
    Without `rederive`, a function a pass already derived runs as it is. ``forward``
    evaluates (dropout is the identity) unless `train_mode`; derivatives always train."""
    from ..api.outputs import derived_from
    from ..passes.pipeline import run_pipeline

    module, fn = prepare_module(path, fn_name, dtype, bind)
    notes: list[str] = []
    if mode == "reverse" and not rederive and derived_from(fn) and seed_output is None:
        notes.append(f"'{fn.name}' is already derived ({derived_from(fn)} "
                     f"'{fn.attrs[derived_from(fn)]}'): running it as it is; --mode reverse "
                     "differentiates it again")
        mode = "forward"
    wrt_names = resolve_wrt(fn, wrt, notes) if mode == "reverse" else []
    seed = seeding(fn, seed_output, notes) if mode == "reverse" else ()
    pipeline = build_pipeline(mode, fn.name, wrt_names, passes, seed)
    module = run_pipeline(module, pipeline, print_ir_after_all=print_ir_after_all)
    if train_mode:
        from ..passes.train_mode import set_training
        set_training(module, fn.name)
    run_name = fn.name + GRAD_SUFFIX if mode == "reverse" else fn.name
    if run_name not in module:
        raise AdcError(f"the pipeline '{pipeline}' left no function '{run_name}'")
    if mode == "reverse":  # a --pipeline with its own reverse pass may choose other inputs
        wrt_names = list(module[run_name].attrs.get("wrt", wrt_names))
    return Compiled(module, fn, run_name, wrt_names, notes)
