"""Random ops (tdsl.md section 9): the Philox4x32-10 generator against Random123's published
known answers, the distributions, dropout's statistics and derivatives, keys per loop
iteration and call, bits that every remat policy recomputes the same, NumPy against the
CuPy stand-in, evaluation against training mode, seeds, the emitted Python, located errors."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.diagnostics import AdcError
from adc_runtime import random as philox
from gradcheck import check_grads

# Random123 tests/kat_vectors, "philox4x32 10": counter (4 words), key (2 words), result
KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


@pytest.mark.parametrize("counter, key, want", KAT)
def test_philox_known_answers(counter, key, want):
    words = philox.philox(*(np.array([c], dtype=np.uint64) for c in counter), *key, np)
    assert [int(w[0]) for w in words] == want


def test_philox_is_vectorized_per_counter():
    c = np.array([0, 0xFFFFFFFF, 0x243F6A88], dtype=np.uint64)
    out = philox.philox(c, c, c, c, 0, 0, np)
    one = philox.philox(*(np.array([0xFFFFFFFF], dtype=np.uint64),) * 4, 0, 0, np)
    assert [int(w[1]) for w in out] == [int(w[0]) for w in one]
    assert int(out[0][0]) == KAT[0][2][0]


KEY = np.array(philox.seed_key(7), dtype=np.int64)


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_uniform_in_unit_interval_with_its_moments(dtype):
    u = philox.uniform(np, KEY, 11, (200, 100), dtype)
    assert u.dtype == np.dtype({"f16": "float16", "f32": "float32", "f64": "float64"}[dtype])
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.astype(np.float64).mean() - 0.5) < 0.01
    assert abs(u.astype(np.float64).var() - 1 / 12) < 0.005
    again = philox.uniform(np, KEY, 11, (20000,), dtype)
    np.testing.assert_array_equal(again, u.reshape(-1))      # element e: the same bits
    assert not np.array_equal(philox.uniform(np, KEY, 12, (20000,), dtype), again)


def test_normal_moments_and_prefix_property():
    z = philox.normal(np, KEY, 3, (100001,), "f64")
    assert abs(z.mean()) < 0.01 and abs(z.var() - 1) < 0.02
    assert abs(np.mean(z ** 4) - 3) < 0.1                        # the kurtosis of N(0, 1)
    np.testing.assert_array_equal(philox.normal(np, KEY, 3, (7,), "f64"), z[:7])


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_bernoulli_rate(p):
    m = philox.bernoulli_mask(np, KEY, 5, (50000,), p)
    assert abs(m.mean() - p) < 0.01
    if p in (0.0, 1.0):
        assert m.all() == (p == 1.0) and m.any() == (p == 1.0)


def test_fold_gives_distinct_keys():
    keys = {tuple(philox.fold(np, KEY, i, 9).tolist()) for i in range(100)}
    assert len(keys) == 100
    assert tuple(philox.fold(np, KEY, 3, 10).tolist()) not in keys
    assert all(0 <= w < 2 ** 32 for k in keys for w in k)


DROP = """
def f(param x: f32[N, M]) -> f32[N, M] {
    return dropout(x, 0.25)
}
"""


def test_dropout_statistics_in_training_and_identity_in_evaluation():
    x = np.full((400, 250), 2.0, np.float32)
    y = adc.function(DROP, training=True)(x)
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_array_equal(y[kept], np.float32(2.0) * np.float32(1 / 0.75))
    assert abs(y.mean() - 2.0) < 0.03                          # E[y] = x
    assert abs(y.var() - 4 * 0.25 / 0.75) < 0.05               # x^2 p / (1 - p)
    np.testing.assert_array_equal(adc.function(DROP)(x), x)    # evaluation: the identity


def test_dropout_adjoint_reuses_the_forward_mask():
    x = np.random.default_rng(0).standard_normal((30, 20)).astype(np.float32)
    y = adc.function(DROP, training=True, seed=4)(x)
    vjp = adc.vjp(DROP, seed=4)
    value, pullback = vjp(x)
    np.testing.assert_array_equal(value, y)
    (g,) = pullback(np.ones_like(x))
    np.testing.assert_array_equal(g != 0, y != 0)
    np.testing.assert_array_equal(g[g != 0], np.float32(1 / 0.75))


def test_dropout_derivatives_against_central_differences():
    x = np.random.default_rng(1).standard_normal((4, 5))
    key = np.array([3, 4], dtype=np.int64)
    attrs = {"p": 0.4, "site": 17, "training": True}
    check_grads("dropout", [x, key], attrs, wrt=[0])
    value, tangent = adc.jvp(DROP.replace("f32", "f64"), seed=2)(x, np.ones_like(x))
    np.testing.assert_array_equal(tangent, adc.function(DROP.replace("f32", "f64"),
                                                         training=True, seed=2)(np.ones_like(x)))


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (3, 0)])
def test_dropout_edge_shapes(shape):
    x = np.ones(shape, np.float32)
    y = adc.function(DROP, training=True)(x)
    assert y.shape == shape
    (g,) = adc.grad(DROP.replace("-> f32[N, M]", "-> f32").replace(
        "return dropout(x, 0.25)", "return sum(dropout(x, 0.25))"))(x)
    assert g.shape == shape


def test_dropout_p_zero_keeps_everything():
    src = DROP.replace("0.25", "0.0")
    x = np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_array_equal(adc.function(src, training=True)(x), x)


LOOP = """
def noise(x: f32[N]) -> f32[N] {
    return x + normal([N])
}

def f(param x: f32[8], w: f32[8]) -> f32 {
    for i in range(4) {
        x = tanh(dropout(x * w, 0.2) + 0.1 * uniform([8]))
    }
    y = noise(x) * noise(x)
    return sum(y * bernoulli(0.7, [8]))
}
"""


def test_each_iteration_and_each_call_draws_its_own_bits():
    m = adc.load(LOOP)
    site_ops = [op for op in m["f"].walk() if "site" in op.attrs]
    assert len({op.attrs["site"] for op in site_ops}) == len(site_ops)
    src = """
def f(x: f32[4]) -> f32[3, 4] {
    ys = zeros([3, 4])
    for i in range(3) { ys = concat([ys[1:], reshape(uniform([4]), [1, 4])]) }
    return ys
}
"""
    ys = adc.function(src)(np.zeros(4, np.float32))
    assert len({tuple(r) for r in ys.tolist()}) == 3


@pytest.mark.parametrize("policy", ["sqrt", "min-memory", "revolve:2", "budget:2KiB"])
def test_every_remat_policy_recomputes_the_same_bits(policy):
    rng = np.random.default_rng(3)
    x, w = (rng.standard_normal(8).astype(np.float32) for _ in range(2))
    want = adc.value_and_grad(LOOP, wrt="x", seed=11)(x=x, w=w)
    got = adc.value_and_grad(LOOP, wrt="x", seed=11, remat=policy)(x=x, w=w)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert np.any(want[1] != 0)


def test_seed_keyword_and_per_call_override():
    x, w = np.ones(8, np.float32), np.ones(8, np.float32)
    g = adc.grad(LOOP, wrt="x", seed=1)
    a, b = g(x=x, w=w), g(x=x, w=w, seed=2)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(g(x=x, w=w), a)
    np.testing.assert_array_equal(adc.grad(LOOP, wrt="x", seed=2)(x=x, w=w), b)
    with pytest.raises(ValueError, match="seed"):
        g(x=x, w=w, seed=-1)


def test_numpy_and_the_cupy_stand_in_draw_the_same_bits():
    from cupy_standin import fake_cupy
    from adc_runtime import cuda as backend
    from adc_runtime.executor import run_function
    from adcompiler.cli.compile import compile_program
    from adcompiler.emit.cuda import ensure_fused, kernel_specs
    import tempfile, os
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "loop.tdsl")
        with open(path, "w") as f:
            f.write(LOOP)
        comp = compile_program(path, "reverse")
    module = ensure_fused(comp.module)
    specs = kernel_specs(module)
    cp = fake_cupy({s.name: op for op, s in specs.items()}, [])
    rng = np.random.default_rng(4)
    data = {"x": rng.standard_normal(8).astype(np.float32),
            "w": rng.standard_normal(8).astype(np.float32),
            "rng_key": np.array(philox.seed_key(5), dtype=np.int64)}
    want, _ = run_function(comp.module, comp.run_name, data)
    got, _ = backend.run_function(module, comp.run_name, data, specs, cupy=cp)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), b)


def test_adc_run_seed_and_modes(tmp_path):
    path = tmp_path / "loop.tdsl"
    path.write_text(LOOP)

    def run(*args):
        out = tmp_path / "out.npz"
        subprocess.run([sys.executable, "-m", "adcompiler", "run", str(path), "--out",
                        str(out), *args], check=True, capture_output=True)
        return dict(np.load(out))
    a, b, c = run("--seed", "1"), run("--seed", "1", "--remat", "sqrt"), run("--seed", "2")
    np.testing.assert_array_equal(a["grad_x"], b["grad_x"])
    assert a["out"] != c["out"]
    fwd = run("--mode", "forward", "--seed", "1")
    train = run("--mode", "forward", "--seed", "1", "--train-mode")
    assert fwd["out"] != train["out"]


def test_emitted_python_draws_the_same_bits(tmp_path):
    g = adc.grad(LOOP, wrt="x")
    x, w = np.ones(8, np.float32), np.full(8, 0.5, np.float32)
    want = g(x=x, w=w)
    script = tmp_path / "f_grad.py"
    script.write_text(adc.emit_python(g.module, "f_grad"))
    np.savez(tmp_path / "in.npz", x=x, w=w)          # no key: the key of seed 0
    subprocess.run([sys.executable, str(script), str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz")], check=True, capture_output=True)
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(got[got.files[1]], want)


@pytest.mark.parametrize("src, at, msg", [
    ("def f(x: f32[3]) -> f32[3] {\n    return dropout(x, 1.0)\n}\n", (2, 12),
     r"dropout: p must be a probability in \[0, 1\), got 1.0"),
    ("def f(x: f32[3]) -> f32[3] {\n    return dropout(x, -0.1)\n}\n", (2, 12),
     r"dropout: p must be a probability in \[0, 1\)"),
    ("def f(x: f32[3]) -> f32[3] {\n    return x * bernoulli(1.5, [3])\n}\n", (2, 16),
     r"bernoulli: p must be a probability in \[0, 1\]"),
    ("def f(x: f32[3]) -> f32[3] {\n    return x + uniform([3], dtype=i64)\n}\n", (2, 16),
     r"uniform draws floats"),
    ("def f(x: f32[3]) -> f32[3] {\n    return dropout(x, 0.5, site=3)\n}\n", (2, 28),
     r"dropout: 'site' is not an argument of a program"),
    ("def f(x: f32[3], rng_key: i64[2]) -> f32[3] {\n    return x + uniform([3])\n}\n",
     (1, 18), r"'rng_key' is the name of the key input"),
])
def test_located_errors(src, at, msg):
    with pytest.raises(AdcError, match=msg) as info:
        adc.load(src)
    assert (info.value.loc.line, info.value.loc.col) == at


def test_check_grads_and_adc_check_take_differences_in_training_mode(tmp_path):
    src = ("def f(param x: f64[5]) -> f64 {\n"
           "    return sum(tanh(dropout(x, 0.4)) * normal([5], dtype=f64))\n}\n")
    errors = adc.check_grads(src, {"x": np.linspace(-1, 1, 5)}, order=2)
    assert max(errors.values()) < 1e-6
    path = tmp_path / "drop.tdsl"
    path.write_text(src)
    r = subprocess.run([sys.executable, "-m", "adcompiler", "check", str(path), "--seed", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "gradient check passed" in r.stdout + r.stderr
