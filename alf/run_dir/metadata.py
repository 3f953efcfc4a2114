"""``run_info.json``: how a run was started and resumed.

:func:`record_run_start` writes, once a run's trainer is built (rank 0 only): the command
line, the start time, the git revision of the ALF checkout (and its ``git diff HEAD``, in
``code.diff``, when not empty), the versions of Python, ALF and the main packages, the
host, device and CPUs, the environment, algorithm and seed, and the experiment trackers'
run ids. A resumption keeps that record and appends its own command, time and revision
to ``resumes``. A run trained on datasets records them (:func:`record_offline_data`):
``offline_datasets`` (each one's name, path, Minari id, size and reference returns) and
``reference_returns`` (``{"random": R, "expert": R, "dataset": name}``, the first
dataset's that records both), from which ``alf.bin.report`` and ``alf.bin.plot`` compute
D4RL-normalised scores.

Nothing here can fail a run because of git: every git call has a timeout, and a missing
git, a directory that is not a checkout, or a timeout leave the git fields null. The
module imports nothing heavy (torch only to name a GPU).
"""

from __future__ import annotations

import ast
import datetime
import importlib.metadata
import os
import platform
import shlex
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from alf.run_dir import layout

__all__ = [
    "RunSettings",
    "GIT_TIMEOUT_S",
    "GitInfo",
    "git_info",
    "package_versions",
    "read_reference_returns",
    "record_offline_data",
    "record_run_start",
    "shell_command",
    "stored_tracker_info",
]

GIT_TIMEOUT_S = 3.0
"""Seconds one git call may take before its fields are left null."""

_PACKAGES = ("torch", "gymnasium", "numpy", "mujoco", "envpool")
"""Distributions whose versions are recorded (null when not installed)."""


@dataclass(frozen=True)
class GitInfo:
    """The state of a git checkout (all None when it is not one, or git failed)."""

    root: str | None = None
    revision: str | None = None
    diff: str | None = None

    @property
    def dirty(self) -> bool | None:
        """Whether tracked files differ from the revision (None: unknown)."""
        return None if self.diff is None else bool(self.diff)


def _git(args: Sequence[str], cwd: str, timeout_s: float) -> str | None:
    """``git args`` in ``cwd``: its stdout, or None if it failed, timed out or git is
    missing. It never takes the index lock (other processes may be using the checkout)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def git_info(path: str, *, timeout_s: float = GIT_TIMEOUT_S) -> GitInfo:
    """The git checkout that tracks ``path`` (a file or directory): its root, ``HEAD``
    revision and ``git diff HEAD`` (tracked files only).

    A path inside a checkout but not tracked by it (e.g. a package installed in an
    ignored virtual environment) is not the checkout's code: all fields are None then.
    """
    path = os.path.abspath(path)
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    if not os.path.isdir(directory):
        return GitInfo()
    out = _git(["rev-parse", "--show-toplevel", "HEAD"], directory, timeout_s)
    lines = (out or "").split()
    if len(lines) != 2:
        return GitInfo()
    root, revision = lines
    if _git(["ls-files", "--error-unmatch", "--", path], directory, timeout_s) is None:
        return GitInfo()
    diff = _git(["diff", "HEAD", "--no-color", "--no-ext-diff"], root, timeout_s)
    return GitInfo(root=root, revision=revision, diff=diff)


def _alf_git_info(timeout_s: float) -> GitInfo:
    # This file's package, not ``alf.__file__``: a folder named ``alf`` in the current
    # directory can shadow the package as a namespace package without a file.
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return git_info(package_dir, timeout_s=timeout_s)


def shell_command(argv: Sequence[str] | None = None) -> str:
    """The command line of this process, quoted so a shell runs it again (with the same
    working directory): ``python -m alf.bin.train ...`` for ``-m`` runs, ``python
    script.py ...`` for scripts, and ``argv`` itself for console scripts (``alf-train``).
    """
    argv = list(sys.argv if argv is None else argv)
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        module = spec.name.removesuffix(".__main__")
        command = [sys.executable, "-m", module, *argv[1:]]
    elif argv and argv[0].endswith(".py"):
        command = [sys.executable, *argv]
    else:
        command = argv
    return shlex.join(command)


def package_versions() -> dict[str, str | None]:
    """Versions of Python, ALF, torch, gymnasium, numpy, mujoco and envpool (None when
    not installed), read from package metadata without importing the packages."""
    import alf

    versions: dict[str, str | None] = {"python": platform.python_version(), "alf": alf.__version__}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _device_name(device: Any) -> str:
    """The CPU's model, or the GPU's name for a CUDA device."""
    text = str(device)
    if not text.startswith("cuda"):
        return _cpu_model()
    try:
        import torch

        return torch.cuda.get_device_name(device)
    except Exception:  # the name is informative only
        return text


def _num_usable_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count()


def _env_name(bindings: Mapping[str, str]) -> str | None:
    """``create_environment.env_name`` of the config (its default when not bound)."""
    value = bindings.get("create_environment.env_name")
    if value is not None:
        try:
            return str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            return value
    from alf import config as alf_config

    default = alf_config.default_value("create_environment", "env_name")
    return None if default is None else str(default)


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def stored_tracker_info(root_dir: str) -> dict[str, dict[str, Any]]:
    """The ``trackers`` recorded in ``run_info.json`` (empty if none): the runs a
    resumption continues."""
    info = layout.read_metadata(root_dir) or {}
    trackers = info.get("trackers")
    return trackers if isinstance(trackers, dict) else {}


class RunSettings(Protocol):
    """The settings :func:`record_run_start` reads (``TrainerConfig`` has them)."""

    algorithm_ctor: Any
    random_seed: int


def record_run_start(
    root_dir: str,
    *,
    config: RunSettings,
    device: Any,
    world_size: int = 1,
    resumed_from: tuple[int, int] | None = None,
    trackers: Mapping[str, Mapping[str, Any]] | None = None,
    git_timeout_s: float = GIT_TIMEOUT_S,
) -> dict[str, Any]:
    """Writes ``run_info.json`` (and ``code.diff``) for a session that starts now.

    Args:
        root_dir: the run directory.
        config: the run's ``TrainerConfig`` (algorithm and seed; the environment's name
            comes from the loaded gin bindings).
        device: the training device (``torch.device`` or its name).
        world_size: ranks of a data-parallel run.
        resumed_from: ``(iteration, env_steps)`` of the checkpoint the session resumed
            (None: a fresh start, which replaces any earlier record).
        trackers: ``{name: info}`` of the started trackers (run ids), merged into the
            recorded ones.
        git_timeout_s: the limit of each git call.

    Returns:
        The record written.
    """
    from alf import config as alf_config

    previous = layout.read_metadata(root_dir) if resumed_from is not None else None
    resumed = None
    if resumed_from is not None:
        resumed = {"iteration": resumed_from[0], "env_steps": resumed_from[1]}
    git = _alf_git_info(git_timeout_s)
    session = {
        "argv": list(sys.argv),
        "command": shell_command(),
        "cwd": os.getcwd(),
        "git_revision": git.revision,
        "git_dirty": git.dirty,
    }
    if previous is not None and "start_time" in previous:
        resumes = previous.get("resumes")
        resumes = resumes if isinstance(resumes, list) else []
        resumes.append({**session, "time": _now(), **(resumed or {})})
        info = {**previous, "resumes": resumes}
    else:
        info = {
            "framework": "alf",
            **session,
            "start_time": _now(),
            "git_root": git.root,
            "code_diff": layout.CODE_DIFF_FILE if git.diff else None,
            "versions": package_versions(),
            "host": socket.gethostname(),
            "device": str(device),
            "device_name": _device_name(device),
            "num_cpus": os.cpu_count(),
            "num_usable_cpus": _num_usable_cpus(),
            "world_size": world_size,
            "env_name": _env_name(alf_config.current_bindings()),
            "algorithm": _callable_name(config.algorithm_ctor),
            "seed": config.random_seed,
            "trackers": {},
            "resumes": [],
        }
        if resumed is not None:  # a run from before run_info.json was written
            info["resumed_from"] = resumed
        diff_path = os.path.join(root_dir, layout.CODE_DIFF_FILE)
        if git.diff:
            _write_text(diff_path, git.diff)
        elif os.path.exists(diff_path):  # an earlier start's
            os.remove(diff_path)
    recorded = info.get("trackers")
    info["trackers"] = {**(recorded if isinstance(recorded, dict) else {}), **(trackers or {})}
    layout.write_json_atomic(os.path.join(root_dir, layout.METADATA_FILE), info)
    return info


def record_offline_data(root_dir: str, datasets: Sequence[Mapping[str, Any]]) -> None:
    """Adds the datasets a run trains on to its ``run_info.json`` (written by
    :func:`record_run_start` before): ``offline_datasets`` and, when one of them records
    both reference returns, ``reference_returns`` (see the module docstring).

    Args:
        root_dir: the run directory.
        datasets: each dataset's summary (``DatasetInfo.summary()``: ``name``,
            ``random_return``, ``expert_return``...).
    """
    info = layout.read_metadata(root_dir) or {}
    info["offline_datasets"] = [dict(d) for d in datasets]
    info.pop("reference_returns", None)
    for dataset in datasets:
        low, high = dataset.get("random_return"), dataset.get("expert_return")
        if _is_number(low) and _is_number(high) and low != high:
            info["reference_returns"] = {
                "random": float(low),
                "expert": float(high),
                "dataset": dataset.get("name"),
            }
            break
    layout.write_json_atomic(os.path.join(root_dir, layout.METADATA_FILE), info)


def read_reference_returns(info: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(random, expert)`` of a run's ``run_info.json`` record ``info`` (its
    ``reference_returns``), or None when it records none usable."""
    refs = info.get("reference_returns")
    if not isinstance(refs, Mapping):
        return None
    low, high = refs.get("random"), refs.get("expert")
    if not (_is_number(low) and _is_number(high)) or low == high:
        return None
    return float(low), float(high)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _callable_name(ctor: Any) -> str | None:
    """``PPOAlgorithm`` for ``@PPOAlgorithm`` (also through ``functools.partial``)."""
    while hasattr(ctor, "func") and not hasattr(ctor, "__name__"):
        ctor = ctor.func
    if ctor is None:
        return None
    return getattr(ctor, "__name__", None) or type(ctor).__name__


def _write_text(path: str, text: str) -> None:
    layout.write_text_atomic(path, text)
