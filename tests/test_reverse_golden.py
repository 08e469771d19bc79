"""Golden IR text of adjoint programs (reviewed by hand: each line's derivative is stated
in the comments below), compiled through the CLI's default pipeline.

* exp_mul: y = exp(x) * w, L = sum(y): dy = ones broadcast, dx = dy * w * exp(x) (exp(x)
  reused from the forward sweep, no stack).
* loop: h <- h * w three times, wrt h0: the reverse loop carries dh <- dh * w and needs no
  stored values.
* loop_wrt_w: the same wrt h0 and w: the forward loop stacks h at the start of each
  iteration (%h_stack), the reverse loop reads it and accumulates dw.
"""
import re
from pathlib import Path

import pytest

from adcompiler.cli.compile import compile_program
from adcompiler.ir.parser import parse_module
from adcompiler.ir.printer import print_function, print_module

GOLDEN = Path(__file__).parent / "golden" / "reverse"
CASES = [("exp_mul", None), ("loop", None), ("loop_wrt_w", ["h0", "w"])]


def _strip_locs(text: str) -> str:
    return re.sub(r' loc\([^)]*\)', "", text)


@pytest.mark.parametrize("name,wrt", CASES)
def test_adjoint_text(name, wrt):
    src = GOLDEN / f"{name.split('_wrt')[0]}.tdsl"
    comp = compile_program(str(src), "reverse", wrt=wrt)
    got = _strip_locs(print_function(comp.run_fn)).strip()
    assert got == (GOLDEN / f"{name}.grad.ir").read_text().strip()


@pytest.mark.parametrize("name,wrt", CASES)
def test_adjoint_round_trips_with_locations(name, wrt):
    src = GOLDEN / f"{name.split('_wrt')[0]}.tdsl"
    comp = compile_program(str(src), "reverse", wrt=wrt)
    text = print_module(comp.module)
    assert 'loc("' in text
    assert print_module(parse_module(text)) == text


def test_derivative_ops_carry_the_primal_location():
    comp = compile_program(str(GOLDEN / "exp_mul.tdsl"), "reverse")
    locs = {(op.name, op.loc.line) for op in comp.run_fn.walk() if op.loc is not None}
    # dx = dy * w * exp(x) comes from line 2 (y = exp(x) * w); the seed from the return
    assert ("mul", 2) in locs and ("ones", 3) in locs
