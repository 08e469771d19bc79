"""A plugin kernel's results are checked against its op's type rule (shape and dtype, one
array per result): a wrong one is a run error at the TDSL line of the op that names the
plugin op, exit 1 from ``adc run``, instead of garbage flowing into a result."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import adcompiler as adc
from adcompiler.cli import main

# a plugin whose op `scale2_<kind>` (2x, elementwise) has a kernel that goes wrong as `kind` says
PLUGIN = '''
from adcompiler import register_op

KIND = {kind!r}


def kernel(xp, x):
    y = x * 2
    if KIND == "shape":
        return y[..., None]
    if KIND == "dtype":
        return y.astype("float64")
    if KIND == "python":
        return float(y.sum())
    if KIND == "count":
        return y, y
    return y


register_op("scale2_" + KIND, lambda types, attrs: types[0], kernel=kernel,
            vjp=lambda b, op, cts: [b.emit("mul", cts[0], b.const(2.0, cts[0].type.dtype))],
            traits=["elementwise"])
'''
SRC = """def f(param x: f32[B, 3]) -> f32 {{
    y = sin(x)
    z = scale2_{kind}(y) * x
    return sum(z)
}}
"""
MESSAGES = {
    "shape": "returned f32[2, 3, 1] for its result, but its type rule gives f32[2, 3]",
    "dtype": "returned f64[2, 3] for its result, but its type rule gives f32[2, 3]",
    "count": "returned 2 arrays for its 1 results",
}
X = np.arange(6, dtype=np.float32).reshape(2, 3) / 7


@pytest.fixture
def plugin(tmp_path):
    """Write the plugin of a kind; afterwards forget what it registered."""
    made = []

    def make(kind: str):
        path = tmp_path / f"plug_{kind}.py"
        path.write_text(PLUGIN.format(kind=kind))
        made.append(kind)
        return str(path)
    yield make
    for kind in made:
        adc.plugins.unregister_op("scale2_" + kind)
        sys.modules.pop(f"plug_{kind}", None)


def test_a_correct_kernel_runs(tmp_path, plugin):
    adc.load_plugins([plugin("good")])
    value, (grad,) = adc.value_and_grad(SRC.format(kind="good"))(X)
    np.testing.assert_allclose(value, np.sum(2 * np.sin(X) * X), rtol=1e-6)
    np.testing.assert_allclose(grad, 2 * (np.cos(X) * X + np.sin(X)), rtol=1e-5)


@pytest.mark.parametrize("kind", sorted(MESSAGES))
def test_wrong_results_are_located_errors(tmp_path, capsys, plugin, kind):
    path = plugin(kind)
    prog = tmp_path / "p.tdsl"
    prog.write_text(SRC.format(kind=kind))
    np.savez(tmp_path / "in.npz", x=X)
    for mode in ("forward", "reverse"):
        rc = main(["run", str(prog), "--plugin", path, "--mode", mode, "--inputs",
                   str(tmp_path / "in.npz")])
        err = capsys.readouterr().err
        assert rc == 1, err
        assert f"p.tdsl:3:9: error: the kernel of plugin op 'scale2_{kind}' " in err, err
        assert MESSAGES[kind] in err and "z = scale2_" in err and "Traceback" not in err
    with pytest.raises(adc.RunError, match=f"plugin op 'scale2_{kind}'") as e:
        adc.function(SRC.format(kind=kind))(X)
    assert e.value.loc is not None and e.value.loc.line == 3


def test_a_python_number_is_not_an_array(tmp_path, plugin):
    adc.load_plugins([plugin("python")])
    src = SRC.format(kind="python").replace("f32[B, 3]", "f32[]")
    with pytest.raises(adc.RunError, match="returned a float, not an array for its result"):
        adc.function(src)(np.float32(0.5))
