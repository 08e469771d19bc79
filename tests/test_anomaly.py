"""--detect-anomaly: the first op whose result holds a NaN or an Inf, forward or adjoint,
reported at its source line with a caret, the op's name and its non-finite operand."""
import numpy as np
import pytest

from adc_runtime.anomaly import AnomalyExecutor, nonfinite
from adc_runtime.executor import run_function
from adcompiler import cli
from adcompiler.cli.anomaly import anomaly_executor
from adcompiler.cli.compile import compile_program

SQRT = """def f(x: f32[3], param w: f32[3]) -> f32 {
    h = sqrt(x * w)
    return sum(h)
}
"""

LOOP = """def g(xs: f32[T, 2], param w: f32[2]) -> f32 {
    acc = zeros([])
    for i in range(T) {
        z = xs[i] * w
        acc = acc + sum(log(z))
    }
    return acc
}
"""


def _run(tmp_path, capsys, src, inputs, *extra):
    prog = tmp_path / "p.tdsl"
    prog.write_text(src)
    np.savez(tmp_path / "in.npz", **inputs)
    code = cli.main(["run", str(prog), "--inputs", str(tmp_path / "in.npz"), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err, str(prog)


def test_forward_nan_is_located(tmp_path, capsys):
    code, _, err, prog = _run(tmp_path, capsys, SQRT,
                              {"x": np.float32([1, -1, 2]), "w": np.ones(3, "f4")},
                              "--detect-anomaly")
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == (f"{prog}:2:9: error: anomaly: 'sqrt' in the forward sweep produced "
                        "NaN (first at index (1,)), from finite operands (operands there: -1)")
    assert lines[1:3] == ["    h = sqrt(x * w)", "        ^"]
    assert "Traceback" not in err


def test_adjoint_inf_carries_the_primal_location(tmp_path, capsys):
    code, _, err, prog = _run(tmp_path, capsys, SQRT,
                              {"x": np.float32([1, 0, 2]), "w": np.ones(3, "f4")},
                              "--detect-anomaly")
    assert code == 1
    first = err.splitlines()[0]
    assert first.startswith(f"{prog}:2:9: error: anomaly: ")
    assert "in the adjoint sweep produced +Inf (first at index (1,))" in first


def test_without_the_flag_the_run_finishes(tmp_path, capsys):
    code, out, err, _ = _run(tmp_path, capsys, SQRT,
                             {"x": np.float32([1, 0, 2]), "w": np.ones(3, "f4")})
    assert code == 0 and "nan" in out
    assert anomaly_executor(False) is None     # the plain executor: no checks at all


def test_inside_a_loop_and_input_operand(tmp_path, capsys):
    xs = np.float32([[1, 2], [3, 0], [1, 1]])
    code, _, err, prog = _run(tmp_path, capsys, LOOP, {"xs": xs, "w": np.ones(2, "f4")},
                              "--detect-anomaly", "--mode", "forward")
    assert code == 1
    assert err.splitlines()[0] == (
        f"{prog}:5:25: error: anomaly: 'log' in the forward sweep produced -Inf (first at "
        "index (1,)), from finite operands (operands there: 0)")


def test_non_finite_input_is_named(tmp_path, capsys):
    code, _, err, _ = _run(tmp_path, capsys, SQRT,
                           {"x": np.float32([1, np.inf, 2]), "w": np.ones(3, "f4")},
                           "--detect-anomaly")
    assert code == 1 and "input 'x' of 'f_grad' holds +Inf (first at index (1,))" in err


def test_operand_that_is_already_non_finite(sqrt_program):
    comp = sqrt_program
    ex = AnomalyExecutor(comp.module)
    mul = next(op for op in comp.run_fn.walk() if op.name == "mul")
    env = {mul.operands[0]: np.float32([np.nan, 1, 1]), mul.operands[1]: np.ones(3, "f4")}
    msg = ex._message(mul, env, 0, np.float32([np.nan, 1, 1]), "NaN")
    assert "operand 0 (%x) holds NaN" in msg


def test_same_results_as_the_plain_executor(sqrt_program):
    comp = sqrt_program
    inputs = {"x": np.float32([1, 2, 3]), "w": np.float32([0.5, 1, 2])}
    plain, _ = run_function(comp.module, comp.run_name, inputs)
    checked, _ = run_function(comp.module, comp.run_name, inputs, executor=AnomalyExecutor)
    for a, b in zip(plain, checked):
        assert np.array_equal(a, b)


def test_nonfinite_kinds():
    assert nonfinite(np.float32([1, 2])) is None
    assert nonfinite(np.int64([1, 2])) is None
    assert nonfinite(np.float64([1, np.inf, np.nan])) == "NaN"
    assert nonfinite(np.float64([-np.inf])) == "-Inf"
    assert nonfinite(np.float16(np.inf)) == "+Inf"
    assert nonfinite(np.zeros((0,), "f4")) is None


@pytest.fixture(scope="module")
def sqrt_program(tmp_path_factory):
    path = tmp_path_factory.mktemp("anomaly") / "p.tdsl"
    path.write_text(SQRT)
    return compile_program(str(path), "reverse")
