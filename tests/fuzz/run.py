"""Fuzz ``adc``: mutated inputs (`mutate`) through random commands (`target`), counting
outcomes and keeping every failure.

    python tests/fuzz/run.py --count 200000 --seed 1 --failures fuzz-failures/

runs for as long as the count asks (progress on stderr every 1,000 inputs) and exits 1 if
any oracle failed; each failure is written to the --failures folder (the input and the
command that broke it). CI runs a short fixed-seed slice of it (`test_fuzz.py`)."""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutate import SEEDS, SOURCES, Mutator  # noqa: E402
from target import check  # noqa: E402


def ir_texts() -> list[str]:
    """The samples compiled to IR text, forward and reverse: the seeds of IR mutations."""
    from adcompiler.cli.compile import compile_program
    from adcompiler.ir.printer import print_module
    out = []
    for p in [*SOURCES[:8], *SEEDS]:
        for mode in ("forward", "reverse"):
            try:
                out.append(print_module(compile_program(str(p), mode).module))
            except Exception:  # noqa: BLE001  (a program that needs a plugin or inputs)
                pass
    return out


def fuzz(count: int, seed: int, limit: float = 30.0, failures: Path | None = None,
         progress: bool = False, sizes: tuple[int, ...] = (10, 50, 100, 300)
         ) -> tuple[Counter, list]:
    """Run `count` inputs from `seed`, nesting constructs to the given `sizes`; returns
    (outcome counts, failures)."""
    import numpy as np
    np.seterr(all="ignore")
    rng = random.Random(seed + 1)
    counts: Counter = Counter()
    found = []
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="adc-fuzz-") as tmp:
        mutator = Mutator(seed, ir_texts(), sizes, train_dir=Path(tmp) / "train-seeds")
        for k in range(count):
            kind, text = mutator.next_case()
            outcome, failure = check(rng, kind, text, Path(tmp), limit)
            counts[outcome] += 1
            if failure is not None:
                found.append(failure)
                if failures is not None:
                    _save(failures, len(found), failure)
            if progress and (k + 1) % 1000 == 0:
                rate = (k + 1) / (time.time() - start)
                print(f"fuzz: {k + 1:,}/{count:,} inputs ({rate:.0f}/s): "
                      f"{dict(sorted(counts.items()))}", file=sys.stderr, flush=True)
    return counts, found


def _save(folder: Path, n: int, f) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".json" if f.text.startswith('{"argv"') else ".npz" if f.text.startswith("PK") \
        else ".ir" if f.argv[1].endswith(".ir") else ".tdsl"
    (folder / f"{n:05d}-{f.oracle}{suffix}").write_bytes(   # (an .npz's bytes as latin-1)
        f.text.encode("latin-1" if suffix == ".npz" else "utf-8", errors="surrogatepass"))
    (folder / f"{n:05d}-{f.oracle}.txt").write_text(
        "adc " + " ".join(f.argv) + "\n\n" + f.detail + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=float, default=30.0,
                   help="seconds of CPU time per input (the remat MILP alone may take 10)")
    p.add_argument("--failures", type=Path, help="folder for the failing inputs")
    p.add_argument("--sizes", default="10,50,100,300,1000,3000",
                   help="how deep or long the nesting strategy makes each construct")
    args = p.parse_args(argv)
    start = time.time()
    sizes = tuple(int(s) for s in args.sizes.split(","))
    counts, found = fuzz(args.count, args.seed, args.limit, args.failures, progress=True,
                         sizes=sizes)
    print(f"fuzz: {args.count:,} inputs in {time.time() - start:.0f} s, seed {args.seed}: "
          f"{dict(sorted(counts.items()))}; failures: {len(found)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
