"""The fuzz target: one input through one ``adc`` command, in process, under a time limit.

Oracles: the exit status is 0, 1 or 2, never 3 (an internal error); no traceback; no input
file of the command changed (an output written over an input); an
error located in the input shows the input's line at that number and a caret inside it; a
program that compiles to IR text prints, parses and prints back to the same text; the
command ends within the time limit (a run of a loop with a huge trip count is "slow", not
a hang: it is doing what it was asked)."""
from __future__ import annotations

import contextlib
import io
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from adcompiler.cli import main
from adcompiler.diagnostics import source_lines

MEMORY = "32MiB"   # --max-memory of every run: sizes beyond it are refused, not allocated
MODES = ["forward", "reverse", "jvp", "hvp"]
REMAT = ["none", "none", "sqrt", "revolve:2", "budget:4KiB", "min-memory"]
PIPELINES = ["inline,cse,dce", "inline,canonicalize", "dce", "inline,fuse", "reverse{wrt=x}",
             "inline,scan-inputs,reverse{wrt=x},dce", "cse{", "nope", "", ",,"]
LARGE_LOOP = re.compile(r"range\(\s*\d{5,}|\d{6,}")


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException, so that the CLI cannot report it as an error."""


@dataclass
class Failure:
    oracle: str
    argv: list[str]
    text: str
    detail: str


def commands(rng, path: str, kind: str, out_dir: str) -> list[str]:
    """One random command line for the input at `path`."""
    r = rng.random()
    extra = []
    if rng.random() < 0.1:
        extra += rng.choice([["--wrt", rng.choice(["x", "W", "W1,b1", "xs", "q"])],
                             ["--fn", rng.choice(["f", "mlp", "rnn", "ffn", "g"])],
                             ["--dtype", rng.choice(["f16", "f32", "f64"])]])
    if r < 0.5:
        mode = rng.choice(MODES)
        argv = ["compile", path, "--mode", mode, "--emit",
                rng.choice(["ir", "ir", "python", "dot", "cuda"]), *extra]
        if mode == "reverse" and rng.random() < 0.3:
            argv += ["--remat", rng.choice(REMAT)]
        if rng.random() < 0.05:
            argv += ["--pipeline", rng.choice(PIPELINES)]
        return argv
    argv = ["--max-memory", MEMORY, *extra]
    if rng.random() < 0.3:
        argv += ["--bind", f"{rng.choice('BTN')}={rng.choice([0, 1, 2, 3])}"]
    if r < 0.85:
        mode = rng.choice(MODES)
        argv = ["run", path, "--mode", mode, *argv]
        if mode == "reverse" and rng.random() < 0.3:
            argv += ["--remat", rng.choice(REMAT)]
        if rng.random() < 0.2:
            argv += ["--out", f"{out_dir}/out.npz", "--dtype", rng.choice(["f16", "f64"])]
        return argv
    if (r < 0.98 and "--dtype" not in extra) or kind == "ir":  # check runs in f64
        return ["check", path, "--max-points", "2", *argv] if r < 0.92 else \
            ["remat-curve", path, "--points", "2", *argv]
    # not of IR seeds: their last function is an adjoint, whose full Jacobian (a Hessian)
    # takes one run per parameter by design
    return ["jacobian", path, *argv]


# the limits of one input: `limit` seconds of CPU time (a shared machine slows the wall
# clock, not the work), and WALL_FACTOR times that of wall-clock time (a command that waits)
WALL_FACTOR = 10
_TIMERS = ((signal.ITIMER_PROF, signal.SIGPROF, 1), (signal.ITIMER_REAL, signal.SIGALRM,
                                                     WALL_FACTOR))


def _run(argv: list[str], limit: float) -> tuple[int | str, str, str]:
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise _Timeout()
    old = [signal.signal(sig, alarm) for _, sig, _ in _TIMERS]
    for timer, _, factor in _TIMERS:
        signal.setitimer(timer, limit * factor)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:
                rc = e.code
    except _Timeout:
        rc = "timeout"
    finally:
        for (timer, sig, _), handler in zip(_TIMERS, old):
            signal.setitimer(timer, 0)
            signal.signal(sig, handler)
    return rc, out.getvalue(), err.getvalue()


def _caret_problem(err: str, path: str, text: str) -> str | None:
    """Why the located error in `err` does not show the reported line of `text`, if so."""
    lines = err.split("\n")
    m = re.match(re.escape(path) + r":(\d+):(\d+): error: ", lines[0])
    if m is None:
        return None
    line, col = int(m[1]), int(m[2])
    src = source_lines(text.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    if not 1 <= line <= len(src):
        return f"line {line} is outside the input ({len(src)} lines)"
    if len(lines) < 3 or len(lines[1]) != len(src[line - 1]):
        return f"the shown line is not line {line} of the input"
    caret = lines[2].find("^")
    if caret != min(max(col, 1), len(src[line - 1]) + 1) - 1 or lines[2].strip() != "^":
        return f"the caret is not under column {col}"
    return None


def _roundtrip_problem(out: str) -> str | None:
    from adcompiler.ir.parser import parse_module
    from adcompiler.ir.printer import print_module
    try:
        again = print_module(parse_module(out, "<printed>"))
    except Exception as e:  # noqa: BLE001  (any failure is the finding)
        return f"printed IR does not parse: {type(e).__name__}: {e}"
    if again.rstrip("\n") != out.rstrip("\n"):
        return "printed IR does not print back identically"
    return None


def _train_case(text: str, work: Path) -> tuple[list[str], dict[str, bytes]]:
    """The arguments of a train case, its files written to a fresh folder (with a link to
    /dev/zero that looks like a checkpoint); returns them and the inputs' bytes."""
    import base64
    import json
    import os
    import shutil
    case = json.loads(text)
    folder = work / "case"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    os.symlink("/dev/zero", folder / "link.npz")
    inputs = {}
    for name, b64 in case["files"].items():
        raw = base64.b64decode(b64)
        (folder / name).write_bytes(raw)
        inputs[str(folder / name)] = raw
    return [a.replace("{dir}", str(folder)) for a in case["argv"]], inputs


def check(rng, kind: str, text: str, work: Path, limit: float = 30.0) -> tuple[str, Failure | None]:
    """Run `text` through one random command; returns (outcome, failure or None). Outcomes:
    ``ok``, ``error`` (exit 1), ``usage`` (exit 2), ``slow``, or the failed oracle."""
    inputs: dict[str, bytes] = {}
    if kind == "train":   # `adc train` with its files (`train_cases`)
        argv, inputs = _train_case(text, work)
        path = argv[1]
    elif kind == "data":  # a sample program run on a damaged input file
        prog, data = text.split("\0", 1)
        suffix = ".npz" if data.startswith("PK") else ".json"
        path = str(work / f"in{suffix}")
        Path(path).write_bytes(data.encode("latin-1" if suffix == ".npz" else "utf-8",
                                           errors="surrogatepass"))
        argv = ["run", prog, "--inputs", path, "--max-memory", MEMORY,
                "--mode", rng.choice(MODES)]
        if suffix == ".npz" and rng.random() < 0.3:  # the same arrays as training data
            argv = ["train", prog, "--data", path, "--steps", "2", "--max-memory", MEMORY]
        text = data
    else:
        path = str(work / ("m.ir" if kind == "ir" else "m.tdsl"))
        Path(path).write_bytes(text.encode("utf-8", errors="surrogatepass"))
        argv = commands(rng, path, kind, str(work))
    rc, out, err = _run(argv, limit)
    if rc == "timeout":
        if LARGE_LOOP.search(text) and argv[0] != "compile":
            return "slow", None
        return "hang", Failure("hang", argv, text, f"no answer within {limit:g} s of CPU "
                                                   f"time or {limit * WALL_FACTOR:g} s")
    problem = None
    if rc not in (0, 1, 2):
        problem = ("internal", err[-2000:])
    elif "Traceback" in err or "Traceback" in out:
        problem = ("traceback", err[-2000:])
    elif any(Path(p).read_bytes() != b for p, b in inputs.items()):
        problem = ("clobbered", "an input file was changed: " + ", ".join(
            p for p, b in inputs.items() if Path(p).read_bytes() != b))
    elif rc == 1 and kind != "train":
        why = _caret_problem(err, path, text)
        if why:
            problem = ("caret", f"{why}\n{err[:2000]}")
    elif rc == 0 and argv[0] == "compile" and "--emit" in argv and \
            argv[argv.index("--emit") + 1] == "ir":
        why = _roundtrip_problem(out)
        if why:
            problem = ("roundtrip", why)
    if problem:
        return problem[0], Failure(problem[0], argv, text, problem[1])
    return {0: "ok", 1: "error", 2: "usage"}[rc], None
