"""Parity with PyTorch on whole programs: every sample re-implemented in torch and run
through ``adc run`` on its own inputs (samples/X.json) -- reverse mode in f32 as declared and
with ``--dtype f64``, jvp and hvp with ``--dtype f64`` -- plus programs that exercise what
single ops do not: several results, non-scalar results, calls, custom ``grad`` rules, loops.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch_ref import (adc_run, adc_run_file, assert_close, strict_dtypes,  # noqa: E402,F401
                       torch_hvp, torch_jvp, torch_value_and_grad)
from adcompiler.frontend import compile_file  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning",  # inside torch.func.jvp
    "ignore:invalid value encountered:RuntimeWarning")               # NaN cases (pow)
torch.set_num_threads(1)
SAMPLES = Path(__file__).resolve().parent.parent / "samples"


# ---- the samples in torch ---------------------------------------------------------------

def backprop_tiny(t):
    h = torch.relu(t["W1"] @ t["x"] + t["b1"])
    p = torch.sigmoid(t["v"] @ h + t["b3"])
    return F.binary_cross_entropy(p, t["y"])


def autograd_intro(t):
    return (3 * (t["x"] + 2) ** 2).mean()


def chain_rule(t):
    a = torch.sigmoid(t["W1"] @ t["x"])
    return ((t["W2"] @ a) ** 2)[0]


def mlp(t):
    h = torch.relu(t["x"] @ t["W1"] + t["b1"])
    return F.cross_entropy(h @ t["W2"] + t["b2"], t["labels"])


def _ln(x, g, b):
    return F.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5)


def _block(h, t, l, scale):
    """One post-norm transformer block with the weights of layer `l` (None: unstacked)."""
    p = (lambda k: t[k]) if l is None else (lambda k: t[k][l])
    scores = (h @ p("Wq")) @ (h @ p("Wk")).T * scale
    att = torch.softmax(scores, -1) @ (h @ p("Wv")) @ p("Wo")
    a = _ln(h + att, p("g1"), p("be1"))
    ffn = F.gelu(a @ p("W1") + p("c1"), approximate="tanh") @ p("W2") + p("c2")
    return _ln(a + ffn, p("g2"), p("be2"))


def attention(t):
    return F.mse_loss(_block(t["x"], t, None, 0.5), t["target"])


_BLOCK_FIELDS = {"Wq": "attn.Wq", "Wk": "attn.Wk", "Wv": "attn.Wv", "Wo": "attn.Wo",
                 "g1": "ln1.g", "be1": "ln1.b", "W1": "ffn.W1", "c1": "ffn.c1",
                 "W2": "ffn.W2", "c2": "ffn.c2", "g2": "ln2.g", "be2": "ln2.b"}


def transformer_stack(t):
    h = t["x"]
    for layer in range(6):   # the stacked group `blocks: Block[6]`, one layer at a time
        p = {k: t[f"blocks.{v}"][layer] for k, v in _BLOCK_FIELDS.items()}
        h = _block(h, p, None, 0.35355339)
    return F.mse_loss(h, t["target"])


def rnn(t):
    h = torch.zeros(4, dtype=t["Wx"].dtype)
    loss = torch.zeros((), dtype=t["Wx"].dtype)
    for i in range(t["xs"].shape[0]):
        h = torch.tanh(t["xs"][i] @ t["Wx"] + h @ t["Wh"] + t["b"])
        loss = loss + (h @ t["wo"] - t["ys"][i]) ** 2
    return loss


def deep_mlp(t):
    h = t["x"]
    for i in range(64):
        h = h + torch.tanh(h @ t["W"][i] + t["b"][i])
    return (h * h).mean()


SAMPLE_REFS = {f.__name__: f for f in (backprop_tiny, autograd_intro, chain_rule, mlp,
                                       attention, rnn, deep_mlp, transformer_stack)}


def run_sample(tmp_path, name: str, mode: str, **kw) -> dict:
    """``adc run`` of samples/NAME, the per-layer outputs of a stacked group (``grad_blocks.3.
    attn.Wq``) stacked again under the input's name (``grad_blocks.attn.Wq``)."""
    from adcompiler.files.paths import join
    got = adc_run_file(tmp_path, SAMPLES / f"{name}.tdsl", mode, SAMPLES / f"{name}.json", **kw)
    fn = compile_file(str(SAMPLES / f"{name}.tdsl")).main
    out = {k: v for k, v in got.items() if "." not in k}
    for kind in ("grad_", "hvp_"):
        mine = {k[len(kind):]: v for k, v in got.items() if k.startswith(kind) and "." in k}
        out.update({kind + k: v for k, v in join(fn, mine, "outputs").items()})
    return out


def sample_inputs(name: str, T: str) -> tuple[dict, list[str]]:
    """samples/NAME.json as arrays of the declared types (floats in `T`), and the params."""
    fn = compile_file(str(SAMPLES / f"{name}.tdsl")).main
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    arrays = {}
    for a in fn.args:
        dtype = {"f32": T, "f64": T}.get(a.type.dtype, a.type.dtype)
        arrays[a.name] = np.asarray(data[a.name], dtype={"f32": np.float32, "f64": np.float64,
                                                         "i64": np.int64, "i32": np.int32}[dtype])
    return arrays, [a.name for a in fn.args if a.name in fn.params]


@pytest.mark.parametrize("name", list(SAMPLE_REFS))
@pytest.mark.parametrize("T", ["f32", "f64"])
def test_sample_reverse(name, T, tmp_path, strict_dtypes):
    """``adc run samples/X.tdsl --mode reverse --inputs samples/X.json [--dtype f64]``."""
    inputs, params = sample_inputs(name, T)
    got = run_sample(tmp_path, name, "reverse", dtype="f64" if T == "f64" else None)
    (value,), grads = torch_value_and_grad(SAMPLE_REFS[name], inputs, params)
    assert_close(got["out"], value, T, f"{name} {T} out")
    for w in params:
        assert_close(got[f"grad_{w}"], grads[w], T, f"{name} {T} grad_{w}")
    assert set(got) == {"out"} | {f"grad_{w}" for w in params}


def _tangents(inputs, params, seed=5):
    rng = np.random.default_rng(seed)
    return {w: rng.standard_normal(inputs[w].shape) for w in params}


@pytest.mark.parametrize("name", list(SAMPLE_REFS))
def test_sample_jvp(name, tmp_path):
    inputs, params = sample_inputs(name, "f64")
    tans = _tangents(inputs, params)
    got = run_sample(tmp_path, name, "jvp", dtype="f64", tangents=tans)
    (value,), (tangent,) = torch_jvp(SAMPLE_REFS[name], inputs, params, tans)
    assert_close(got["out"], value, "f64", f"{name} out")
    assert_close(got["tangent_out"], tangent, "f64", f"{name} tangent_out")


@pytest.mark.parametrize("name", list(SAMPLE_REFS))
def test_sample_hvp(name, tmp_path):
    inputs, params = sample_inputs(name, "f64")
    tans = _tangents(inputs, params)
    got = run_sample(tmp_path, name, "hvp", dtype="f64", tangents=tans)
    grads, hvps = torch_hvp(SAMPLE_REFS[name], inputs, params, tans)
    for w in params:
        assert_close(got[f"grad_{w}"], grads[w], "f64", f"{name} grad_{w}")
        assert_close(got[f"hvp_{w}"], hvps[w], "f64", f"{name} hvp_{w}")


# ---- programs beyond single ops -------------------------------------------------------

MULTI = """
def two(param x: {T}[3, 4], param w: {T}[4]) -> ({T}[3], {T}) {{
    y = tanh(x @ w)
    return y, sum(y * y) + mean(x)
}}
"""


def multi_ref(t):
    y = torch.tanh(t["x"] @ t["w"])
    return y, (y * y).sum() + t["x"].mean()


@pytest.mark.parametrize("T", ["f32", "f64"])
def test_several_results(T, tmp_path, strict_dtypes):
    """Keys out0, out1 and grad_<input> of the seeded sum of every result (spec §7)."""
    rng = np.random.default_rng(3)
    dt = np.float32 if T == "f32" else np.float64
    inputs = {"x": rng.standard_normal((3, 4)).astype(dt), "w": rng.standard_normal(4).astype(dt)}
    got = adc_run(tmp_path, MULTI.format(T=T), "reverse", inputs)
    values, grads = torch_value_and_grad(multi_ref, inputs, ["x", "w"])
    for k, v in enumerate(values):
        assert_close(got[f"out{k}"], v, T, f"out{k}")
    for w in ("x", "w"):
        assert_close(got[f"grad_{w}"], grads[w], T, f"grad_{w}")
    if T == "f64":
        tans = _tangents(inputs, ["x", "w"])
        got = adc_run(tmp_path, MULTI.format(T=T), "jvp", inputs, tangents=tans)
        values, tangents = torch_jvp(multi_ref, inputs, ["x", "w"], tans)
        for k in range(2):
            assert_close(got[f"out{k}"], values[k], T, f"out{k}")
            assert_close(got[f"tangent_out{k}"], tangents[k], T, f"tangent_out{k}")


NONSCALAR = """
def f(param a: {T}[2, 3], param b: {T}[3]) -> {T}[2, 3] {{
    return softmax(a * b, axis=0) + gelu(a)
}}
"""


@pytest.mark.parametrize("T", ["f32", "f64"])
def test_nonscalar_result_is_seeded_with_ones(T, tmp_path):
    rng = np.random.default_rng(4)
    dt = np.float32 if T == "f32" else np.float64
    inputs = {"a": rng.standard_normal((2, 3)).astype(dt), "b": rng.standard_normal(3).astype(dt)}
    got = adc_run(tmp_path, NONSCALAR.format(T=T), "reverse", inputs)
    (value,), grads = torch_value_and_grad(
        lambda t: torch.softmax(t["a"] * t["b"], 0) + F.gelu(t["a"]),
        inputs, ["a", "b"])
    assert_close(got["out"], value, T, "out")
    for w in ("a", "b"):
        assert_close(got[f"grad_{w}"], grads[w], T, f"grad_{w}")


CUSTOM = """
def ste_round(x: f64[N]) -> f64[N] {
    return round(x)
}
grad ste_round(x, y, dy) {
    return dy
}
tangent ste_round(x, dx) {
    return dx
}
def quantized(param x: f64[N], param s: f64) -> f64 {
    q = ste_round(x * s) / s
    return sum(q * q * x)
}
"""


def test_custom_rules_match_a_straight_through_estimator(tmp_path):
    """A ``grad``/``tangent`` rule against torch's ``x + (round(x) - x).detach()``."""
    def ref(t):
        z = t["x"] * t["s"]
        q = (z + (torch.round(z) - z).detach()) / t["s"]
        return (q * q * t["x"]).sum()

    rng = np.random.default_rng(5)
    inputs = {"x": rng.standard_normal(6) * 3, "s": np.array(1.7)}
    got = adc_run(tmp_path, CUSTOM, "reverse", inputs)
    (value,), grads = torch_value_and_grad(ref, inputs, ["x", "s"])
    assert_close(got["out"], value, "f64", "out")
    for w in ("x", "s"):
        assert_close(got[f"grad_{w}"], grads[w], "f64", f"grad_{w}")
    tans = _tangents(inputs, ["x", "s"])
    got = adc_run(tmp_path, CUSTOM, "jvp", inputs, tangents=tans)
    _, (tangent,) = torch_jvp(ref, inputs, ["x", "s"], tans)
    assert_close(got["tangent_out"], tangent, "f64", "tangent_out")
    got = adc_run(tmp_path, CUSTOM, "hvp", inputs, tangents=tans)
    grads, hvps = torch_hvp(ref, inputs, ["x", "s"], tans)
    for w in ("x", "s"):
        assert_close(got[f"hvp_{w}"], hvps[w], "f64", f"hvp_{w}")


LOOP = """
def f(xs: {T}[T, 3], param W: {T}[3, 3], param c: {T}[3]) -> {T} {{
    h = c
    acc = zeros([], dtype={T})
    for i in range(T) {{
        h = maximum(h @ W, xs[i] * 0.5) + log_softmax(h)[::-1]
        acc = acc + logsumexp(h) + max(h) * var(h)
    }}
    return acc + sum(h[1:])
}}
"""


def test_loop_with_kinks_and_reversed_slices(tmp_path, strict_dtypes):
    def ref(t):
        h, acc = t["c"], torch.zeros((), dtype=t["c"].dtype)
        n = t["xs"].shape[0]
        for i in range(n):
            h = torch.maximum(h @ t["W"], t["xs"][i] * 0.5) + \
                torch.log_softmax(h, -1).flip(0)
            acc = acc + torch.logsumexp(h, 0) + torch.amax(h) * torch.var(h, correction=0)
        return acc + h[1:].sum()

    rng = np.random.default_rng(6)
    for T in ("f64", "f32"):
        dt = np.float32 if T == "f32" else np.float64
        inputs = {"xs": rng.standard_normal((4, 3)).astype(dt),
                  "W": (rng.standard_normal((3, 3)) * 0.5).astype(dt),
                  "c": rng.standard_normal(3).astype(dt)}
        got = adc_run(tmp_path, LOOP.format(T=T), "reverse", inputs)
        (value,), grads = torch_value_and_grad(ref, inputs, ["W", "c"])
        assert_close(got["out"], value, T, f"{T} out")
        for w in ("W", "c"):
            assert_close(got[f"grad_{w}"], grads[w], T, f"{T} grad_{w}")


COLUMNS = """
def f(x: f64[3, N], param W: f64[3, 3], param s: f64) -> f64 {
    h = zeros([3], dtype=f64)
    for i in range(N) {
        h = softplus(W @ h + x[:, i] * s) - 1
    }
    return sum(h * h)
}
"""


def test_loop_index_on_a_later_axis_with_wrt_subset(tmp_path):
    """A loop reading column ``x[:, i]``; reverse, jvp and hvp with ``--wrt W`` only."""
    def ref(t):
        h = torch.zeros(3, dtype=torch.float64)
        for i in range(t["x"].shape[1]):
            h = F.softplus(t["W"] @ h + t["x"][:, i] * t["s"]) - 1
        return (h * h).sum()

    rng = np.random.default_rng(8)
    inputs = {"x": rng.standard_normal((3, 5)), "W": rng.standard_normal((3, 3)) * 0.7,
              "s": np.array(0.8)}
    got = adc_run(tmp_path, COLUMNS, "reverse", inputs, wrt=["W"])
    (value,), grads = torch_value_and_grad(ref, inputs, ["W"])
    assert set(got) == {"out", "grad_W"}
    assert_close(got["out"], value, "f64", "out")
    assert_close(got["grad_W"], grads["W"], "f64", "grad_W")
    tans = _tangents(inputs, ["W"])
    got = adc_run(tmp_path, COLUMNS, "jvp", inputs, tangents=tans, wrt=["W"])
    _, (tangent,) = torch_jvp(ref, inputs, ["W"], tans)
    assert_close(got["tangent_out"], tangent, "f64", "tangent_out")
    got = adc_run(tmp_path, COLUMNS, "hvp", inputs, tangents=tans, wrt=["W"])
    grads, hvps = torch_hvp(ref, inputs, ["W"], tans)
    assert_close(got["grad_W"], grads["W"], "f64", "grad_W")
    assert_close(got["hvp_W"], hvps["W"], "f64", "hvp_W")
