"""State inputs (tdsl.md section 9): batch normalization's running statistics against
torch.nn.BatchNorm2d over training steps in float64 and in evaluation, the state threaded
through steps, checkpoints, --save and --resume, state never differentiated, calls that
rebind the names passed for state, every remat policy, and the located errors."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.diagnostics import AdcError
from adcompiler.training.step import train_step

NET = """
def net(x: f64[N, 2, 5, 5], param w: f64[3, 2, 3, 3], param g: f64[3], param b: f64[3],
        param fc: f64[3, 4], state mean: f64[3], state var: f64[3] = 1) -> f64[N, 4] {
    h, mean, var = batchnorm_running(conv2d(x, w, padding=1), g, b, mean, var)
    return sum(relu(h), axis=[2, 3]) @ fc
}

def loss(x: f64[N, 2, 5, 5], t: f64[N, 4], param w: f64[3, 2, 3, 3], param g: f64[3],
         param b: f64[3], param fc: f64[3, 4], state mean: f64[3], state var: f64[3] = 1) -> f64 {
    return mean((net(x, w, g, b, fc, mean, var) - t) ** 2)
}
"""


def _params(rng):
    return {"w": rng.standard_normal((3, 2, 3, 3)) * 0.3, "g": 1 + 0.1 * rng.standard_normal(3),
            "b": 0.1 * rng.standard_normal(3), "fc": rng.standard_normal((3, 4)) * 0.3}


def _torch_model(torch, p):
    conv = torch.nn.Conv2d(2, 3, 3, padding=1, bias=False, dtype=torch.float64)
    bn = torch.nn.BatchNorm2d(3, dtype=torch.float64)
    fc = torch.nn.Parameter(torch.tensor(p["fc"]))
    with torch.no_grad():
        conv.weight.copy_(torch.tensor(p["w"]))
        bn.weight.copy_(torch.tensor(p["g"]))
        bn.bias.copy_(torch.tensor(p["b"]))

    def forward(x):
        return torch.relu(bn(conv(x))).sum(dim=(2, 3)) @ fc
    return conv, bn, fc, forward


def test_running_statistics_and_training_match_torch_batchnorm2d():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    p = _params(rng)
    batches = [(rng.standard_normal((6, 2, 5, 5)), rng.standard_normal((6, 4)))
               for _ in range(5)]
    step = train_step(NET, "sgd:lr=0.05", fn="loss")
    params, state = dict(p), step.init(p)
    conv, bn, fc, forward = _torch_model(torch, p)
    opt = torch.optim.SGD([conv.weight, bn.weight, bn.bias, fc], lr=0.05)
    bn.train()
    for x, t in batches:
        params, state, metrics = step(params, state, {"x": x, "t": t})
        opt.zero_grad()
        loss = torch.mean((forward(torch.tensor(x)) - torch.tensor(t)) ** 2)
        loss.backward()
        opt.step()
        np.testing.assert_allclose(metrics["loss"], loss.item(), rtol=1e-12)
    np.testing.assert_allclose(state["mean"], bn.running_mean.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(state["var"], bn.running_var.numpy(), rtol=1e-12)
    np.testing.assert_allclose(params["w"], conv.weight.detach().numpy(), rtol=1e-10,
                               atol=1e-13)
    np.testing.assert_allclose(params["g"], bn.weight.detach().numpy(), rtol=1e-10)
    assert int(state["step"]) == 5
    # evaluation normalizes with the running statistics, as model.eval()
    bn.eval()
    x = rng.standard_normal((3, 2, 5, 5))
    want = forward(torch.tensor(x)).detach().numpy()
    got, new_mean, new_var = adc.function(NET, "net")(
        x, *(params[k] for k in ("w", "g", "b", "fc")), state["mean"], state["var"])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(new_mean, state["mean"])     # evaluation leaves them
    np.testing.assert_array_equal(new_var, state["var"])


def test_gradients_do_not_flow_through_the_state_update():
    rng = np.random.default_rng(1)
    p = _params(rng)
    x, t = rng.standard_normal((4, 2, 5, 5)), rng.standard_normal((4, 4))
    mean, var = np.zeros(3), np.ones(3)
    g = adc.grad(NET, "loss", wrt="w", has_aux=True)
    (dw, (m1, v1)) = g(x, t, p["w"], p["g"], p["b"], p["fc"], mean, var)
    # the state results differ from the inputs, yet the gradient is batchnorm's alone
    assert not np.allclose(m1, mean)
    src = NET.replace("h, mean, var = batchnorm_running(conv2d(x, w, padding=1), g, b, "
                      "mean, var)", "h = batchnorm(conv2d(x, w, padding=1), g, b)")
    plain = adc.grad(src, "loss", wrt="w", has_aux=True)(x, t, p["w"], p["g"], p["b"],
                                                          p["fc"], mean, var)[0]
    np.testing.assert_allclose(dw, plain, rtol=1e-12, atol=1e-14)
    with pytest.raises(AdcError, match="pass has_aux=True"):
        adc.grad(NET, "loss", wrt="w")


def test_state_is_never_differentiated():
    with pytest.raises(AdcError, match="'mean': it is a state input") as info:
        adc.grad(NET, "loss", wrt=("w", "mean"), has_aux=True)
    assert info.value.loc.line == 8


@pytest.mark.parametrize("policy", ["sqrt", "min-memory", "revolve:2", "budget:20KiB"])
def test_steps_with_state_and_dropout_are_bit_identical_under_remat(policy):
    src = NET.replace("sum(relu(h), axis=[2, 3]) @ fc", "sum(dropout(relu(h), 0.3), "
                      "axis=[2, 3]) @ fc")
    rng = np.random.default_rng(2)
    p = _params(rng)
    data = [{"x": rng.standard_normal((4, 2, 5, 5)), "t": rng.standard_normal((4, 4))}
            for _ in range(3)]

    def run(remat):
        step = train_step(src, "adam:lr=0.01", fn="loss", remat=remat, seed=5,
                          dims={"N": 4})
        params, state = dict(p), step.init(p)
        for batch in data:
            params, state, _ = step(params, state, batch)
        return params, state
    want, got = run(None), run(policy)
    for k in want[0]:
        np.testing.assert_array_equal(got[0][k], want[0][k])
    for k in want[1]:
        np.testing.assert_array_equal(got[1][k], want[1][k])


CLI_NET = """
def f(x: f32[N, C], y: f32[N], param w: f32[C], param g: f32[C], param b: f32[C],
      state m: f32[C], state v: f32[C] = 1) -> f32 {
    h, m, v = batchnorm_running(x, g, b, m, v, axis=1)
    return mean((dropout(h, 0.2) @ w - y) ** 2)
}
"""


def _adc(*args):
    return subprocess.run([sys.executable, "-m", "adcompiler", *map(str, args)],
                          capture_output=True, text=True)


def test_train_saves_checkpoints_and_resumes_state_bit_identically(tmp_path):
    prog, data = tmp_path / "f.tdsl", tmp_path / "d.npz"
    prog.write_text(CLI_NET)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 4)) * 3 + 1).astype(np.float32)
    np.savez(data, x=x, y=x @ np.arange(4, dtype=np.float32))
    common = [prog, "--data", data, "--batch", 16, "--optimizer", "sgd:lr=0.01", "--seed", 3,
              "--progress", "off"]
    full, part, resumed = tmp_path / "full.npz", tmp_path / "ck.npz", tmp_path / "res.npz"
    assert _adc("train", *common, "--steps", 8, "--save", full).returncode == 0
    assert _adc("train", *common, "--steps", 4, "--checkpoint", part, "--every", 4
                ).returncode == 0
    r = _adc("train", *common, "--steps", 8, "--resume", part, "--save", resumed)
    assert r.returncode == 0, r.stderr
    a, b = np.load(full), np.load(resumed)
    assert sorted(a.files) == ["b", "g", "m", "v", "w"]
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["m"], 0)                       # the steps moved the state
    # evaluation reads the saved state: adc run --mode forward with the saved file
    out = tmp_path / "out.npz"
    np.savez(tmp_path / "in.npz", x=x[:8], y=x[:8, 0])
    r = _adc("run", prog, "--mode", "forward", "--inputs", tmp_path / "in.npz", "--inputs",
             full, "--out", out)
    assert r.returncode == 0, r.stderr
    got = np.load(out)
    np.testing.assert_array_equal(got["state_m"], a["m"])      # evaluation keeps the state
    # the state given to --wrt is refused, located
    r = _adc("train", *common, "--steps", 1, "--wrt", "w,m")
    assert r.returncode == 1 and "error: " in r.stderr and "state input" in r.stderr


GROUPED = """
group Conv { w: f64[3, 2, 3, 3] }
group Norm { g: f64[3], b: f64[3] }

def net(x: f64[N, 2, 5, 5], param conv: Conv, param bn: Norm, param fc: f64[3, 4],
        state mean: f64[3], state var: f64[3] = 1) -> f64[N, 4] {
    h, mean, var = batchnorm_running(conv2d(x, conv.w, padding=1), bn.g, bn.b, mean, var)
    return sum(relu(h), axis=[2, 3]) @ fc
}

def loss(x: f64[N, 2, 5, 5], t: f64[N, 4], param conv: Conv, param bn: Norm,
         param fc: f64[3, 4], state mean: f64[3], state var: f64[3] = 1) -> f64 {
    return mean((net(x, conv, bn, fc, mean, var) - t) ** 2)
}
"""


def test_a_call_passes_groups_and_rebinds_state():
    """A function with group and state inputs: the call's arguments are matched by the
    declared inputs (a group is one), and the names passed for the state get its update."""
    rng = np.random.default_rng(3)
    p, x, t = _params(rng), rng.standard_normal((4, 2, 5, 5)), rng.standard_normal((4, 4))
    state = {"mean": 0.1 * rng.standard_normal(3), "var": 1 + 0.1 * rng.random(3)}
    flat = adc.load(NET)
    (want, *want_state), want_g = adc.value_and_grad(flat, "loss", has_aux=True)(
        x=x, t=t, **p, **state)
    grouped = adc.load(GROUPED)
    inputs = {"conv.w": p["w"], "bn.g": p["g"], "bn.b": p["b"], "fc": p["fc"]}
    (got, *got_state), got_g = adc.value_and_grad(grouped, "loss", has_aux=True)(
        x=x, t=t, **inputs, **state)
    assert got == want
    for a, b in zip(got_state + list(got_g), want_state + list(want_g)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("src, at, msg", [
    ("def f(x: f32[3], state s: f32[3]) -> f32 {\n    return sum(x)\n}\n"
     "def g(x: f32[3], state s: f32[3]) -> f32 {\n    return f(x, s + 1)\n}\n", (5, 17),
     "the argument of state input 's' of 'f' must be a name"),
    ("def f(x: f32[3], state s: f32[3]) -> f32 {\n    s = sum(x)\n    return sum(x)\n}\n",
     (2, 5), "state 's' is f32\\[3\\], but the function binds it to f32\\[\\]"),
    ("def f(x: f32[3], state s: f32[3]) -> f32 {\n    return sum(x)\n}\n"
     "def g(x: f32[3], state s: f32[3]) -> f32 {\n    for i in range(2) { x = x + f(x, s) }\n"
     "    return sum(x)\n}\n", (5, 33), "cannot be called in a loop body"),
    ("def f(x: f32[N, C], g: f32[C], b: f32[C], m: f32[C], v: f32[C]) -> f32 {\n"
     "    y, m, v = batchnorm_running(x, g, b, m, v, momentum=1.5)\n    return sum(y)\n}\n",
     (2, 15), "momentum must be in \\[0, 1\\]"),
])
def test_located_errors(src, at, msg):
    with pytest.raises(AdcError, match=msg) as info:
        adc.load(src)
    assert (info.value.loc.line, info.value.loc.col) == at


@pytest.mark.parametrize("training", [True, False])
def test_batchnorm_running_gradients_against_central_differences(training):
    # y's gradients in either mode, against central differences in float64 (the reverse
    # pass itself always trains, so `derive` applies the rule in the op's own mode)
    from adcompiler.ir.builder import Builder
    from adcompiler.ir.core import Block, Function, Module
    from adcompiler.ir.types import TensorType
    from adcompiler.passes.reverse import Reverse
    from gradcheck import run
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((4, 3, 2)), 1 + rng.standard_normal(3), rng.standard_normal(3),
            rng.standard_normal(3), 0.5 + rng.random(3), rng.standard_normal((4, 3, 2))]
    body = Block([TensorType("f64", a.shape) for a in args], [f"a{k}" for k in range(6)])
    b = Builder(body)
    y, _, _ = b.emit("batchnorm_running", *body.args[:5], axis=1, training=training)
    b.ret([b.emit("sum", b.emit("mul", y, body.args[5]))])
    m = Module({"f": Function("f", body, [TensorType("f64", ())])})
    inputs = {f"a{k}": a for k, a in enumerate(args)}
    adj = Reverse(wrt=("a0", "a1", "a2"), fn="f").derive(m, "f")
    got = run(adj, "f_grad", inputs)[1:]
    for k, g in enumerate(got):
        want = np.zeros_like(args[k])
        for i in np.ndindex(args[k].shape):
            plus, minus = dict(inputs), dict(inputs)
            plus[f"a{k}"], minus[f"a{k}"] = args[k].copy(), args[k].copy()
            plus[f"a{k}"][i] += 1e-6
            minus[f"a{k}"][i] -= 1e-6
            want[i] = (run(m, "f", plus)[0] - run(m, "f", minus)[0]) / 2e-6
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8, err_msg=f"a{k}")
