"""Extension points: an op and a pass registered by a plugin module (tests/plugins/myplugin)
work from TDSL, through reverse mode, in pipeline strings and in `adc` commands."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.ops import registry
from adcompiler.passes.pipeline import PASSES
from adc_runtime.kernels import KERNELS

TESTS = Path(__file__).resolve().parent
SRC = """
def model(param w: f64[3], x: f64[3]) -> f64 {
    return sum(softsign(w * x) * x)
}
"""
W, X = np.array([0.5, -2.0, 0.3]), np.array([1.5, 0.25, -3.0])


@pytest.fixture
def plugin():
    """Load the plugin, and afterwards unregister what it added so other tests see the
    built-in registry only."""
    (mod,) = adc.load_plugins(["plugins.myplugin"])
    yield mod
    adc.plugins.unregister_op("softsign")
    PASSES.pop("lower_softsign", None)
    sys.modules.pop("plugins.myplugin", None)


def softsign(z):
    return z / (1 + np.abs(z))


def test_plugin_registers_op_kernel_and_pass(plugin):
    d = adc.get_op("softsign")
    assert d.vjp is not None and d.jvp is not None and d.has("elementwise")
    assert "softsign" in KERNELS
    assert adc.get_pass("lower_softsign") is plugin.LowerSoftsign
    assert adc.LowerSoftsign is plugin.LowerSoftsign  # pass classes by name
    assert adc.load_plugins(["plugins.myplugin"]) == [plugin]  # idempotent


def test_plugin_op_from_tdsl_runs_and_differentiates(plugin):
    m = adc.compile_source(SRC, "model.tdsl")
    assert [op.name for op in m.main.walk()][:2] == ["mul", "softsign"]
    value, dw = adc.value_and_grad(m, wrt="w")(W, X)
    assert value == pytest.approx(np.sum(softsign(W * X) * X))
    np.testing.assert_allclose(dw, X * X / (1 + np.abs(W * X)) ** 2)
    # and against central differences, independent of the rule
    eps, fd = 1e-6, np.zeros(3)
    f = adc.function(m)
    for k in range(3):
        e = np.eye(3)[k] * eps
        fd[k] = (f(W + e, X) - f(W - e, X)) / (2 * eps)
    np.testing.assert_allclose(dw, fd, rtol=1e-6, atol=1e-9)


def test_plugin_op_type_rule_errors_are_located(plugin):
    with pytest.raises(adc.AdcError, match="softsign expects a float tensor") as e:
        adc.compile_source("def f(k: i64[2]) -> i64[2] {\n  return softsign(k)\n}\n", "k.tdsl")
    assert (e.value.loc.line, e.value.loc.file) == (2, "k.tdsl")


def test_plugin_jvp_slot_builds_ir(plugin):
    # forward mode does not exist yet; call the rule the way it will: tangents in, IR out
    fb = adc.FunctionBuilder("tangent", {"x": "f64[3]", "dx": "f64[3]"})
    y = fb.emit("softsign", fb["x"])
    (dy,) = adc.get_op("softsign").jvp(fb, y.defining_op, [fb["dx"]])
    m = adc.Module()
    fb.finish(y, dy, module=m)
    adc.verify(m)
    dx = np.array([1.0, 2.0, -1.0])
    _, got = adc.run(m, x=W, dx=dx)
    np.testing.assert_allclose(got, dx / (1 + np.abs(W)) ** 2)


def test_plugin_pass_in_pipeline_strings(plugin):
    m = adc.compile_source(SRC)
    lowered = adc.run_pipeline(m, "inline,lower_softsign,cse,dce", verify=True)
    names = [op.name for op in lowered.main.walk()]
    assert "softsign" not in names and "div" in names and "abs" in names
    before, after = adc.run(m, w=W, x=X), adc.run(lowered, w=W, x=X)
    np.testing.assert_allclose(after[0], before[0], rtol=1e-15)
    # the lowered program differentiates with built-in rules only: same gradient
    g1 = adc.grad(m, wrt="w")(W, X)
    g2 = adc.grad(m, wrt="w", passes="lower_softsign,cse,dce")(W, X)
    np.testing.assert_allclose(g2, g1, rtol=1e-12)
    assert adc.pass_spec(adc.parse_pipeline("lower_softsign{fn=model}")[0]) == \
        "lower_softsign{fn=model}"


def test_register_op_twice_is_an_error_unless_replacing(plugin):
    with pytest.raises(ValueError, match="already registered"):
        adc.register_op("softsign", lambda ts, a: ts[0], kernel=lambda xp, x: x)
    try:
        adc.register_op("softsign", lambda ts, a: ts[0], kernel=lambda xp, x: 2 * x,
                        replace=True)
        np.testing.assert_allclose(adc.run(SRC, w=W, x=X)[0], np.sum(2 * W * X * X))
    finally:
        adc.plugins.unregister_op("softsign")
    assert "softsign" not in registry.REGISTRY and "softsign" not in KERNELS


def test_load_plugins_errors_and_file_paths(tmp_path):
    with pytest.raises(adc.plugins.PluginError, match="no module named 'no_such_plugin'"):
        adc.load_plugins(["no_such_plugin"])
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(adc.plugins.PluginError, match="RuntimeError: boom"):
        adc.load_plugins([str(broken)])
    good = tmp_path / "cube_plugin.py"
    good.write_text(
        "import adcompiler as adc\n"
        "adc.register_op('cube_t', lambda ts, a: ts[0], kernel=lambda xp, x: x ** 3,\n"
        "    vjp=lambda b, op, ct: [b.emit('mul', ct[0], b.emit('mul', b.const(3.0, 'f64'),\n"
        "        b.emit('square', op.operands[0])))])\n")
    try:
        (mod,) = adc.load_plugins([str(good)])
        assert mod.__name__ == "cube_plugin"
        g = adc.grad("def f(param x: f64) -> f64 {\n  return cube_t(x)\n}\n", wrt="x")
        assert g(np.array(2.0)) == pytest.approx(12.0)
    finally:
        adc.plugins.unregister_op("cube_t")
        sys.modules.pop("cube_plugin", None)


def _cli_has_plugin_option() -> bool:
    from adcompiler import cli
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return all("--plugin" in p.format_help() for p in sub.choices.values())


@pytest.mark.skipif(not _cli_has_plugin_option(), reason="adc has no --plugin option yet")
def test_adc_commands_with_plugin(tmp_path):
    prog = tmp_path / "model.tdsl"
    prog.write_text(SRC)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get(
        "PYTHONPATH", "")])}

    def adc_cmd(*args):
        return subprocess.run([sys.executable, "-m", "adcompiler", *args], env=env,
                              capture_output=True, text=True, cwd=tmp_path)
    out = adc_cmd("compile", str(prog), "--plugin", "plugins.myplugin")
    assert out.returncode == 0, out.stderr
    assert "softsign(" in out.stdout and "func @model_grad" in out.stdout
    out = adc_cmd("compile", str(prog), "--plugin", "plugins.myplugin",
                  "--pipeline", "inline,lower_softsign,cse,dce")
    assert out.returncode == 0, out.stderr
    assert "softsign(" not in out.stdout and "div(" in out.stdout
    out = adc_cmd("check", str(prog), "--plugin", "plugins.myplugin")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gradient check passed" in out.stdout
    out = adc_cmd("compile", str(prog))  # without the plugin the op is unknown
    assert out.returncode == 1 and "unknown function or op 'softsign'" in out.stderr
