"""Every example in the docs runs, so the docs cannot drift from the code.

Fenced blocks are run in document order, one shared namespace per file, in a scratch
directory that has ``samples/`` and is on ``sys.path`` (files a page writes are importable,
e.g. plugins for ``adc --plugin``):

* ```python: executed;
* ```KIND file=NAME: also written to NAME first (a ```python file= block is only written:
  a module for later blocks to import, e.g. a plugin; a ```tdsl file= block is a program
  for later commands);
* ```pycon: a doctest; its printed output must match (``...`` elides, whitespace is loose);
* ```console: each ``$ adc ...`` (or ``$ python ...``) line runs and must exit 0; every
  output line shown under it must appear within a line of the output (``...`` elides);
* ```tdsl: must compile; ```ir: must parse, verify and print back identically;
* ```json: must parse (a ```json file=NAME block is an inputs file for later commands).

A ```tdsl block whose first line is ``# samples/NAME.tdsl`` shows that sample: the rest of the
block must be in the file as written.

A ```tdsl block's info string may say more (``file=NAME`` as above, default ``example.tdsl``):

* ``run``: also run as ``adc run NAME --mode reverse --seed 0`` (seeded random inputs), which
  must succeed; ``run="ARGS"`` appends ARGS (``--fn g``, ``--bind T=3``, ``--mode jvp``);
* ``error``: compiling it (or, with ``run``, running it) must fail, and the ```text block
  that follows shows the error as ``adc`` prints it: those lines must appear, in order and
  one after another, in what it printed.

Any block may say ``needs=MODULE``: it runs only where that optional package is installed
(the ONNX example of README.md needs ``onnx``).

README.md runs the same way: its ```console, ```tdsl and ```python blocks; its other blocks
are ```sh commands run elsewhere (the Quick start by tests/test_train_samples.py) or
```text.
"""
from __future__ import annotations

import contextlib
import doctest
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

import adcompiler as adc
from adcompiler.ops import registry
from adcompiler.passes.pipeline import PASSES, _discover
from adc_runtime.kernels import KERNELS, PLUGIN_OPS

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
RUNNABLE = {"python", "pycon", "console", "tdsl", "ir", "json"}
OWN_PAGES = ("ir.md", "tutorial-pass.md", "tutorial-op.md", "api.md")
FENCE = re.compile(r"^```([\w-]*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


class Fence(NamedTuple):
    kind: str
    line: int        # of the block's first line of text
    text: str
    file: str | None  # NAME of ```KIND file=NAME
    info: dict        # the info string's words: ``key=value`` -> value, ``word`` -> True


def fences(path: Path) -> list[Fence]:
    """Every fenced block of `path`, in order."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        info: dict = {}
        for word in shlex.split(m.group(2)):
            key, eq, value = word.partition("=")
            info[key] = value if eq else True
        out.append(Fence(m.group(1), text.count("\n", 0, m.start()) + 2, m.group(3),
                         info.get("file"), info))
    return out


def blocks(path: Path, kinds=RUNNABLE) -> list[Fence]:
    """The fenced blocks of `path` whose kind is in `kinds`."""
    return [f for f in fences(path) if f.kind in kinds]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A working directory with samples/, on sys.path and PYTHONPATH; the op, kernel and
    pass tables are restored afterwards so a page's registrations stay on that page."""
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    _discover()  # register the built-in passes first: they are imported only once
    tables = (registry.REGISTRY, KERNELS, PASSES)  # what register_op fills (and a set)
    saved, modules, plugin_ops = [dict(t) for t in tables], set(sys.modules), set(PLUGIN_OPS)
    yield tmp_path
    for table, old in zip(tables, saved):
        for key in set(table) - set(old):
            del table[key]
        table.update(old)
    PLUGIN_OPS.intersection_update(plugin_ops)
    PLUGIN_OPS.update(plugin_ops)
    for name in set(sys.modules) - modules:
        if getattr(sys.modules[name], "__file__", "") and \
                str(tmp_path) in sys.modules[name].__file__:
            del sys.modules[name]


def run_python(code: str, ns: dict, where: str) -> None:
    exec(compile(code, where, "exec"), ns)


def run_pycon(code: str, ns: dict, where: str, line: int) -> None:
    test = doctest.DocTestParser().get_doctest(code, ns, where, where, line)
    out: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=out.append, clear_globs=False)
    ns.update(test.globs)
    assert not result.failed, "".join(out)


def _loose(line: str) -> str:
    return " ".join(line.split())


def _matches(expected: str, actual_lines: list[str]) -> bool:
    pattern = re.compile(".*".join(re.escape(p.strip()) for p in _loose(expected).split("...")))
    return any(pattern.search(a) for a in actual_lines)


def cli_has_plugin_option(command: str) -> bool:
    """Whether `adc COMMAND` takes --plugin."""
    from adcompiler import cli
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return command in sub.choices and "--plugin" in sub.choices[command].format_help()


def run_console(code: str, where: str) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
    assert commands, f"{where}: a console block without a '$ ' command"
    for cmd, expected in commands:
        argv = shlex.split(cmd)
        if "--plugin" in argv:
            assert cli_has_plugin_option(argv[1]), f"{where}: adc {argv[1]} has no --plugin"
        if argv[0] == "adc":
            argv = [sys.executable, "-m", "adcompiler", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        else:
            raise AssertionError(f"{where}: only 'adc' and 'python' commands run: {cmd}")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{where}: '{cmd}' exited {proc.returncode}\n{output}"
        actual = [_loose(a) for a in output.splitlines()]
        for e in expected:
            if _loose(e) and _loose(e) != "...":
                assert _matches(e, actual), f"{where}: '{cmd}' did not print {e!r}\n{output}"


def adc_main(argv: list[str]) -> tuple[int, str]:
    """`adc ARGV` in-process: its exit status and what it printed (stdout, then stderr)."""
    from adcompiler import cli
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse: a bad command line
            code = e.code
    return code, out.getvalue() + err.getvalue()


def _contains_lines(expected: str, printed: str) -> bool:
    """Whether the lines of `expected` appear one after another in `printed` (trailing
    blanks aside)."""
    want = [x.rstrip() for x in expected.strip("\n").splitlines()]
    have = [x.rstrip() for x in printed.splitlines()]
    return any(have[k:k + len(want)] == want for k in range(len(have) - len(want) + 1))


def run_tdsl(fence: Fence, where: str, expected: str | None) -> None:
    """A ```tdsl block: compiled, run when its info says ``run``; with ``error``, the
    failure must print `expected`."""
    name = fence.file or "example.tdsl"
    run = fence.info.get("run")
    if expected is None:
        adc.compile_source(fence.text, where)
    if run is None:
        if expected is not None:
            from adcompiler.diagnostics import render
            with pytest.raises(adc.AdcError) as err:
                adc.compile_source(fence.text, name)
            printed = render(err.value, fence.text)
            assert _contains_lines(expected, printed), \
                f"{where}: the error is not the one shown\n{printed}"
        return
    Path(name).write_text(fence.text, encoding="utf-8")
    extra = shlex.split(run) if isinstance(run, str) else []
    code, printed = adc_main(["run", name, "--mode", "reverse", "--seed", "0", *extra])
    if expected is None:
        assert code == 0, f"{where}: 'adc run {name}' exited {code}\n{printed}"
    else:
        assert code == 1, f"{where}: 'adc run {name}' exited {code}, not 1\n{printed}"
        assert _contains_lines(expected, printed), \
            f"{where}: the error is not the one shown\n{printed}"


def run_page(path: Path, kinds=RUNNABLE) -> int:
    ns: dict = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    every = fences(path)
    found = [f for f in every if f.kind in kinds]
    for fence in found:
        kind, line, code, file = fence.kind, fence.line, fence.text, fence.file
        where = f"{path.relative_to(ROOT)}:{line}"
        needs = fence.info.get("needs")
        if isinstance(needs, str) and importlib.util.find_spec(needs) is None:
            continue  # an optional dependency's example: runs where it is installed
        if file:
            Path(file).write_text(code, encoding="utf-8")
        if kind == "python" and file:
            continue  # a module for later blocks to import
        if kind == "python":
            run_python(code, ns, where)
        elif kind == "pycon":
            run_pycon(code, ns, where, line)
        elif kind == "console":
            run_console(code, where)
        elif kind == "tdsl":
            shown = re.match(r"# (samples/\w+\.tdsl)\n", code)
            if shown:
                sample = (ROOT / shown.group(1)).read_text(encoding="utf-8")
                assert code[shown.end():] in sample, \
                    f"{where}: the block is not {shown.group(1)} as written"
            expected = None
            if fence.info.get("error"):
                after = every[every.index(fence) + 1:]
                assert after and after[0].kind == "text", \
                    f"{where}: an error block is followed by a ```text block with the error"
                expected = after[0].text
            run_tdsl(fence, where, expected)
        elif kind == "json":
            json.loads(code)
        elif kind == "ir":
            module = adc.parse_ir(code, where)
            assert adc.print_module(module).rstrip() == code.rstrip(), \
                f"{where}: the IR does not print back as written"
    return len(found)


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_doc_examples_run(page, scratch):
    run_page(page)


README_KINDS = {"python", "console", "tdsl"}


def test_readme_examples_run(scratch):
    """Every README example runs and prints what it shows; only the shell commands of the
    Quick start, of the CNN and GPT samples and of the MPI run (tests/test_train_samples.py,
    tests/test_samples_models.py, tests/test_distributed.py) and the layout tree are not run
    here."""
    readme = ROOT / "README.md"
    others = [f for f in fences(readme) if f.kind not in README_KINDS]
    assert [f.kind for f in others] == ["sh", "sh", "sh", "text"], others
    assert run_page(readme, kinds=README_KINDS) >= 10


@pytest.mark.parametrize("name", OWN_PAGES)
def test_guide_pages_exist_and_have_examples(name):
    path = ROOT / "docs" / name
    assert path.exists(), name
    kinds = {b.kind for b in blocks(path) if not b.file}
    assert kinds & {"python", "pycon"}, f"{name} has no runnable Python example"


def test_fence_reader(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("x\n```python\na = 1\n```\n```text\nno\n```\n```pycon\n>>> a\n1\n```\n")
    assert [(b.kind, b.line) for b in blocks(page)] == [("python", 3), ("pycon", 9)]
    assert _matches("out ... 0.46", [_loose("out   ()  float32   0.462856")])
    assert not _matches("grad_W1", ["grad_b1"])
    page.write_text('```tdsl file=a.tdsl run="--fn g --bind T=3" error\nx\n```\n')
    (fence,) = blocks(page)
    assert (fence.file, fence.info) == ("a.tdsl", {"file": "a.tdsl", "run": "--fn g --bind T=3",
                                                   "error": True})
    assert _contains_lines("a\n  ^\n", "note\na\n  ^  \nmore")
    assert not _contains_lines("a\n  ^\n", "a\n   ^")
    assert not _contains_lines("a\n  ^\n", "a\nb\n  ^")


def test_language_reference_is_linked_and_checked():
    """docs/tdsl.md is the language's reference: README and the grammar's header point at
    it, and its examples include programs run in reverse mode and errors checked as shown."""
    assert "(docs/tdsl.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    header = (ROOT / "grammar" / "tdsl.lark").read_text(encoding="utf-8").splitlines()[0]
    assert "docs/tdsl.md" in header
    examples = blocks(ROOT / "docs" / "tdsl.md", {"tdsl"})
    assert sum("run" in b.info for b in examples) >= 5
    assert sum("error" in b.info for b in examples) >= 2


def test_ops_md_lists_every_op():
    """docs/ops.md names each built-in op in a code span of its tables."""
    from adcompiler.ops.registry import REGISTRY
    builtin = {n for n, d in REGISTRY.items() if d.infer.__module__.startswith("adcompiler.ops")}
    text = (ROOT / "docs" / "ops.md").read_text()
    named = {w for span in re.findall(r"`([^`]+)`", text)
             for w in re.findall(r"[A-Za-z_]\w*", span)}
    assert len(builtin) > 60 and sorted(builtin - named) == []
