"""``benchmarks/`` is laid out by topic: no scripts at its top level (only the shared
helpers), every module imports as ``benchmarks.<topic>.<name>`` in a fresh interpreter,
and no two benchmark modules import each other in a circle."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")
TOP_LEVEL_ALLOWED = {"__init__.py", "common.py"}
"""The only ``.py`` files at the top of ``benchmarks/``: shared helpers."""


def _modules() -> dict[str, str]:
    """Dotted name -> path of every module under ``benchmarks/``."""
    found = {}
    for root, _dirs, files in os.walk(BENCH):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, REPO)[: -len(".py")].replace(os.sep, ".")
                found[rel.removesuffix(".__init__")] = path
    return found


def _imports(path: str) -> set[str]:
    """The ``benchmarks.*`` modules ``path`` imports (at any level)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n.split(".")[0] == "benchmarks"}


def test_no_scripts_at_top_level():
    top = {n for n in os.listdir(BENCH) if n.endswith(".py")}
    assert top <= TOP_LEVEL_ALLOWED, sorted(top - TOP_LEVEL_ALLOWED)


def test_every_topic_folder_is_a_package():
    for name in os.listdir(BENCH):
        folder = os.path.join(BENCH, name)
        if os.path.isdir(folder) and not name.startswith((".", "__")):
            assert os.path.exists(os.path.join(folder, "__init__.py")), name


def test_no_module_named_like_a_package_it_may_shadow():
    # A script's folder is first on sys.path when it runs: ``mujoco.py`` there shadowed
    # the MuJoCo package (and made an import circle).
    for path in _modules().values():
        assert os.path.basename(path) not in ("mujoco.py", "gymnasium.py", "torch.py"), path


def test_no_import_cycles():
    modules = _modules()
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_every_module_imports_first_in_a_fresh_interpreter():
    # Importing a script defines its flags and functions only (main() is guarded);
    # optional peers (SB3, Sample Factory) are imported inside functions.
    names = sorted(_modules())
    code = (
        "import importlib, sys\n"
        "bad = []\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        bad.append(f'{name}: {e!r}')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    if proc.returncode:
        pytest.fail(proc.stdout + proc.stderr[-2000:])
