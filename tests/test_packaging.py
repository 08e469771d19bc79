"""What a new user meets first: ``adc --version``, the license, the package metadata, the
README's two commands (and CI running the second as written), and a wheel and an sdist that
carry the license, the grammar and the typing markers and install in a fresh environment."""
from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

import adcompiler

ROOT = Path(__file__).resolve().parent.parent
COPY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "build", "dist", "*.egg-info",
                                     ".hypothesis", ".pytest_cache", ".venv", "*.pyc")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.search(r"## Quick start\n\n```sh\n(.*?)\n```", text, re.S).group(1).splitlines()


def test_version_prints_and_exits_0():
    proc = subprocess.run([sys.executable, "-m", "adcompiler", "--version"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"adc {adcompiler.__version__}"
    assert adcompiler.__version__ == pyproject()["project"]["version"] \
        == importlib.metadata.version("adcompiler")


def test_license_and_metadata():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n") and "The adcompiler authors" in text
    project = pyproject()["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert "Typing :: Typed" in project["classifiers"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639


def test_quick_start_installs_only_what_training_needs_and_ci_runs_the_test_command():
    train, test = readme_commands()
    assert train.startswith("python -m pip install -e '.[samples]' && ")
    assert test == "python -m pip install -e '.[test]' && python -m pytest -q"
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.startswith("#")]
    assert ci[-1] == test
    extras = pyproject()["project"]["optional-dependencies"]
    assert extras["samples"] == ["scikit-learn>=1.0"]


def _built(tmp_path: Path) -> tuple[Path, Path]:
    """An sdist and a wheel built by ``python -m build`` from a copy of the source tree
    (no build folders left in the checkout)."""
    pytest.importorskip("build")
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("the build needs setuptools >= 77 (PEP 639 license metadata)")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=COPY_IGNORE, symlinks=True)
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(tmp_path / "dist"), str(src)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return sdist, wheel


def test_wheel_and_sdist_carry_license_grammar_and_typing(tmp_path):
    sdist, wheel = _built(tmp_path)
    version = adcompiler.__version__
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"adcompiler-{version}.dist-info/METADATA").decode()
    assert {f"adcompiler-{version}.dist-info/licenses/LICENSE", "adcompiler/py.typed",
            "adc_runtime/py.typed", "adcompiler/grammar/tdsl.lark",
            "adcompiler/grammar/ir.lark", "adc_runtime/datafiles.py"} <= names
    assert "License-Expression: MIT" in meta and "Classifier: Typing :: Typed" in meta
    assert not any(n.startswith(("tests/", "samples/")) for n in names)
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    assert {"LICENSE", "pyproject.toml", "README.md", "grammar/tdsl.lark", "grammar/ir.lark",
            "adcompiler/py.typed", "runtime/py.typed"} <= members
    pytest.importorskip("twine")
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def _fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin" / "python"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_built_package_installs_in_a_fresh_venv_and_runs(tmp_path, kind):
    sdist, wheel = _built(tmp_path)
    python = _fresh_venv(tmp_path / "venv")
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q",
                           str(wheel if kind == "wheel" else sdist)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    adc = tmp_path / "venv" / "bin" / "adc"
    proc = subprocess.run([str(adc), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"adc {adcompiler.__version__}"
    proc = subprocess.run([str(adc), "run", str(ROOT / "samples" / "backprop_tiny.tdsl"),
                           "--inputs", str(ROOT / "samples" / "backprop_tiny.json")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^out\s+\(\)\s+float32\s+0\.462856$", proc.stdout, re.M), proc.stdout
    where = subprocess.run([str(python), "-c", "import adcompiler, adc_runtime; "
                            "print(adcompiler.__file__, adc_runtime.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path).stdout
    assert str(ROOT) not in where and "site-packages" in where
