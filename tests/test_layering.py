"""Layers point down: every ALF module imports as the first ALF import of a fresh
interpreter, the core imports nothing above it, and worker processes (async actors,
subprocess environment workers, offline data loading) never import the trainer."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import alf

ALF_DIR = Path(alf.__file__).parent

# Imports each module named on the command line in a forked child of an interpreter that
# has imported only the third-party libraries (their import time is paid once): in the
# child the module is the first ALF import. Prints the failures, one per line.
_FIRST_IMPORT_SCRIPT = r"""
import importlib, os, sys, traceback
import gin, gymnasium, numpy, torch  # noqa: F401
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException:
            lines = traceback.format_exc().strip().splitlines()
            print(f"{name}: {lines[-1]}", flush=True)
            os._exit(1)
        os._exit(0)
    os.waitpid(pid, 0)
"""

# Prints the ALF modules loaded after running the code given as argv[1].
_LOADED_SCRIPT = r"""
import sys
exec(sys.argv[1])
print("\n".join(sorted(m for m in sys.modules if m == "alf" or m.startswith("alf."))))
"""

CORE_MODULES = (
    "alf.nest",
    "alf.tensor_specs",
    "alf.data_structures",
    "alf.config",
    "alf.config_checks",
    "alf.errors",
)


def _all_modules() -> list[str]:
    names = []
    for path in sorted(ALF_DIR.rglob("*.py")):
        relative = path.relative_to(ALF_DIR.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def _loaded_after(code: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", _LOADED_SCRIPT, code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return set(result.stdout.split())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_every_module_imports_as_the_first_alf_import() -> None:
    modules = _all_modules()
    assert len(modules) > 50 and "alf.trainers.rl_trainer" in modules
    result = subprocess.run(
        [sys.executable, "-c", _FIRST_IMPORT_SCRIPT, *modules],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "", "modules that fail as the first ALF import:\n" + result.stdout


def test_the_core_imports_nothing_above_it() -> None:
    loaded = _loaded_after("; ".join(f"import {name}" for name in CORE_MODULES))
    assert loaded <= {"alf", *CORE_MODULES}, sorted(loaded - {"alf", *CORE_MODULES})


def test_an_actor_and_offline_data_do_not_import_the_trainer() -> None:
    actor = """
import cloudpickle, functools
from alf.algorithms.factory import make_algorithm
from alf.algorithms.ppo import PPOAlgorithm
from alf.configurables import ACTING_PACKAGES, import_configurables
import alf.unrollers.actor, alf.replay_buffers.offline
import_configurables(ACTING_PACKAGES)
factory = cloudpickle.dumps(functools.partial(make_algorithm, algorithm_ctor=PPOAlgorithm))
cloudpickle.loads(factory)
"""
    loaded = _loaded_after(actor)
    assert "alf.unrollers.actor" in loaded and "alf.algorithms.ppo" in loaded
    assert not {m for m in loaded if m.startswith(("alf.trainers", "alf.experiments"))}


def test_an_environment_worker_imports_only_the_environments() -> None:
    loaded = _loaded_after("import alf.environments.subprocess_environment")
    above = ("alf.algorithms", "alf.trainers", "alf.unrollers", "alf.replay_buffers")
    assert "alf.environments.subprocess_environment" in loaded
    assert not {m for m in loaded if ".".join(m.split(".")[:2]) in above}


def test_the_trainer_config_is_all_a_worker_skips() -> None:
    """An actor loads the run's config with the bindings of unregistered configurables
    skipped: every configurable registered by the training packages beyond the acting
    ones must be one an actor never builds."""
    code = """
import gin.config as g
from alf.configurables import ACTING_PACKAGES, TRAINING_PACKAGES, import_configurables
from alf.configurables import TRAINING_ONLY_CONFIGURABLES
print("ONLY", TRAINING_ONLY_CONFIGURABLES)
import_configurables(ACTING_PACKAGES)
acting = {k for k, _ in g._REGISTRY.items()}
import_configurables(TRAINING_PACKAGES)
print("EXTRA", sorted(str(k) for k in {k for k, _ in g._REGISTRY.items()} - acting))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    extra = eval(result.stdout.split("EXTRA", 1)[1])  # noqa: S307 - our own printout
    names = tuple(sorted(name.rsplit(".", 1)[-1] for name in extra))
    assert names == ("SelfPlay", "StopOnPlateau", "TrainerConfig"), extra
    assert "'SelfPlay', 'StopOnPlateau', 'TrainerConfig'" in result.stdout, result.stdout


# The ALF modules and packages each unit may import (at any level of a file, but under
# ``if TYPE_CHECKING:``): layers point down. A unit is a subpackage of alf or a
# top-level module. ``alf`` itself imports the Python API lazily, on first use.
_CORE = {"errors", "config_checks", "config", "nest", "tensor_specs", "data_structures"}
ALLOWED_IMPORTS: dict[str, set[str]] = {
    "errors": set(),
    "config_checks": {"errors"},
    "config": {"config_checks", "errors"},
    "nest": set(),
    "tensor_specs": {"config", "errors", "nest"},
    "data_structures": {"nest"},
    "saved_config": {"config", "errors"},
    "data_transformers": _CORE,
    "run_dir": {"config", "errors"},
    "utils": _CORE | {"run_dir"},
    "environments": _CORE | {"utils"},
    "networks": _CORE | {"utils"},
    "replay_buffers": _CORE | {"run_dir", "utils"},
    # Datasets (Minari's format) held as offline buffers.
    "datasets": _CORE | {"replay_buffers", "run_dir"},
    "algorithms": _CORE | {"data_transformers", "datasets", "networks", "replay_buffers", "utils"},
    # An actor process registers the acting packages (configurables) itself.
    "unrollers": _CORE | {"algorithms", "environments", "utils", "configurables", "run_dir"},
    "trainers": _CORE
    | {
        "saved_config",
        "run_dir",
        "utils",
        "environments",
        "algorithms",
        "datasets",
        "unrollers",
    },
    "export": _CORE | {"algorithms"},
    # The research tools read run directories (no torch); checking a sweep's bindings
    # before launching registers the configurables (lazily, in that function).
    "experiments": {"errors", "config", "configurables", "run_dir"},
    "api": {"config", "configurables", "run_dir", "trainers", "algorithms"},
    "alf": {"api"},
}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "alf"


def _imports(tree: ast.AST) -> list[str]:
    """The ``alf.*`` modules a file imports, outside ``if TYPE_CHECKING:`` blocks."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return [name for name in found if name.startswith("alf.")]


def test_layers_point_down() -> None:
    """Every unit of ``alf`` imports only the units below it (``ALLOWED_IMPORTS``):
    ``run_dir``, ``experiments``, ``export``, ``config_checks`` and ``errors`` included,
    and nothing below ``unrollers`` imports it."""
    wrong = []
    units = set()
    for path in sorted(ALF_DIR.rglob("*.py")):
        relative = path.relative_to(ALF_DIR.parent).with_suffix("").parts
        module = ".".join(part for part in relative if part != "__init__")
        unit = _unit(module)
        if unit in ("bin", "configurables"):
            continue  # the top: they may import anything
        units.add(unit)
        for name in _imports(ast.parse(path.read_text())):
            target = _unit(name)
            if target != unit and target not in ALLOWED_IMPORTS.get(unit, set()):
                wrong.append(f"{module} imports {name} ({unit} -> {target})")
    assert units <= set(ALLOWED_IMPORTS), sorted(units - set(ALLOWED_IMPORTS))
    assert not wrong, "\n".join(wrong)
    for lower in ("algorithms", "environments", "networks", "replay_buffers", "utils"):
        assert "unrollers" not in ALLOWED_IMPORTS[lower]
