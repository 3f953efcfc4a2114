"""The modules of ``alf.environments`` import each other without a cycle, and at module
level: ``create_environment -> backends -> subprocess_environment -> sync_vector``, never
back (the subprocess backend hands its workers the builder they need)."""

from __future__ import annotations

import ast
from pathlib import Path

import alf.environments

PACKAGE = "alf.environments"
PACKAGE_DIR = Path(alf.environments.__file__).parent


def _module_names() -> dict[str, Path]:
    """``{dotted name: path}`` of the package (its ``__init__``) and its modules."""
    names = {}
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        names[PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"] = path
    return names


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module name of a ``from ... import`` (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: Path, module: str, modules: set[str]) -> list[tuple[str, int, bool]]:
    """``(imported module of the package, line, inside a function)`` for every import
    of ``path`` (at any depth, but under ``if TYPE_CHECKING:``, which never runs)."""
    is_package = module == PACKAGE
    found: list[tuple[str, int, bool]] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        source = _absolute(node, module, is_package)
        names = []
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            # ``from alf.environments import suite_gym`` imports the module suite_gym;
            # ``from alf.environments import create_environment`` the package's name.
            names.append(submodule if submodule in modules else source)
        return names

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in targets(node):
                if name in modules and name != module:
                    found.append((name, node.lineno, in_function))
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return found


def _graph() -> dict[str, set[str]]:
    """Each module's imports of the package's modules, at module level and in functions."""
    names = _module_names()
    return {
        module: {name for name, _, _ in _imports(path, module, set(names))}
        for module, path in names.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (its modules in import order, the first repeated at the
    end), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return None


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"a"}}) == ["a", "a"]


def test_the_environment_modules_import_each_other_without_a_cycle() -> None:
    graph = _graph()
    assert len(graph) > 15, sorted(graph)
    # The chain the subprocess backend used to close into a circle.
    assert "alf.environments.backends" in graph["alf.environments.create_environment"]
    assert "alf.environments.subprocess_environment" in graph["alf.environments.backends"]
    assert "alf.environments.sync_vector" in graph["alf.environments.subprocess_environment"]
    cycle = _cycle(graph)
    assert cycle is None, "import cycle among alf.environments: " + " -> ".join(cycle or [])


def test_the_environment_modules_import_each_other_at_module_level() -> None:
    """No import of one of the package's modules is deferred into a function (a deferred
    import is how a cycle hides)."""
    names = _module_names()
    deferred = [
        f"{path.name}:{line} imports {name} inside a function"
        for module, path in names.items()
        for name, line, in_function in _imports(path, module, set(names))
        if in_function
    ]
    assert not deferred, "\n".join(deferred)
