"""The compiler and the runtime stay apart: importing any compiler module (frontend, IR,
ops, passes, emitters, memory model, rematerialization) loads nothing of `adc_runtime` but
the leaf modules both sides share (`SHARED`: the root of the exception hierarchy), so the
runtime can change without the compiler and an emitted program needs only the runtime.
The runtime never imports the compiler."""
from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import adcompiler

ROOT = Path(__file__).resolve().parent.parent
COMPILER_PACKAGES = ("frontend", "ir", "ops", "passes", "emit", "memory", "remat")
# runtime modules that import nothing and that the compiler may import at module level
SHARED = ["adc_runtime", "adc_runtime.errors"]


def compiler_modules() -> list[str]:
    names = []
    for pkg in COMPILER_PACKAGES:
        path = [str(Path(adcompiler.__file__).parent / pkg)]
        names.append(f"adcompiler.{pkg}")
        names += [f"adcompiler.{pkg}.{m.name}" for m in pkgutil.iter_modules(path)]
    return names


def test_compiler_modules_do_not_import_the_runtime():
    mods = compiler_modules()
    assert "adcompiler.passes.reverse" in mods and "adcompiler.emit.python" in mods
    code = ("import sys, importlib\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith('adc_runtime')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == repr(SHARED)


def test_runtime_does_not_import_the_compiler():
    code = ("import sys, importlib, pkgutil, adc_runtime\n"
            "for m in pkgutil.walk_packages(adc_runtime.__path__, 'adc_runtime.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('adcompiler')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
