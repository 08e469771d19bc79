"""Frontend fuzzing: random and mutated source text (from samples/*.tdsl) fed to the compiler.

Every input either compiles or raises an `AdcError` located at a line and column of the
input (never another exception, an "internal compiler error" or a hang); programs that
compile also go through forward and reverse mode without any other exception; and the
CLI reports rejected files as ``FILE:LINE:COL: error:`` with exit status 1.

CI tries a bounded number of inputs; a longer run (the count is printed with ``-s``):

    ADC_FUZZ_INPUTS=20000 python -m pytest tests/test_fuzz_frontend.py -q -s
"""
from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

import pytest

from adcompiler.diagnostics import AdcError
from adcompiler.frontend import compile_source
from adcompiler.passes.jvp import JVP
from adcompiler.passes.reverse import Reverse

SAMPLES = {p.name: p.read_text() for p in sorted(Path(__file__).parent.parent.glob(
    "samples/*.tdsl"))}
N_INPUTS = int(os.environ.get("ADC_FUZZ_INPUTS", "1000"))
TOKEN = re.compile(r"\s+|#[^\n]*|[A-Za-z_][A-Za-z0-9_]*|\d+\.?\d*(?:[eE][-+]?\d+)?|"
                   r"\"[^\"\n]*\"|\*\*|->|<=|>=|==|!=|.", re.S)
EXTRA = ["def", "grad", "tangent", "param", "for", "in", "range", "return", "true", "false",
         "f16", "f32", "f64", "i32", "i64", "bool", "(", ")", "[", "]", "{", "}", ",", ":",
         "=", "@", "**", "-", "+", "/", "<", "==", "->", ".", ";", "\n", "0", "-1", "1e999",
         "9" * 25, "0.5", '"ij,jk->ik"', "x", "i", "B", "T", "sum", "einsum", "reshape",
         "transpose", "softmax", "take", "where", "cast", "axis=", "keepdims=true", "[:",
         "::-1]", "\x00", "\t", "é", "\ufeff", "\\"]


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def mutate(rng: random.Random, text: str, pool: list[str]) -> str:
    """`text` with 1-4 token-level edits (delete, duplicate, swap, replace, insert, splice)."""
    toks = tokens(text)
    for _ in range(rng.randint(1, 4)):
        if not toks:
            toks = [rng.choice(pool)]
        k = rng.randrange(len(toks))
        r = rng.random()
        if r < 0.2:
            del toks[k:k + rng.randint(1, 3)]
        elif r < 0.3:
            toks.insert(k, toks[k])
        elif r < 0.4 and k + 1 < len(toks):
            toks[k], toks[k + 1] = toks[k + 1], toks[k]
        elif r < 0.7:
            toks[k] = rng.choice(pool)
        elif r < 0.8 and toks[k][:1].isdigit():
            toks[k] = rng.choice(["0", "1", "7", "-2", "1e999", "3.5", "9" * 25])
        elif r < 0.9:
            toks.insert(k, rng.choice(pool))
        else:
            j = rng.randrange(len(toks))
            toks[k:k] = toks[j:j + rng.randint(1, 12)]
    return "".join(toks)


def random_text(rng: random.Random, pool: list[str]) -> str:
    if rng.random() < 0.5:
        return "".join(rng.choice(pool) for _ in range(rng.randint(0, 60)))
    alphabet = "abcdefxyz_019()[]{},:;=+-*/@<>.\"# \n\t"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))


def inputs(seed: int, n: int):
    rng = random.Random(seed)
    pool = sorted({t for s in SAMPLES.values() for t in tokens(s) if not t.isspace()}) + EXTRA
    texts = list(SAMPLES.values())
    for _ in range(n):
        if rng.random() < 0.85:
            yield mutate(rng, rng.choice(texts), pool)
        else:
            yield random_text(rng, pool)


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
    floats = tuple(a.name for a in fn.args if a.type.is_float)
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
