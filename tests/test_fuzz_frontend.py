"""Frontend fuzzing: mutated and random source text (the fuzz target's mutator,
tests/fuzz/mutate.py) fed to the compiler and the derivative passes directly.

Every input either compiles or raises an `AdcError` located at a line and column of the
input (never another exception, an "internal compiler error" or a hang); programs that
compile also go through forward and reverse mode without any other exception; and the
CLI reports rejected files as ``FILE:LINE:COL: error:`` with exit status 1.

CI tries a bounded number of inputs; a longer run (the count is printed with ``-s``):

    ADC_FUZZ_INPUTS=20000 python -m pytest tests/test_fuzz_frontend.py -q -s
"""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from adcompiler.diagnostics import AdcError
from adcompiler.frontend import compile_source
from adcompiler.passes.jvp import JVP
from adcompiler.passes.reverse import Reverse

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
from mutate import Mutator  # noqa: E402  (the fuzz target's mutator)

SAMPLES = {p.name: p.read_text() for p in sorted(Path(__file__).parent.parent.glob(
    "samples/*.tdsl"))}
N_INPUTS = int(os.environ.get("ADC_FUZZ_INPUTS", "1000"))


def inputs(seed: int, n: int):
    """`n` sources from the fuzz target's mutator: mostly its TDSL mutations of the samples
    and conformance programs, some token and character soup."""
    m = Mutator(seed, sizes=(10, 50))
    for _ in range(n):
        yield m.tdsl_case() if m.rng.random() < 0.85 else m.random_text()


def check_one(src: str) -> str:
    """"ok", "rejected" or "underived"; asserts the contract for `src`."""
    start = time.perf_counter()
    try:
        module = compile_source(src, "fuzz.tdsl")
    except AdcError as e:
        assert e.loc is not None, (e.message, src)
        assert "internal" not in e.message, (e.message, src)
        assert 1 <= e.loc.line <= src.count("\n") + 2 and e.loc.col >= 1, (e.loc, src)
        return "rejected"
    finally:
        assert time.perf_counter() - start < 10, f"compiling took too long:\n{src}"
    fn = module.main
    state = fn.attrs.get("state", ())   # read and replaced, never differentiated
    floats = tuple(a.name for a in fn.args if a.type.is_float and a.name not in state)
    if not floats:
        return "ok"
    try:
        JVP(wrt=floats, fn=fn.name)(module)
        Reverse(wrt=floats, fn=fn.name)(module)
    except AdcError:
        return "underived"
    return "ok"


def test_samples_compile():
    for name, src in SAMPLES.items():
        assert check_one(src) == "ok", name


def test_mutated_and_random_sources():
    counts = {"ok": 0, "rejected": 0, "underived": 0}
    for src in inputs(2024, N_INPUTS):
        counts[check_one(src)] += 1
    print(f"\nfuzzed {N_INPUTS} inputs: {counts}")
    assert counts["rejected"] > N_INPUTS // 4 and counts["ok"] > 0


@pytest.mark.parametrize("k", range(12))
def test_cli_reports_located_errors(k, tmp_path, capsys):
    from adcompiler.cli import main
    src = list(inputs(100 + k, 1))[0]
    path = tmp_path / "m.tdsl"
    path.write_bytes(src.encode("utf-8", errors="surrogatepass"))
    status = main(["compile", str(path), "--mode", "forward"])
    err = capsys.readouterr().err
    assert status in (0, 1), err
    if status == 1:
        assert re.match(re.escape(str(path)) + r":\d+:\d+: error: ", err), err
        assert "Traceback" not in err
