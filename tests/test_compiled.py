"""The compiled CPU executor against the NumPy interpreter: bit-identical results on every
sample, on random programs and on the benchmark-like models, errors located as the
interpreter locates them, and generated source made of generated identifiers only."""
from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import adcompiler as adc
from adcompiler.frontend import compile_source
from adcompiler.ir.parser import parse_module
from adcompiler.passes import run_pipeline
from adc_runtime.compiled import CompiledExecutor
from adc_runtime.executor import Runner
from test_property_programs import programs
from sample_inputs import sample_inputs

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
REVERSE = "inline,canonicalize,cse,dce,scan-inputs,reverse{{wrt={wrt} fn={fn}}},inline,canonicalize,cse,dce"


def both(module, name: str, inputs: dict, dims=None, calls: int = 2):
    """Outputs of the interpreter and of the compiled executor (its last of `calls`); the
    live-byte peaks they count must agree."""
    want, stats = Runner(module, name)(inputs, dims)
    compiled = Runner(module, name, make_executor=lambda d: CompiledExecutor(module, np, d))
    for _ in range(calls):
        got, got_stats = compiled(inputs, dims)
        assert got_stats["peak_bytes"] == stats["peak_bytes"] > 0
    return want, got


def assert_bits_equal(want, got):
    assert len(want) == len(got)
    for a, b in zip(want, got):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def grad_module(src: str, fn: str, wrt: list[str]):
    m = compile_source(src, "<test>") if isinstance(src, str) else src
    return run_pipeline(m, REVERSE.format(wrt=",".join(wrt), fn=fn))


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.tdsl")), ids=lambda p: p.stem)
def test_samples_reverse_mode_bit_identical(path):
    m = adc.load(str(path))
    fn = m.main
    inputs = sample_inputs(path, fn)
    state = fn.attrs.get("state", ())   # read and replaced, never differentiated
    wrt = [a.name for a in fn.args if a.type.is_float and a.name not in state]
    out = grad_module(m, fn.name, wrt)
    want, got = both(out, f"{fn.name}_grad", inputs)
    assert_bits_equal(want, got)
    want, got = both(out, fn.name, inputs)   # the primal as well
    assert_bits_equal(want, got)


MLP = """
def mlp(x: f32[B, D], labels: i64[B], param W1: f32[D, H], param b1: f32[H],
        param W2: f32[H, C], param b2: f32[C]) -> f32 {
    h = relu(x @ W1 + b1)
    return mean(cross_entropy(h @ W2 + b2, labels))
}
"""


def test_classifier_gradient_bit_identical_with_its_shared_softmax():
    m = grad_module(MLP, "mlp", ["W1", "b1", "W2", "b2"])
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((16, 12)).astype(np.float32),
              "labels": rng.integers(0, 5, 16),
              "W1": rng.standard_normal((12, 20)).astype(np.float32),
              "b1": rng.standard_normal(20).astype(np.float32),
              "W2": rng.standard_normal((20, 5)).astype(np.float32),
              "b2": rng.standard_normal(5).astype(np.float32)}
    want, got = both(m, "mlp_grad", inputs, calls=3)
    assert_bits_equal(want, got)
    ex = CompiledExecutor(m, np, {"B": 16, "D": 12, "H": 20, "C": 5})
    ex.call(m["mlp_grad"], [np.asarray(inputs[a.name]) for a in m["mlp_grad"].args])
    source = ex._programs[id(m["mlp_grad"])].source
    assert source.count("softmax") == 0 and len(re.findall(r"\bs\d+\b", source)) >= 2


@settings(max_examples=30, deadline=None, derandomize=True)
@given(programs())
def test_random_programs_bit_identical_in_reverse_mode(program):
    src, shapes = program
    m = compile_source(src, "<random>")
    out = grad_module(m, "f", list(shapes))
    rng = np.random.default_rng(0)
    inputs = {k: rng.standard_normal(s) for k, s in shapes.items()}
    inputs["ids"] = np.array([0, -1, 0])
    with np.errstate(all="ignore"):
        want, got = both(out, "f_grad", inputs)
    assert_bits_equal(want, got)


def test_returned_constants_are_fresh_on_every_call():
    src = """
def f(param x: f32[3]) -> (f32[3], f32[2, 2], f32) {
    return zeros([3]) + 1.0, reshape(ones([4]), [2, 2]), sum(x)
}
"""
    m = compile_source(src, "<test>")
    run = Runner(m, "f", make_executor=lambda d: CompiledExecutor(m, np, d))
    x = np.ones(3, np.float32)
    a, b, _ = run({"x": x})[0]
    a[:] = 7
    b[:] = 7
    a2, b2, _ = run({"x": x})[0]
    assert np.array_equal(a2, np.ones(3)) and np.array_equal(b2, np.ones((2, 2)))


def test_repeated_calls_check_what_changed():
    """A call with the last call's dtypes, shapes and dims reuses its checks; another
    dtype is converted, another shape bound again, a wrong one refused, other dims used."""
    src = """
def f(x: f32[N], y: f32[M]) -> f32 {
    return sum(x) * 2.0 + sum(y)
}
"""
    m = compile_source(src, "<test>")
    run = Runner(m, "f", make_executor=lambda d: CompiledExecutor(m, np, d))
    x, y = np.ones(3, np.float32), np.ones(2, np.float32)
    assert run({"x": x, "y": y})[0][0] == 8
    assert run({"x": x, "y": y})[0][0] == 8
    assert run({"x": np.ones(3), "y": y})[0][0] == 8            # f64: converted
    assert run({"x": np.ones(3), "y": y})[0][0] == 8
    assert run({"x": [1.0, 2.0], "y": y})[0][0] == 8            # a list: converted
    got = run({"x": np.ones(5, np.float32), "y": y})
    assert got[0][0] == 12 and got[1]["dims"] == {"N": 5, "M": 2}
    with pytest.raises(adc.AdcError):
        run({"x": np.ones((5, 1), np.float32), "y": y})         # a rank the type refuses
    with pytest.raises(adc.AdcError):
        run({"x": x, "y": y}, {"N": 4})                         # dims the shapes contradict
    assert run({"x": x, "y": y}, {"N": 3})[1]["dims"] == {"N": 3, "M": 2}


def test_bad_values_are_located_as_the_interpreter_locates_them():
    src = """
def f(x: f32[N]) -> f32 {
    return max(x)
}
"""
    m = compile_source(src, "prog.tdsl")
    run = Runner(m, "f", make_executor=lambda d: CompiledExecutor(m, np, d))
    with pytest.raises(adc.AdcError) as compiled:
        run({"x": np.zeros(0, np.float32)})
    with pytest.raises(adc.AdcError) as interpreted:
        Runner(m, "f")({"x": np.zeros(0, np.float32)})
    assert str(compiled.value) == str(interpreted.value)
    assert compiled.value.loc is not None and compiled.value.loc.line == 3


GENERATED_NAME = re.compile(r"(def|return|del|program|fix|out|if|live|peak|n0|[vkbudcVtse]\d+|op\d+|run\d+)\Z")


def test_generated_source_holds_generated_identifiers_only():
    # value names, a file name and attribute strings an attacker chooses
    text = (
        'func @f(%"x\\nimport os": f32[3], %"y\'); os.system(\'echo\'": f32[3]) -> (f32[], f32[3]) {\n'
        '  %"a\\u2028b" = mul(%"x\\nimport os", %"y\'); os.system(\'echo\'") : f32[3] '
        'loc("evil\\nimport os\\u0000.tdsl":1:1)\n'
        '  %"s\\"" = sum(%"a\\u2028b") {axis = none, keepdims = false} : f32[]\n'
        '  %t = einsum(%"a\\u2028b") {spec = "i->i"} : f32[3]\n'
        '  return(%"s\\"", %t)\n'
        '}\n')
    m = parse_module(text, "evil.ir")
    fn = m["f"]
    ex = CompiledExecutor(m, np, {})
    x = np.arange(3, dtype=np.float32)
    got = ex.call(fn, [x, x])
    assert float(got[0]) == float(np.sum(x * x))
    source = ex._programs[id(fn)].source
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        assert tok.type != tokenize.STRING, tok
        assert tok.type != tokenize.COMMENT, tok
        if tok.type == tokenize.NAME:
            assert GENERATED_NAME.match(tok.string), tok.string


def test_library_callables_use_the_compiled_executor():
    g = adc.grad(MLP, wrt=["W1"])
    rng = np.random.default_rng(2)
    args = dict(x=rng.standard_normal((4, 3)), labels=np.array([0, 1, 1, 0]),
                W1=rng.standard_normal((3, 5)), b1=np.zeros(5),
                W2=rng.standard_normal((5, 2)), b2=np.zeros(2))
    g(**args)
    (ex,) = g._runner._executors.values()
    assert isinstance(ex, CompiledExecutor)
