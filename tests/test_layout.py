"""The package layout: no import circles, dependencies that point one way, few modules at the
root, and a public surface that a move cannot shrink.

The import graph is read from the source with `ast` (every ``import`` and ``from ... import``,
those inside functions included; ``if TYPE_CHECKING:`` blocks are left out, since they never
run) and checked with networkx's cycle search. ``from . import x`` is an edge to the module
``x`` when it is one, else to the package.
"""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import networkx as nx
import pytest

import adcompiler

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"adcompiler": ROOT / "adcompiler", "adc_runtime": ROOT / "runtime"}

# Outer layers, highest first: a module may import its own layer and those below it.
# The compiler core (front ends, IR, ops, passes, remat, memory, emitters, files, labels,
# plugins)
# is one layer: inside it only the absence of circles is checked.
LAYERS = {"cli": 4, "__main__": 4, "__init__": 4, "training": 3, "api": 2, "diagnostics": 0}
CORE = 1
# Upward imports allowed, with the reason: the train-step pass builds each optimizer's
# update from `train.optim`'s descriptions, a leaf that imports nothing of the compiler.
ALLOWED_UP = {("adcompiler.passes.train_step", "adcompiler.training.optim")}
MAX_ROOT_MODULES = 8


def _module_names() -> dict[str, Path]:
    mods = {}
    for pkg, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = [pkg, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _runtime_imports(tree: ast.AST):
    """Import statements that can run: everything but ``if TYPE_CHECKING:`` bodies."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def import_graph() -> nx.DiGraph:
    mods = _module_names()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = nx.DiGraph()
    for mod, path in mods.items():
        graph.add_node(mod)
        is_pkg = path.name == "__init__.py"
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    parts = parts[:len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [known(f"{base}.{a.name}") if f"{base}.{a.name}" in mods
                           else known(base) for a in node.names]
            graph.add_edges_from((mod, t) for t in targets if t and t != mod)
    return graph


def _layer(mod: str) -> int:
    parts = mod.split(".")
    if parts[0] != "adcompiler":
        return -1
    return LAYERS.get(parts[1] if len(parts) > 1 else "__init__", CORE)


def test_the_import_graph_has_no_circles():
    graph = import_graph()
    assert "adcompiler.api.transforms" in graph and "adc_runtime.executor" in graph
    cycles = list(nx.simple_cycles(graph))
    assert cycles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_imports_point_down_the_layers():
    up = sorted((a, b) for a, b in import_graph().edges()
                if _layer(a) >= 0 and _layer(b) > _layer(a) and (a, b) not in ALLOWED_UP)
    assert up == [], "upward imports:\n" + "\n".join(f"{a} -> {b}" for a, b in up)


def test_the_library_never_imports_the_command_line():
    users = sorted(a for a, b in import_graph().edges()
                   if b.startswith("adcompiler.cli") and not a.startswith("adcompiler.cli")
                   and a != "adcompiler.__main__")
    assert users == []


def test_the_runtime_imports_nothing_of_the_compiler():
    edges = [(a, b) for a, b in import_graph().edges()
             if a.startswith("adc_runtime") and b.startswith("adcompiler")]
    assert edges == []


def test_no_module_imports_the_package_root():
    edges = sorted(a for a, b in import_graph().edges() if b == "adcompiler")
    assert edges == []


def test_few_modules_at_the_root():
    root = sorted(p.name for p in (ROOT / "adcompiler").glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


PUBLIC = """
Activity AdcError Batch Block Builder CSE Imported from_onnx from_torch Canonicalize Compiled CompiledStep DCE Forward
Function FunctionBuilder FunctionPass HVP Inline JVP Loc Module ModulePass Op OpDef Option
PluginError Remat Reverse RunError ScanInputs ShapeError TensorType TrainResult TrainStep
UnboundDimError Value VerifyError auto_jacobian blas_thread_count blas_threads check_grads
compile_file compile_source emit_dot emit_python function get_op get_pass grad hessian hvp
jacfwd jacrev jit jvp load load_compiled load_plugins lookup_op ops optim parse_ir
parse_pipeline parse_tdsl pass_spec print_function print_module register_op register_pass run
run_pipeline runner set_blas_threads show tensor_type train train_step value_and_grad verify
vjp vmap
""".split()


def test_every_public_name_is_still_there():
    """Each public name resolves, also after every module of the package was imported: a
    subpackage named like a public function (``adcompiler.train``) would replace it."""
    missing = [n for n in PUBLIC if n not in adcompiler.__all__]
    assert missing == []
    code = ("import importlib, pkgutil, types, adcompiler as adc\n"
            "for m in pkgutil.walk_packages(adc.__path__, 'adcompiler.'):\n"
            "    importlib.import_module(m.name)\n"
            f"for n in {PUBLIC!r}:\n"
            "    assert (n in ('optim', 'ops')) == isinstance(getattr(adc, n), types.ModuleType), n\n"
            "for n in ('sgd', 'adam', 'adamw', 'cosine', 'warmup', 'constant'):\n"
            "    getattr(adc.optim, n)\n"
            "print('ok')")
    out = subprocess.run(["python", "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "ok", out.stderr


def _architecture_tree() -> set[str]:
    """The folders and root modules drawn in docs/architecture.md's package tree."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## The packages", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    drawn, stack = set(), []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        name = line.split()[0]
        del stack[depth:]
        path = "/".join(stack + [name.rstrip("/")])
        drawn.add(path + ("/" if name.endswith("/") else ""))
        if name.endswith("/"):
            stack.append(name.rstrip("/"))
    return drawn


def test_the_architecture_tree_matches_the_files():
    files = subprocess.run(["git", "ls-files", "adcompiler", "runtime"], capture_output=True,
                           text=True, cwd=ROOT, check=True).stdout.split()
    actual = set()
    for f in files:
        if not f.endswith(".py"):
            continue
        parts = f.split("/")
        actual.update("/".join(parts[:k]) + "/" for k in range(1, len(parts)))
        if len(parts) == 2 and parts[0] == "adcompiler":
            actual.add(f)
    assert _architecture_tree() == actual


def test_the_wheel_lists_every_package():
    """pyproject.toml names its packages one by one (two live outside `adcompiler/`): a
    package missing from the list would be missing from the wheel."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(meta["tool"]["setuptools"]["packages"])
    actual = {"adcompiler.grammar"}
    for pkg, folder in SOURCES.items():
        for init in folder.rglob("__init__.py"):
            actual.add(".".join([pkg, *init.parent.relative_to(folder).parts]))
    assert listed == actual


def test_no_op_family_module_is_named_like_an_op():
    """`adc.ops.NAME` is the op NAME; a submodule of `adcompiler.ops` with that name would
    replace it once imported."""
    import pkgutil

    from adcompiler import ops
    from adcompiler.ops.registry import REGISTRY
    assert not {m.name for m in pkgutil.iter_modules(ops.__path__)} & set(REGISTRY)
    assert adcompiler.ops.softmax.__name__ == "softmax"
