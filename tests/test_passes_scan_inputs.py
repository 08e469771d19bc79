"""scan-inputs: values a loop reads only as X[i] become scanned inputs; what is rewritten,
what is left captured, and that values and derivatives do not change."""
import numpy as np
import pytest

import adcompiler as adc
from gradcheck import finite_difference, run
from test_forward_ops import check_jvp
from adcompiler.cli.compile import build_pipeline, compile_program
from adcompiler.frontend import compile_source
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.ir.verifier import verify
from adcompiler.passes.hvp import forward_over_reverse
from adcompiler.passes.pipeline import get_pass, run_pipeline
from adcompiler.passes.reverse import Reverse
from adcompiler.passes.scan_inputs import ScanInputs
from adc_runtime.executor import run_function

RNG = np.random.default_rng(5)

STACKED = """
def f(x: f64[B, 3], param W: f64[4, 3, 3], param b: f64[4, 3]) -> f64 {
    h = x
    for i in range(4) {
        h = h + tanh(h @ W[i] + b[i])
    }
    return mean(h * h)
}"""


def randn(*shape):
    return 0.5 * RNG.standard_normal(shape)


def stacked_inputs():
    return {"x": randn(2, 3), "W": randn(4, 3, 3), "b": randn(4, 3)}


def loops(fn):
    return [op for op in fn.walk() if op.name == "for"]


def scanned(loop):
    """Names of the values `loop` scans (its operands after the carries)."""
    return [v.name for v in loop.operands[loop.attrs["n_carry"]:]]


def indexed(fn):
    """Names of the values read with ``index`` anywhere in `fn`."""
    return sorted({op.operands[0].name for op in fn.walk() if op.name == "index"})


def rewrite(module, fn="f", inputs=None):
    """Run the pass; check the verifier, the text round trip and bit-identical results."""
    out = run_pipeline(module, "scan-inputs", verify=True)
    text = print_module(out)
    assert print_module(parse_module(text)) == text
    if inputs is not None:
        before, _ = run_function(module, fn, inputs)
        after, _ = run_function(out, fn, inputs)
        assert len(before) == len(after)
        for a, b in zip(before, after):
            assert np.array_equal(a, b)
    return out


def test_stacked_weights_become_scanned_inputs():
    m = compile_source(STACKED)
    out = rewrite(m, inputs=stacked_inputs())
    (loop,) = loops(out["f"])
    assert scanned(loop) == ["W", "b"]
    assert indexed(out["f"]) == []
    body = loop.regions[0]
    assert [(a.name, str(a.type)) for a in body.args] == [
        ("i", "i64[]"), ("h", "f64[B, 3]"), ("W", "f64[3, 3]"), ("b", "f64[3]")]
    # the printed body: golden/scan-inputs/scan_inputs.ir
    # the input module is not changed
    assert indexed(m["f"]) == ["W", "b"] and scanned(loops(m["f"])[0]) == []


def test_registered_and_exported():
    assert get_pass("scan-inputs") is ScanInputs
    assert adc.ScanInputs is ScanInputs
    assert adc.pass_spec(ScanInputs()) == "scan-inputs"
    m = compile_source(STACKED)
    assert print_module(ScanInputs()(m)) == print_module(run_pipeline(m, "scan-inputs"))


def test_symbolic_and_polynomial_trip_counts():
    m = parse_module("""func @f(%W: f64[2*B, 3], %V: f64[N, 3], %U: f64[N, 3]) -> (f64[3], f64[3]) {
  %0 = zeros() {shape = (3,), dtype = "f64"} : f64[3]
  %1 = for(%0) {n = "2*B", n_carry = 1, reverse = false} : f64[3] {
  ^(%i: i64[], %h: f64[3]):
    %2 = index(%W, %i) {idx = ("?",)} : f64[3]
    %3 = index(%U, %i) {idx = ("?",)} : f64[3]
    %4 = add(%h, %2) : f64[3]
    %5 = add(%4, %3) : f64[3]
    yield(%5)
  }
  %6 = for(%0) {n = "N", n_carry = 1, reverse = false} : f64[3] {
  ^(%j: i64[], %g: f64[3]):
    %7 = index(%V, %j) {idx = ("?",)} : f64[3]
    %8 = mul(%g, %7) : f64[3]
    yield(%8)
  }
  return(%1, %6)
}""")
    inputs = {"W": randn(6, 3), "V": randn(6, 3), "U": randn(6, 3)}
    out = rewrite(m)
    before, _ = run_function(m, "f", inputs, dims={"B": 3, "N": 6})
    after, _ = run_function(out, "f", inputs, dims={"B": 3, "N": 6})
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    first, second = loops(out["f"])
    # U's leading dim N is not provably 2*B (here both are 6): it stays captured
    assert scanned(first) == ["W"] and scanned(second) == ["V"]
    assert indexed(out["f"]) == ["U"]


def test_reverse_loops_scan_the_same_slices():
    m = parse_module("""func @f(%W: f64[3, 2], %h0: f64[2]) -> (f64[2], f64[3, 2]) {
  %h, %ys = for(%h0) {n = 3, n_carry = 1, reverse = true} : f64[2], f64[3, 2] {
  ^(%i: i64[], %h.1: f64[2]):
    %0 = index(%W, %i) {idx = ("?",)} : f64[2]
    %1 = mul(%h.1, %0) : f64[2]
    %2 = sin(%1) : f64[2]
    yield(%2, %1)
  }
  return(%h, %ys)
}""")
    out = rewrite(m, inputs={"W": randn(3, 2), "h0": randn(2)})
    (loop,) = loops(out["f"])
    assert loop.attrs["reverse"] is True and scanned(loop) == ["W"]


def test_the_reverse_loop_of_an_adjoint_program():
    """Without the pass before `reverse`, the reverse loop reads W[i] itself: the pass
    rewrites that reverse loop too, and the gradients keep their bits."""
    m = Reverse(fn="f")(compile_source(STACKED))
    out = rewrite(m, fn="f_grad", inputs=stacked_inputs())
    fwd, rev = loops(out["f_grad"])
    assert rev.attrs["reverse"] and "W" in scanned(fwd) and "W" in scanned(rev)


def nested(params: str, width: int, first: str, inner: str, inner_n: int):
    """``h <- g + h`` three times, where g starts at `first` and the inner loop runs
    ``g <- inner`` `inner_n` times; h0 has `width` elements."""
    return compile_source(f"""
def f({params}, param h0: f64[{width}]) -> f64[{width}] {{
    h = h0
    for i in range(3) {{
        g = {first}
        for j in range({inner_n}) {{ g = {inner} }}
        h = g + h
    }}
    return h
}}""")


def test_nested_loop_reading_the_outer_slice():
    m = nested("param W: f64[3, 2]", 2, "h", "sin(g * W[i])", 2)
    out = rewrite(m, inputs={"W": randn(3, 2), "h0": randn(2)})
    outer, inner = loops(out["f"])
    assert scanned(outer) == ["W"] and scanned(inner) == []
    assert indexed(out["f"]) == []
    # the inner loop reads the outer loop's slice argument
    (mul,) = [op for op in inner.regions[0].ops if op.name == "mul"]
    assert mul.operands[1] is outer.regions[0].args[-1]


def test_nested_loops_each_decide():
    m = nested("param W: f64[3, 2], param V: f64[2, 2]", 2, "h * W[i]",
               "sin(g * V[j] + V[i - i])", 2)
    out = rewrite(m, inputs={"W": randn(3, 2), "V": randn(2, 2), "h0": randn(2)})
    outer, inner = loops(out["f"])
    # V[i - i] is not V[j]: the inner loop keeps V captured; the outer loop's trip count
    # is not V's leading dim
    assert scanned(outer) == ["W"] and scanned(inner) == []
    assert indexed(out["f"]) == ["V"]


def test_inner_loop_scanning_first_keeps_the_value_captured_outside():
    m = nested("param W: f64[3, 3]", 3, "h * W[i]", "sin(g * W[j])", 3)
    out = rewrite(m, inputs={"W": randn(3, 3), "h0": randn(3)})
    outer, inner = loops(out["f"])
    # the inner loop scans W by its own counter; the outer loop then reads W in two ways
    # (W[i], and whole as the inner loop's operand) and leaves it captured
    assert scanned(inner) == ["W"] and scanned(outer) == []
    assert indexed(out["f"]) == ["W"]


def test_a_value_captured_by_two_loops():
    m = compile_source("""
def f(param W: f64[4, 3]) -> f64 {
    h = zeros([3], dtype=f64)
    for i in range(4) { h = h + W[i] }
    g = zeros([3], dtype=f64)
    for i in range(4) { g = g * W[i] + h + sum(W) }
    return sum(h * g)
}""")
    out = rewrite(m, inputs={"W": randn(4, 3)})
    first, second = loops(out["f"])
    assert scanned(first) == ["W"] and scanned(second) == []


def test_repeated_reads_share_one_slice():
    m = compile_source("""
def f(param W: f64[4, 3]) -> f64[3] {
    h = zeros([3], dtype=f64)
    for i in range(4) { h = h * W[i] + W[i] }
    return h
}""")
    out = rewrite(m, inputs={"W": randn(4, 3)})
    (loop,) = loops(out["f"])
    assert scanned(loop) == ["W"] and len(loop.regions[0].args) == 3


# ---- derivatives --------------------------------------------------------------------

def test_reverse_mode_stacks_the_gradient_of_a_scanned_input():
    m = run_pipeline(compile_source(STACKED), "scan-inputs")
    g = Reverse(fn="f")(m)
    verify(g)
    rev = [op for op in loops(g["f_grad"]) if op.attrs["reverse"]][0]
    nc = rev.attrs["n_carry"]
    assert [str(r.type) for r in rev.results[:nc]] == ["f64[B, 3]"]
    assert not any(op.name == "index_grad" for op in g["f_grad"].walk())
    inputs = stacked_inputs()
    outs = run(g, "f_grad", inputs)
    for k, w in enumerate(("W", "b")):
        want = finite_difference(m, inputs, w)
        np.testing.assert_allclose(outs[1 + k], want, rtol=1e-6, atol=1e-9)
    # the same bits as the adjoint of the loop that captures W and b
    old = run(Reverse(fn="f")(compile_source(STACKED)), "f_grad", inputs)
    for a, b in zip(old, outs):
        assert np.array_equal(a, b)


def test_forward_mode_on_scanned_inputs():
    m = run_pipeline(compile_source(STACKED), "scan-inputs")
    check_jvp(m, stacked_inputs(), ["W", "b"], roundtrip=True)


def test_hessian_vector_products_on_scanned_inputs():
    m = run_pipeline(compile_source(STACKED), "scan-inputs")
    hm = forward_over_reverse(m, "f", ["W", "b"])
    verify(hm)
    inputs = stacked_inputs()
    v = {w: randn(*inputs[w].shape) for w in ("W", "b")}
    outs = run(hm, "f_hvp", {**inputs, "t_W": v["W"], "t_b": v["b"]})
    eps = 1e-5
    plus = run(hm, "f_grad", {**inputs, **{w: inputs[w] + eps * v[w] for w in v}})
    minus = run(hm, "f_grad", {**inputs, **{w: inputs[w] - eps * v[w] for w in v}})
    for k in range(2):
        fd = (plus[1 + k] - minus[1 + k]) / (2 * eps)
        np.testing.assert_allclose(outs[3 + k], fd, rtol=1e-6, atol=1e-8)


def test_convenience_layer_runs_the_pass_before_each_derivative():
    inputs = stacked_inputs()
    g = adc.grad(STACKED, wrt=("W", "b"))
    dW, db = g(**inputs)
    assert not any(op.name == "index_grad" for op in g.module["f_grad"].walk())
    np.testing.assert_allclose(dW, finite_difference(compile_source(STACKED), inputs, "W"),
                               rtol=1e-6, atol=1e-9)
    j = adc.jvp(STACKED, wrt="W")
    assert "W" in scanned(loops(j.module["f_jvp"])[0])
    h = adc.hvp(STACKED, wrt="W")
    assert not any(op.name == "index_grad" for op in h.module["f_hvp"].walk())


# ---- the default pipelines -----------------------------------------------------------

def test_default_pipelines_run_the_pass_before_the_derivative():
    p = build_pipeline("reverse", "f", ["W"], None)
    assert p.index("scan-inputs") < p.index("reverse{")
    assert build_pipeline("forward", "f", [], None) == "inline,canonicalize,cse,dce"
    # a pipeline that names its own reverse pass is used as written
    assert build_pipeline("reverse", "f", ["W"], "reverse,dce") == "reverse,dce"


@pytest.mark.parametrize("mode", ["jvp", "hvp"])
def test_cli_forward_modes_scan(mode):
    from adcompiler.cli.forward import compile_forward
    comp = compile_forward("samples/deep_mlp.tdsl", mode)
    assert all(op.name != "index" for op in comp.run_fn.walk())
    assert all(op.name != "index_grad" for op in comp.run_fn.walk())


def test_deep_mlp_reverse_loop_has_no_full_size_carry():
    comp = compile_program("samples/deep_mlp.tdsl", "reverse")
    grad = comp.run_fn
    rev = [op for op in loops(grad) if op.attrs["reverse"]]
    assert len(rev) == 1
    rev = rev[0]
    nc = rev.attrs["n_carry"]
    carries = [tuple(r.type.shape) for r in rev.results[:nc]]
    assert (64, 8, 8) not in carries and (64, 8) not in carries
    assert not any(op.name == "index_grad" for op in grad.walk())
    assert not any(op.name == "index" and op.operands[0].name == "W" for op in grad.walk())
    # dW and db are the reverse loop's stacked outputs, returned as they are
    ret = grad.body.ops[-1]
    assert ret.operands[1] in rev.results[nc:] and ret.operands[2] in rev.results[nc:]
    assert [str(r.type) for r in ret.operands[1:]] == ["f32[64, 8, 8]", "f32[64, 8]"]
