"""Python functions adc refuses: each error is at the user's own file, line and column,
with the line and a caret, and names what to write instead."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import adcompiler as adc

sys.path.insert(0, str(Path(__file__).parent))
import pyfront_errors as bad  # noqa: E402

CASES = [  # function, arguments, words the message has
    ("while_runtime", "'while' on a run-time value", "for i in range(n)"),
    ("try_block", "'try' is not supported", "around the call"),
    ("item_assignment", "item assignment changes an array in place", "np.where"),
    ("item_augassign", "item assignment changes an array in place", "np.concatenate"),
    ("unknown_function", "adc cannot see into 'numpy.linalg.inv'", "adc.ops"),
    ("python_object", "'CONFIG' is a Python object of type object", "not an array"),
    ("global_array", "'TABLE' is a NumPy array defined outside", "as an argument"),
    ("if_runtime", "'if' on a run-time value", "np.where(cond, a, b)"),
    ("return_in_loop", "return inside a loop that stays a loop", "return after it"),
    ("list_by_loop_index", "a list is indexed with a run-time value", "for layer in"),
    ("matmul_shapes", "operator '@': matmul contracts dims that differ", "f64[2, 3]"),
    ("einsum_trace", "repeated subscript", "'ii->'"),
    ("nested_def", "'a nested def' is not supported", "module level"),
]


def marked(name: str) -> tuple[int, int, str]:
    """(line, column, text) of the ``# ERR at: TEXT`` line in the function `name`."""
    lines = Path(bad.__file__).read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {name}("))
    for i in range(start, len(lines)):
        if "# ERR at: " in lines[i]:
            code, _, at = lines[i].partition("# ERR at: ")
            return i + 1, code.index(at.strip()) + 1, lines[i]
    raise AssertionError(name)


@pytest.mark.parametrize("name, words, hint", CASES, ids=[c[0] for c in CASES])
def test_located_error(name, words, hint):
    f = getattr(bad, name)
    args = (np.ones(3), [np.ones(3), np.ones(3)]) if name == "list_by_loop_index" \
        else (np.ones((2, 3)),)
    with pytest.raises(adc.AdcError) as info:
        adc.grad(f)(*args)
    line, col, text = marked(name)
    err = info.value
    assert (err.loc.file, err.loc.line, err.loc.col) == (bad.__file__, line, col)
    assert words in err.message and hint in err.message
    first, source, caret = str(err).split("\n")
    assert first == f"{bad.__file__}:{line}:{col}: error: {err.message}"
    assert source == text and caret == " " * (col - 1) + "^"


def test_every_transform_reports_the_same_place():
    line, col, _ = marked("if_runtime")
    for transform in (adc.jit, adc.grad, adc.value_and_grad, adc.jvp, adc.hvp):
        with pytest.raises(adc.AdcError) as info:
            g = transform(bad.if_runtime)
            g(np.ones(3), np.ones(3)) if transform in (adc.jvp, adc.hvp) else g(np.ones(3))
        assert (info.value.loc.line, info.value.loc.col) == (line, col)


def test_function_without_source():
    ns: dict = {"np": np}
    exec("def made(x):\n    return np.sum(x)\n", ns)
    with pytest.raises(adc.AdcError, match="source of 'made' is not available.*define it "
                                            "in a .py file"):
        adc.grad(ns["made"])(np.ones(3))


def test_argument_that_is_not_an_array():
    with pytest.raises(TypeError, match=r"argument 'x\['a'\]': object is not an array or "
                                        "a number"):
        adc.jit(bad.try_block)({"a": object()})


def test_adc_ops_outside_a_compiled_function():
    with pytest.raises(adc.AdcError, match="adc.ops.softmax can only be called inside a "
                                           "function that adc compiles"):
        adc.ops.softmax(np.ones(3))
    with pytest.raises(AttributeError):
        adc.ops.no_such_op
