"""Dimensions that are integer polynomials in symbols (``T-1``, ``B+3``, ``3*B-3``): their
arithmetic and canonical form, IR text, and slices of symbolic axes through the whole tool
(reverse, jvp, hvp against PyTorch and finite differences, the run-time length check, remat's
exact memory prediction)."""
import json

import numpy as np
import pytest

from adcompiler import cli
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import format_type, print_module
from adcompiler.ir.types import (TensorType, broadcast_shapes, dim_add, dim_div, dim_mul,
                                 dim_sub, dim_symbols, num_elements, parse_dim, resolve_dim,
                                 substitute_dim)
from adcompiler.diagnostics import ShapeError

PROGRAM = ("def f(x: f32[T, 3], param w: f32[3]) -> f32 "
           "{ d = x[1:] - x[:-1]; return sum((d * w) ** 2) }\n")


# ---- arithmetic -----------------------------------------------------------------------

def test_canonical_forms():
    assert dim_add("T", -1) == "T-1"
    assert dim_add(3, "B") == "B+3"
    assert dim_mul(3, dim_sub("B", 1)) == "3*B-3"
    assert dim_mul("T", 2, "B") == "2*B*T"
    assert dim_mul("B", "B") == "B*B"
    assert dim_add(dim_mul("B", "T"), "B", "T", 1) == "B*T+B+T+1"
    assert dim_mul(dim_add("B", 1), dim_add("B", 1)) == "B*B+2*B+1"
    assert dim_sub(1, "T") == "-T+1"
    assert dim_sub("T", "T") == 0 and isinstance(dim_sub("T", "T"), int)
    assert dim_add(dim_sub("T", 1), 1) == "T"
    assert dim_add(2, 3) == 5 and dim_mul(2, 3) == 6
    # however a dim is written, equal dims are equal strings
    assert parse_dim(" 1 +T*2- 4 ") == "2*T-3" == dim_sub(dim_mul(2, "T"), 3)
    assert parse_dim("T*B*2") == "2*B*T"
    assert parse_dim("7") == 7 and parse_dim("T-T") == 0
    for bad in ("", "T-", "2T", "T**2", "(T)", "T+-1"):
        with pytest.raises(ValueError):
            parse_dim(bad)


def test_exact_division():
    assert dim_div("3*B-3", 3) == "B-1"
    assert dim_div("2*B*T", "B") == "2*T"
    assert dim_div("B*T-B", "T-1") == "B"
    assert dim_div("T*T-1", "T+1") == "T-1"
    assert dim_div("2*B*T+2*B", "2*T+2") == "B"
    assert dim_div(12, 4) == 3
    assert dim_div("T-1", 2) is None          # not an integer polynomial
    assert dim_div("T*T+1", "T+1") is None    # a remainder
    assert dim_div("B", "T") is None
    assert dim_div("B", 0) is None


def test_evaluation_symbols_and_elements():
    env = {"B": 4, "T": 7}
    assert resolve_dim("3*B-3", env) == 9
    assert resolve_dim("B*T-B+2", env) == 26
    assert resolve_dim("-T+10", env) == 3
    with pytest.raises(KeyError):
        resolve_dim("T-1", {})
    assert dim_symbols("B*T-T+1") == ["B", "T"]
    assert num_elements(("T-1", 3)) == "3*T-3"
    assert num_elements(("T-1", "T+1")) == "T*T-1"
    assert substitute_dim("B*T-B", {"B": 3}) == "3*T-3"
    assert substitute_dim("T-1", {"T": 5}) == 4
    assert substitute_dim("T", {"T": "S+1"}) == "S+1"


def test_broadcasting_matches_equal_dims_only():
    assert broadcast_shapes(("T-1", 3), (1, 3)) == ("T-1", 3)
    assert broadcast_shapes((dim_add("T", -1), 3), (parse_dim("-1+T"), 1)) == ("T-1", 3)
    with pytest.raises(ShapeError):
        broadcast_shapes(("T-1", 3), ("T", 3))


# ---- IR text --------------------------------------------------------------------------

def test_ir_text_round_trip_with_polynomial_dims():
    text = ('func @f(%x: f32[T-1, 4], %y: f32[3*B*T-3, B+2]) -> (f32[T-1, 4]) {\n'
            '  %z = broadcast_to(%x) {shape = ("T-1", 4)} : f32[T-1, 4]\n'
            '  return(%z)\n'
            '}\n')
    m = parse_module(text)
    f = m.functions["f"]
    assert f.args[0].type == TensorType("f32", ("T-1", 4))
    assert f.args[1].type.shape == ("3*B*T-3", "B+2")
    assert print_module(m) == text
    # non-canonical spellings read back canonical; a non-canonical string does not print
    assert parse_module(text.replace("f32[T-1, 4]) ->", "f32[-1+T, 4]) ->")) \
        .functions["f"].args[0].type.shape == ("T-1", 4)
    with pytest.raises(ValueError, match="canonical"):
        format_type(TensorType("f32", ("1+T",)))


# ---- the program through the command line ------------------------------------------

def _inputs(tmp_path, t=6, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, 3))
    w = rng.standard_normal(3)
    tx, tw = rng.standard_normal((t, 3)), rng.standard_normal(3)
    src = tmp_path / "diff.tdsl"
    src.write_text(PROGRAM)
    np.savez(tmp_path / "in.npz", x=x, w=w)
    np.savez(tmp_path / "tan.npz", x=tx, w=tw)
    return src, x, w, tx, tw


def _f(x, w):
    d = x[1:] - x[:-1]
    return np.sum((d * w) ** 2)


def _run(tmp_path, src, mode, capsys):
    out = tmp_path / f"{mode}.npz"
    args = ["run", str(src), "--mode", mode, "--dtype", "f64", "--wrt", "x,w",
            "--inputs", str(tmp_path / "in.npz"), "--out", str(out)]
    if mode != "reverse":
        args += ["--tangents", str(tmp_path / "tan.npz")]
    code = cli.main(args)
    assert code == 0, capsys.readouterr().err
    return dict(np.load(out))


def test_differences_along_a_symbolic_axis_against_torch(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    src, x, w, tx, tw = _inputs(tmp_path)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)

    def f(x, w):
        d = x[1:] - x[:-1]
        return ((d * w) ** 2).sum()

    gx, gw = torch.autograd.grad(f(xt, wt), (xt, wt))
    _, jv = torch.func.jvp(f, (xt.detach(), wt.detach()), (torch.tensor(tx), torch.tensor(tw)))
    _, (hx, hw) = torch.autograd.functional.hvp(f, (xt.detach(), wt.detach()),
                                                (torch.tensor(tx), torch.tensor(tw)))
    rev = _run(tmp_path, src, "reverse", capsys)
    np.testing.assert_allclose(rev["out"], _f(x, w), rtol=1e-12)
    np.testing.assert_allclose(rev["grad_x"], gx.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rev["grad_w"], gw.numpy(), rtol=1e-10, atol=1e-12)
    jvp = _run(tmp_path, src, "jvp", capsys)
    np.testing.assert_allclose(jvp["tangent_out"], jv.numpy(), rtol=1e-10)
    hvp = _run(tmp_path, src, "hvp", capsys)
    np.testing.assert_allclose(hvp["hvp_x"], hx.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hvp["hvp_w"], hw.numpy(), rtol=1e-10, atol=1e-12)


def test_differences_along_a_symbolic_axis_against_finite_differences(tmp_path, capsys):
    src, x, w, tx, tw = _inputs(tmp_path, t=4, seed=5)
    eps = 1e-6

    def grad(x, w):   # central differences of _f
        gx, gw = np.zeros_like(x), np.zeros_like(w)
        for g, a, name in ((gx, x, "x"), (gw, w, "w")):
            for k in np.ndindex(a.shape):
                up, dn = a.copy(), a.copy()
                up[k] += eps
                dn[k] -= eps
                args_up = (up, w) if name == "x" else (x, up)
                args_dn = (dn, w) if name == "x" else (x, dn)
                g[k] = (_f(*args_up) - _f(*args_dn)) / (2 * eps)
        return gx, gw

    gx, gw = grad(x, w)
    rev = _run(tmp_path, src, "reverse", capsys)
    np.testing.assert_allclose(rev["grad_x"], gx, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rev["grad_w"], gw, rtol=1e-6, atol=1e-7)
    jvp = _run(tmp_path, src, "jvp", capsys)
    fd = (_f(x + eps * tx, w + eps * tw) - _f(x - eps * tx, w - eps * tw)) / (2 * eps)
    np.testing.assert_allclose(jvp["tangent_out"], fd, rtol=1e-6)
    hvp = _run(tmp_path, src, "hvp", capsys)
    ux, uw = grad(x + 1e-4 * tx, w + 1e-4 * tw)
    lx, lw = grad(x - 1e-4 * tx, w - 1e-4 * tw)
    np.testing.assert_allclose(hvp["hvp_x"], (ux - lx) / 2e-4, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(hvp["hvp_w"], (uw - lw) / 2e-4, rtol=1e-4, atol=1e-5)


def test_too_short_axis_is_a_clear_run_error(tmp_path, capsys):
    src = tmp_path / "diff.tdsl"
    src.write_text(PROGRAM)
    np.savez(tmp_path / "short.npz", x=np.zeros((0, 3), "f4"), w=np.ones(3, "f4"))
    code = cli.main(["run", str(src), "--inputs", str(tmp_path / "short.npz")])
    err = capsys.readouterr().err
    assert code == 1
    assert "the slice [1:] of axis 0 needs T >= 1, but T = 0" in err
    # T = 1 is long enough: empty differences, a zero loss
    np.savez(tmp_path / "one.npz", x=np.ones((1, 3), "f4"), w=np.ones(3, "f4"))
    out = tmp_path / "one_out.npz"
    assert cli.main(["run", str(src), "--inputs", str(tmp_path / "one.npz"),
                     "--wrt", "x,w", "--out", str(out)]) == 0
    res = np.load(out)
    assert res["out"] == 0.0 and np.array_equal(res["grad_x"], np.zeros((1, 3), "f4"))


def test_concat_of_a_symbolic_and_a_constant_axis(tmp_path, capsys):
    src = tmp_path / "pad.tdsl"
    src.write_text("def f(x: f32[T, 2], p: f32[3, 2]) -> f32 "
                   "{ y = concat([x, p], axis=0); return sum(y[2:] * y[:-2]) }\n")
    rng = np.random.default_rng(0)
    x, p = rng.standard_normal((4, 2)), rng.standard_normal((3, 2))
    np.savez(tmp_path / "in.npz", x=x, p=p)
    out = tmp_path / "out.npz"
    assert cli.main(["compile", str(src), "--mode", "forward"]) == 0
    assert "f32[T+3, 2]" in capsys.readouterr().out
    assert cli.main(["run", str(src), "--dtype", "f64", "--inputs", str(tmp_path / "in.npz"),
                     "--wrt", "x,p", "--out", str(out)]) == 0
    res = np.load(out)
    y = np.concatenate([x, p])
    np.testing.assert_allclose(res["out"], np.sum(y[2:] * y[:-2]), rtol=1e-12)
    g = np.zeros_like(y)
    g[2:] += y[:-2]
    g[:-2] += y[2:]
    np.testing.assert_allclose(res["grad_x"], g[:4], rtol=1e-12)
    np.testing.assert_allclose(res["grad_p"], g[4:], rtol=1e-12)


@pytest.mark.parametrize("policy", ["sqrt", "min-memory", "budget:1KiB"])
def test_remat_memory_prediction_is_exact(tmp_path, capsys, policy):
    src, *_ = _inputs(tmp_path, t=9)
    stats = tmp_path / "stats.json"
    code = cli.main(["run", str(src), "--wrt", "x,w", "--inputs", str(tmp_path / "in.npz"),
                     "--remat", policy, "--stats-json", str(stats)])
    assert code == 0, capsys.readouterr().err
    s = json.loads(stats.read_text())
    assert s["peak_bytes_measured"] == s["peak_bytes_predicted"] > 0


def test_emitted_python_checks_the_axis_length(tmp_path, capsys):
    import subprocess
    import sys
    src, x, w, *_ = _inputs(tmp_path, t=5)
    py = tmp_path / "diff.py"
    assert cli.main(["compile", str(src), "--emit", "python", "-o", str(py)]) == 0
    out = tmp_path / "out.npz"
    ok = subprocess.run([sys.executable, str(py), str(tmp_path / "in.npz"), str(out)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_allclose(np.load(out)["out"], _f(x, w), rtol=1e-5)
    np.savez(tmp_path / "short.npz", x=np.zeros((0, 3), "f4"), w=np.ones(3, "f4"))
    bad = subprocess.run([sys.executable, str(py), str(tmp_path / "short.npz")],
                         capture_output=True, text=True)
    assert bad.returncode != 0
    assert "the slice [1:] of axis 0 needs T >= 1, but T = 0" in bad.stderr


def test_a_call_binds_a_symbol_to_a_polynomial_dim(tmp_path, capsys):
    src = tmp_path / "call.tdsl"
    src.write_text("def g(y: f32[S, 3]) -> f32 { return sum(y[:-1] * y[1:]) }\n"
                   "def f(x: f32[T, 3], param w: f32[3]) -> f32 { return g(x[1:] * w) }\n")
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((6, 3)), rng.standard_normal(3)
    np.savez(tmp_path / "in.npz", x=x, w=w)
    assert cli.main(["compile", str(src), "--mode", "forward"]) == 0
    assert "(%y: f32[T-1, 3])" in capsys.readouterr().out
    out = tmp_path / "out.npz"
    assert cli.main(["run", str(src), "--dtype", "f64", "--inputs", str(tmp_path / "in.npz"),
                     "--wrt", "x,w", "--out", str(out)]) == 0
    res = np.load(out)
    y = x[1:] * w
    np.testing.assert_allclose(res["out"], np.sum(y[:-1] * y[1:]), rtol=1e-12)
    gy = np.zeros_like(y)
    gy[:-1] += y[1:]
    gy[1:] += y[:-1]
    gx = np.zeros_like(x)
    gx[1:] = gy * w
    np.testing.assert_allclose(res["grad_x"], gx, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res["grad_w"], np.sum(gy * x[1:], axis=0), rtol=1e-12)
