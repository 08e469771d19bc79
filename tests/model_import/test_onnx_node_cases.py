"""The ONNX backend node cases through the importer (onnx_node_cases.py): every case of a
fast subset of op types, and with ``-m slow`` (or ADC_ONNX_ALL_CASES=1) all 1,884, whose
table is printed; no case may fail (each passes, or is refused with a named reason)."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("onnx")

import onnx_node_cases as cases  # noqa: E402

# the op types of the light CNNs, a transformer encoder and a GPT-style block
FAST = {"Relu", "Add", "Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
        "BatchNormalization", "Softmax", "LogSoftmax", "Reshape", "Concat", "Gather",
        "MatMul", "LayerNormalization", "Transpose", "Unsqueeze", "Flatten", "LRN", "Sum",
        "Dropout", "Where", "Gelu", "Erf", "Sqrt", "Div", "Mul", "Sub", "Tanh", "Sigmoid",
        "ReduceMean", "Expand", "Split", "Squeeze", "Slice", "ConstantOfShape"}


def _selected(all_ops: bool):
    return [c for c in cases.all_cases() if all_ops or cases.op_type(c) in FAST]


def _check(selected):
    results = []
    for case in selected:
        outcome, detail = cases.run_case(case)
        results.append((cases.op_type(case), outcome, detail))
        if outcome == "refused":
            assert detail, case.name   # every refusal names its reason
    failed = [f"{case.name}: {d}" for case, (_, o, d) in zip(selected, results) if o == "fail"]
    return results, failed


def test_fast_subset_of_the_node_cases():
    results, failed = _check(_selected(False))
    assert failed == []
    passed = sum(o == "pass" for _, o, _ in results)
    assert passed >= 150, cases.table(results)


@pytest.mark.slow
def test_every_node_case(capsys):
    results, failed = _check(_selected(True))
    with capsys.disabled():
        print("\n" + cases.table(results))
    assert failed == []


@pytest.mark.skipif(not os.environ.get("ADC_ONNX_ALL_CASES"),
                    reason="set ADC_ONNX_ALL_CASES=1 (or run -m slow)")
def test_every_node_case_on_request(capsys):
    test_every_node_case(capsys)
