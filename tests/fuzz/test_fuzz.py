"""The fuzz target in CI: a fixed-seed slice of `run.fuzz` (600 inputs: with the `adc train`
cases, which run training steps, under a minute on one core), every oracle enforced.
Longer runs on demand:

    ADC_FUZZ_INPUTS=50000 python -m pytest tests/fuzz -q -s      # or:
    python tests/fuzz/run.py --count 200000 --seed 1 --failures fuzz-failures/
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import fuzz  # noqa: E402

N_INPUTS = int(os.environ.get("ADC_FUZZ_INPUTS", "600"))


def test_fuzz_slice():
    counts, failures = fuzz(N_INPUTS, seed=int(os.environ.get("ADC_FUZZ_SEED", "7")))
    print(f"\nfuzzed {N_INPUTS} inputs: {dict(sorted(counts.items()))}")
    assert not failures, "\n\n".join(
        f"[{f.oracle}] adc {' '.join(f.argv)}\n{f.detail}\n--- input ---\n{f.text[:2000]}"
        for f in failures[:5])
    assert counts["ok"] > N_INPUTS // 20 and counts["error"] > N_INPUTS // 4
