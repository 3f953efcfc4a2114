"""Layers point down: every ALF module imports as the first ALF import of a fresh
interpreter, the core imports nothing above it, and worker processes (async actors,
subprocess environment workers, offline data loading) never import the trainer."""

from __future__ import annotations

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
    assert names == ("StopOnPlateau", "TrainerConfig"), extra
    assert "'StopOnPlateau', 'TrainerConfig'" in result.stdout, result.stdout
