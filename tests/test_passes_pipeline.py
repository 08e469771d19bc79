"""Pass registry, pipeline strings, option conversion and the pass manager."""
from __future__ import annotations

import io
from dataclasses import FrozenInstanceError, dataclass

import pytest

from adcompiler.diagnostics import AdcError
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.passes import (FunctionPass, get_pass, parse_pipeline, pass_spec,
                               register_pass, run_pipeline)
from adcompiler.passes.cse import CSE
from adcompiler.passes.dce import DCE
from adcompiler.passes.inline import Inline

TWO_FUNCS = """\
func @f(%x: f32[3]) -> (f32[3]) {
  %a = exp(%x) : f32[3]
  %b = exp(%x) : f32[3]
  %c = add(%a, %b) : f32[3]
  return(%c)
}

func @g(%x: f32[3]) -> (f32[3]) {
  %a = exp(%x) : f32[3]
  %b = exp(%x) : f32[3]
  %c = mul(%a, %b) : f32[3]
  return(%c)
}
"""


@register_pass("test-options")
@dataclass(frozen=True)
class OptionsPass(FunctionPass):
    """A pass with one option of each kind the pipeline parser converts."""

    count: int = 0
    ratio: float = 1.0
    flag: bool = False
    label: str = ""
    names: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()
    limit: int | None = None

    def run_on_function(self, fn, module):
        pass


def test_parse_pipeline_splits_at_top_level_commas():
    passes = parse_pipeline("inline, cse,dce{fn=main}")
    assert passes == [Inline(), CSE(), DCE(fn="main")]


def test_commas_inside_braces_continue_a_list_option():
    (p,) = parse_pipeline("test-options{names=W1,b1,b2 count=3,flag=true}")
    assert p.names == ("W1", "b1", "b2")
    assert p.count == 3 and p.flag is True


def test_options_are_converted_to_field_types():
    (p,) = parse_pipeline("test-options{count=7 ratio=0.5 flag=yes label=hi names=W "
                          "sizes=1,2,3 limit=4}")
    assert p == OptionsPass(count=7, ratio=0.5, flag=True, label="hi", names=("W",),
                            sizes=(1, 2, 3), limit=4)
    (q,) = parse_pipeline("test-options{limit=none flag=false}")
    assert q.limit is None and q.flag is False


def test_reverse_pipeline_from_the_spec_parses():
    passes = parse_pipeline("inline,cse,reverse{wrt=W1,b1},dce")
    assert [p.pass_name for p in passes] == ["inline", "cse", "reverse", "dce"]
    assert passes[2].wrt == ("W1", "b1")


@pytest.mark.parametrize("spec, message", [
    ("inline,nosuchpass", "unknown pass 'nosuchpass' (passes: "),
    ("cse{bogus=1}", "pass 'cse' has no option 'bogus' (options: fn)"),
    ("test-options{count=many}", "option 'count' of pass 'test-options' must be an int, got 'many'"),
    ("test-options{flag=maybe}", "option 'flag' of pass 'test-options' must be true or false"),
    ("test-options{count=1,2}", "option 'count' of pass 'test-options' takes one value"),
    ("cse{fn=main", "unbalanced '{' in pipeline"),
    ("cse{fn=main}}", "unbalanced '}' in pipeline"),
    ("cse{main}", "pass 'cse': expected option=value, got 'main'"),
    ("cse{fn=a fn=b}", "pass 'cse': option 'fn' given twice"),
])
def test_bad_pipelines_name_the_problem(spec, message):
    with pytest.raises(AdcError) as info:
        parse_pipeline(spec)
    assert message in info.value.message


def test_unknown_pass_error_lists_the_valid_ones():
    with pytest.raises(AdcError) as info:
        get_pass("nope")
    for name in ("canonicalize", "cse", "dce", "inline", "activity"):
        assert name in info.value.message


def test_passes_are_frozen():
    with pytest.raises(FrozenInstanceError):
        CSE().fn = "f"


def test_register_pass_requires_a_frozen_dataclass():
    with pytest.raises(TypeError):
        @register_pass("test-not-frozen")
        @dataclass
        class NotFrozen:
            pass


def test_pass_spec_round_trips():
    for spec in ["cse", "dce{fn=main}", "inline{prune=true}",
                 "test-options{count=2 names=a,b}"]:
        (p,) = parse_pipeline(spec)
        assert pass_spec(p) == spec
        assert parse_pipeline(pass_spec(p)) == [p]


def test_run_pipeline_accepts_pass_instances():
    out = run_pipeline(parse_module(TWO_FUNCS), [CSE(fn="f")])
    assert [op.name for op in out["f"].walk()] == ["exp", "add", "return"]


def test_print_ir_after_all_writes_a_header_and_the_module_per_pass():
    buf = io.StringIO()
    out = run_pipeline(parse_module(TWO_FUNCS), "cse{fn=f},dce", print_ir_after_all=True,
                       verify=True, out=buf)
    text = buf.getvalue()
    assert text.count("// ----- IR after ") == 2
    first, second = text.split("// ----- IR after dce -----\n")
    assert first.startswith("// ----- IR after cse{fn=f} -----\nfunc @f(")
    assert second.strip() == print_module(out).strip()
    assert "%b = exp" not in first.split("func @g")[0]


def test_verify_runs_after_each_pass():
    from adcompiler.ir.verifier import VerifyError

    @register_pass("test-breaks-ir")
    @dataclass(frozen=True)
    class Breaks(FunctionPass):
        def run_on_function(self, fn, module):
            fn.body.ops.pop(0)  # drop a definition that later ops still use

    with pytest.raises(VerifyError):
        run_pipeline(parse_module(TWO_FUNCS), "test-breaks-ir", verify=True)
    run_pipeline(parse_module(TWO_FUNCS), "test-breaks-ir")  # unchecked: no error


def test_every_pass_is_a_module_pass_named_alike_in_file_class_and_pipeline():
    import importlib
    import pkgutil

    import adcompiler.passes as passes
    from adcompiler.passes.pipeline import PASSES, ModulePass
    for m in pkgutil.iter_modules(passes.__path__):
        importlib.import_module(f"adcompiler.passes.{m.name}")
    builtin = {n: c for n, c in PASSES.items() if c.__module__.startswith("adcompiler.")}
    assert {"reverse", "jvp", "hvp", "remat", "fuse", "batch"} <= set(builtin)
    for name, cls in builtin.items():
        assert issubclass(cls, ModulePass), name
        assert cls.__module__ == "adcompiler.passes." + name.replace("-", "_"), name
        assert cls.__name__.lower() == name.replace("-", ""), name
