"""The Python and DOT emitters on IR built directly (loops, symbolic dims, calls, adjoints)."""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adcompiler.diagnostics import Loc
from adcompiler.emit.dot import emit_dot
from adcompiler.emit.python import emit_python
from adcompiler.ir.builder import Builder
from adcompiler.ir.core import Block, Function, Module
from adcompiler.ir.types import TensorType
from adcompiler.passes.reverse import Reverse
from adc_runtime.executor import run_function


def t(*shape, dtype="f64"):
    return TensorType(dtype, shape)


def scan_module(reverse=False):
    """c <- c * exp(x_i) + w over the rows x_i of xs (T rows), ys = c * x_i; L = sum(c) +
    sum(exp(ys)). Symbolic T, a captured w, a scanned input and stacked outputs."""
    body = Block([t("T", 2), t(2), t(2)], ["xs", "c0", "w"])
    b = Builder(body, Loc("scan.tdsl", 3, 5))
    xs, c0, w = body.args
    lb = Block([TensorType("i64"), t(2), t(2)], ["i", "c", "x"])
    _, c, x = lb.args
    with b.inside(lb), b.at(Loc("scan.tdsl", 5, 9)):
        cn = b.emit("add", b.emit("mul", c, b.emit("exp", x)), w)
        b.yield_([cn, b.emit("mul", cn, x)])
    loop = b.for_("T", lb, [c0], [xs], reverse=reverse)
    with b.at(Loc("scan.tdsl", 7, 5)):
        s = b.emit("add", b.emit("sum", loop.results[0]),
                   b.emit("sum", b.emit("exp", loop.results[1])))
        b.ret([s])
    fn = Function("f", body, [s.type], params={"xs", "c0", "w"})
    return Module({"f": fn})


INPUTS = {"xs": np.array([[0.1, -0.3], [0.2, 0.4], [-0.5, 0.05]]),
          "c0": np.array([0.7, -0.2]), "w": np.array([0.3, 0.1])}


def load_emitted(src: str):
    namespace = {"__name__": "emitted"}
    exec(compile(src, "<emitted>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("reverse", [False, True])
def test_python_matches_executor_on_a_scan_and_its_adjoint(reverse):
    m = Reverse(wrt=("xs", "c0", "w"), fn="f")(scan_module(reverse))
    src = emit_python(m, "f_grad")
    ns = load_emitted(src)
    want, _ = run_function(m, "f_grad", INPUTS)
    got = ns["f_grad"](*INPUTS.values())
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_python_is_readable():
    m = Reverse(wrt=("w",), fn="f")(scan_module())
    src = emit_python(m, "f_grad", sources={"scan.tdsl": "\n\n  L = f(xs)\n\n  c = c*exp(x)+w"})
    imports = [ln for ln in src.splitlines() if ln.startswith(("import", "from"))]
    assert imports == ["import numpy as np", "from adc_runtime.kernels import KERNELS as K"]
    assert "def f(xs, c0, w):" in src and "def f_grad(xs, c0, w):" in src
    assert "    T = xs.shape[0]" in src                        # symbolic dim from a shape
    assert "# scan.tdsl:5  c = c*exp(x)+w" in src              # provenance with source text
    assert re.search(r"for step\w* in range\(T\):", src)       # the forward loop
    assert re.search(r"for step\w* in range\(T - 1, -1, -1\):", src)  # the reverse loop
    assert re.search(r"= K\['exp'\]\(np, x\)", src)
    assert 'if __name__ == "__main__":' in src


def test_python_script_runs_on_an_npz(tmp_path):
    m = Reverse(wrt=("c0",), fn="f")(scan_module())
    prog = tmp_path / "prog.py"
    prog.write_text(emit_python(m, "f_grad", ["out", "grad_c0"]))
    np.savez(tmp_path / "in.npz", **INPUTS)
    proc = subprocess.run([sys.executable, str(prog), str(tmp_path / "in.npz"),
                           str(tmp_path / "out.npz")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "grad_c0: shape (2,) float64" in proc.stdout
    want, _ = run_function(m, "f_grad", INPUTS)
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["out"], want[0])
        np.testing.assert_array_equal(out["grad_c0"], want[1])


ROOT = Path(__file__).resolve().parent.parent


def test_python_script_reads_json_inputs_by_adc_runs_rules(tmp_path):
    """The README's JSON inputs run an emitted script as they run `adc run`; a bad file is a
    one-line error naming it, never NumPy's traceback."""
    prog = tmp_path / "prog.py"
    tiny = ROOT / "samples" / "backprop_tiny.tdsl"
    from adcompiler import cli
    assert cli.main(["compile", str(tiny), "--emit", "python", "-o", str(prog)]) == 0

    def script(*args):
        return subprocess.run([sys.executable, str(prog), *map(str, args)],
                              capture_output=True, text=True, timeout=120)
    proc = script(ROOT / "samples" / "backprop_tiny.json", tmp_path / "out.npz")
    assert proc.returncode == 0, proc.stderr
    assert "grad_W1: shape (2, 2) float32" in proc.stdout
    assert cli.main(["run", str(tiny), "--inputs", str(ROOT / "samples" / "backprop_tiny.json"),
                     "--out", str(tmp_path / "want.npz")]) == 0
    with np.load(tmp_path / "out.npz") as got, np.load(tmp_path / "want.npz") as want:
        assert sorted(got.files) == sorted(want.files)
        for k in want.files:
            assert got[k].dtype == want[k].dtype
            np.testing.assert_array_equal(got[k], want[k])
    (tmp_path / "syntax.json").write_text('{"x": [1, 2]\n "y": 1}')
    (tmp_path / "nan.json").write_text('{"x": [NaN, 1]}')
    (tmp_path / "extra.json").write_text('{"x": [1.5, 2], "y": 1, "W1": [[1, 2], [3, 4]], '
                                        '"b1": [0, 0], "v": [1, 1], "b3": 0, "z": 1}')
    (tmp_path / "text.npz").write_text("not a zip")
    np.save(tmp_path / "objects.npy", np.array([{}], dtype=object), allow_pickle=True)
    import zipfile
    with zipfile.ZipFile(tmp_path / "pickled.npz", "w") as z:
        z.write(tmp_path / "objects.npy", "x.npy")
    np.savez(tmp_path / "shape.npz", x=np.zeros(3, "f4"), y=np.float32(1),
             W1=np.zeros((2, 2), "f4"), b1=np.zeros(2, "f4"), v=np.zeros(2, "f4"),
             b3=np.float32(0))
    np.savez(tmp_path / "ints.npz", x=np.zeros(2, "i8"), y=np.float32(1),
             W1=np.zeros((2, 2), "f4"), b1=np.zeros(2, "f4"), v=np.zeros(2, "f4"),
             b3=np.float32(0))
    for name, message in [
            ("syntax.json", "syntax.json:2:2: invalid JSON: Expecting ',' delimiter"),
            ("nan.json", "nan.json: NaN is not a JSON number"),
            ("extra.json", "extra.json: unknown input 'z' (the inputs are x, y, W1, b1, v, b3)"),
            ("text.npz", "text.npz' is not an .npz file"),
            ("pickled.npz", "array 'x' holds Python objects (pickled data)"),
            ("shape.npz", "shape.npz: input 'x' is declared f32[2] but has shape (3,)"),
            ("ints.npz", "ints.npz: input 'x' is declared f32[2] but the data is int64"),
            ("missing.json", "missing.json' does not exist"), (".", "must end in .npz or .json")]:
        proc = script(tmp_path / name)
        assert proc.returncode == 1, (name, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, (name, proc.stderr)


def test_python_calls_and_unbindable_dims():
    """A callee becomes a Python function; a dim no input shows is passed in `dims`."""
    gbody = Block([t(2)], ["v"])
    gb = Builder(gbody)
    gb.ret([gb.emit("exp", gbody.args[0])])
    g = Function("g", gbody, [t(2)])
    body = Block([t(2)], ["x"])
    b = Builder(body)
    (y,) = b.call(g, [body.args[0]])
    z = b.emit("broadcast_to", y, shape=("N", 2))
    b.ret([b.emit("sum", z)])
    m = Module({"g": g, "f": Function("f", body, [t()])})
    src = emit_python(m, "f")
    assert "def f(x, dims=None):" in src and "N = dims['N']" in src
    ns = load_emitted(src)
    (got,) = ns["f"](np.array([0.0, 1.0]), dims={"N": 3})
    want, _ = run_function(m, "f", {"x": np.array([0.0, 1.0])}, dims={"N": 3})
    np.testing.assert_array_equal(got, want[0])


def test_python_avoids_name_clashes():
    """Rebound names get suffixes; a dim called K does not hide the kernel table."""
    body = Block([t("K", 2)], ["x"])
    b = Builder(body)
    h = body.args[0]
    for _ in range(3):
        h = b.create("exp", [h], names=["x"]).result
    b.ret([b.emit("sum", h)])
    m = Module({"f": Function("f", body, [t()])})
    src = emit_python(m, "f")
    assert "K_dim = x.shape[0]" in src and "x_1 = K['exp'](np, x)" in src
    x = np.arange(4.0).reshape(2, 2) / 10
    (got,) = load_emitted(src)["f"](x)
    np.testing.assert_allclose(got, np.exp(np.exp(np.exp(x))).sum(), rtol=1e-15)


# ---- DOT -------------------------------------------------------------------------------

def parse_dot(text: str) -> tuple[set, list, int]:
    """A small structural reader for the emitted DOT: node ids, edges, clusters."""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    assert lines[0].startswith("digraph ") and lines[0].endswith("{") and lines[-1] == "}"
    assert text.count("{") == text.count("}")
    nodes, edges = set(), []
    for ln in lines:
        m = re.match(r'^(n\d+) \[label="(?:[^"\\]|\\.)*"(, \w+="(?:[^"\\]|\\.)*")*\];$', ln)
        if m:
            nodes.add(m.group(1))
            continue
        m = re.match(r"^(n\d+) -> (n\d+)( \[.*\])?;$", ln)
        if m:
            edges.append((m.group(1), m.group(2)))
    return nodes, edges, sum(ln.startswith("subgraph cluster_") for ln in lines)


def test_dot_structure():
    m = Reverse(wrt=("xs", "w"), fn="f")(scan_module())
    text = emit_dot(m, "f_grad")
    nodes, edges, clusters = parse_dot(text)
    assert clusters == 2                                   # forward and reverse loops
    assert edges and all(a in nodes and b in nodes for a, b in edges)
    assert '"xs\\nf64[T, 2]"' in text                      # an input node with its type
    assert re.search(r'label="exp\\nf64\[2\]"', text)     # an op node with its type
    assert 'label="for n=T reverse"' in text
