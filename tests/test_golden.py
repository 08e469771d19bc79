"""Golden IR tests kept as files: ``tests/golden/<pass>/*.ir``.

A file holds cases separated by a line ``// -----``. Each case is

    // RUN: PIPELINE            the pipeline string to run (verified after each pass)
    <IR text>                   the input module; it must print back as written
    // CHECK:                   then the whole module the pipeline returns, or
    // ERROR: MESSAGE           the exact message of the `AdcError` it raises
    // STDERR: LINE             (optional, repeated) what the pipeline writes to stderr,
                                line by line; without it, it must write nothing

Other lines starting with ``//`` are comments: say there what the case shows and why the
expected text is right. Location annotations are kept, so provenance is checked too. The
input module must be left as it was (a pass edits a copy), and the expected module must
print back as written.
Files outside a pass's folder (``golden/ir``) and the ``*.grad.ir`` files of
``golden/reverse`` belong to other tests. `test_golden_numeric.py` checks the derivatives
that the expected modules of the AD, batch and train-step folders compute.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from adcompiler.diagnostics import AdcError
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_module
from adcompiler.passes import run_pipeline

GOLDEN = Path(__file__).resolve().parent / "golden"
NOT_PASS_FILES = {"ir"}  # tested by test_ir_text.py
OTHER_FORMAT = ".grad.ir"  # golden/reverse/*.grad.ir: test_reverse_golden.py
SEPARATOR = re.compile(r"^// -----\s*$")


@dataclass
class Case:
    path: Path
    line: int
    pipeline: str
    source: str
    expected: str | None
    error: str | None
    stderr: str = ""

    @property
    def id(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}:{self.line}"


def parse_case(path: Path, line: int, lines: list[str]) -> Case:
    pipeline, error, src, out, target, err = None, None, [], [], None, []
    for raw in lines:
        if raw.startswith("// STDERR:"):
            err.append(raw[len("// STDERR:"):].strip() + "\n")
        elif raw.startswith("// RUN:"):
            pipeline, target = raw[len("// RUN:"):].strip(), src
        elif raw.startswith("// CHECK:"):
            target = out
        elif raw.startswith("// ERROR:"):
            error, target = raw[len("// ERROR:"):].strip(), None
        elif raw.startswith("//"):
            continue
        elif target is not None:
            target.append(raw)
        elif raw.strip():
            raise ValueError(f"{path}:{line}: text before '// RUN:'")
    text = "\n".join(out).strip("\n")
    if pipeline is None or (error is None) == (not text):
        raise ValueError(f"{path}:{line}: a case needs '// RUN:' and one of "
                         f"'// CHECK:' (with text) or '// ERROR:'")
    return Case(path, line, pipeline, "\n".join(src).strip("\n") + "\n",
                text + "\n" if text else None, error, "".join(err))


def collect(root: Path = GOLDEN) -> list[Case]:
    """Every case of every pass folder below `root`, in file and line order."""
    cases = []
    for path in sorted(root.glob("*/*.ir")):
        if path.parent.name in NOT_PASS_FILES or path.name.endswith(OTHER_FORMAT):
            continue
        chunks, start, lines = [], 1, []
        for k, raw in enumerate(path.read_text().splitlines(), 1):
            if SEPARATOR.match(raw):
                chunks.append((start, lines))
                start, lines = k + 1, []
            else:
                lines.append(raw)
        chunks.append((start, lines))
        cases += [parse_case(path, line, chunk) for line, chunk in chunks
                  if any(x.strip() for x in chunk)]
    return cases


CASES = collect()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case: Case, capsys):
    module = parse_module(case.source, str(case.path))
    assert print_module(module) == case.source, "the input does not print back as written"
    capsys.readouterr()
    if case.error is not None:
        with pytest.raises(AdcError) as info:
            run_pipeline(module, case.pipeline, verify=True)
        assert info.value.message == case.error
    else:
        assert print_module(run_pipeline(module, case.pipeline, verify=True)) == case.expected
        again = parse_module(case.expected, str(case.path))
        assert print_module(again) == case.expected, "CHECK does not print back as written"
    assert capsys.readouterr().err == case.stderr
    assert print_module(module) == case.source, "the pipeline changed its input"


def test_every_pass_folder_has_cases():
    folders = {c.path.parent.name for c in CASES}
    assert {"activity", "canonicalize", "cse", "dce", "fuse", "inline", "pipeline",
            "scan-inputs", "reverse", "jvp", "hvp", "remat", "batch", "train-step"} <= folders


def test_the_collector_reads_both_kinds_and_rejects_a_malformed_case(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.ir").write_text(
        "// one\n// RUN: cse\nfunc @f() -> () {\n  return()\n}\n// CHECK:\nX\n"
        "// -----\n// RUN: dce\nY\n// ERROR: boom\n// STDERR: a b\n// STDERR: c\n")
    a, b = collect(tmp_path)
    assert (a.pipeline, a.expected, a.error, a.line, a.stderr) == ("cse", "X\n", None, 1, "")
    assert (b.pipeline, b.source, b.error, b.stderr) == ("dce", "Y\n", "boom", "a b\nc\n")
    (tmp_path / "p" / "a.ir").write_text("// RUN: cse\nfunc\n")
    with pytest.raises(ValueError):
        collect(tmp_path)
