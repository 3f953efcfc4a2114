"""What the sweep, the tuner and PBT need of a launcher: a :class:`Launcher` starts the
training of a :class:`~alf.experiments.launcher.RunSpec` and returns a :class:`Job`
they poll, stop and kill; :class:`LaunchOptions` are the resources a cluster job asks
for; :func:`make_launcher` builds the launcher the ``--launcher`` flag names.

A launcher must find the jobs an earlier controller started (one killed with
``kill -9``, or whose terminal closed) instead of starting duplicates, and must resume
a run whose job died (its node lost, the job killed) from the run's checkpoint, up to
:attr:`LaunchOptions.retries` times.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from alf.errors import UserError

if TYPE_CHECKING:
    from alf.experiments.launcher import RunSpec

__all__ = [
    "LAUNCHERS",
    "Job",
    "JobRecord",
    "LaunchOptions",
    "Launcher",
    "LauncherError",
    "make_launcher",
]

LAUNCHERS = ("local", "slurm", "ray")
"""The values of ``--launcher``."""

JOBS_FILE = os.path.join(".launcher", "jobs.json")
"""Where a cluster launcher records its jobs, under the sweep's (study's, population's)
directory: the run dir (relative) -> the job's id or name."""


class LauncherError(UserError, ValueError):
    """A launcher that cannot start: unknown, its package missing, its cluster not
    answering (exit status 2, nothing started)."""


class Job(Protocol):
    """A run's training as a :class:`Launcher` runs it (what the controllers need of
    :class:`~alf.experiments.launcher.RunProcess`)."""

    spec: RunSpec
    pid: int
    adopted: bool
    killed: bool
    log_path: str

    def poll(self) -> int | None:
        """The exit code, None while it runs (or is being retried)."""

    def terminate(self) -> None:
        """Asks it to checkpoint and exit."""

    def kill(self) -> None:
        """Ends it at once."""

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Waits for its end (None if ``timeout_s`` passed first)."""

    def after_kill(self) -> None:
        """Cleans up after :meth:`kill` once it ended."""

    def last_error_line(self) -> str:
        """The error of a failed run, one line."""


class Launcher(Protocol):
    """Starts runs' training. ``launch`` must adopt a training (or a cluster job) still
    running for ``spec.run_dir`` rather than start a second."""

    def launch(self, spec: RunSpec) -> Job:
        """Starts (or adopts) the training of ``spec``."""


@dataclass(frozen=True)
class LaunchOptions:
    """The resources and behaviour of cluster jobs (one job per run).

    Attributes:
        launcher: ``local``, ``slurm`` or ``ray``.
        root_dir: the controller's directory (the jobs' record and Slurm's logs).
        partition: the Slurm partition (None: the cluster's default).
        time_min: the Slurm time limit of a job, minutes.
        cpus_per_run: CPUs of a job.
        gpus_per_run: GPUs of a job.
        mem_gb: memory of a Slurm job, GB (None: the partition's default).
        retries: how often a run whose job died is resubmitted (it resumes from its
            checkpoint).
        slurm_params: more ``sbatch`` settings, ``name=value`` (e.g. ``account=rl``).
        slurm_local: run the Slurm jobs with submitit's local executor (no Slurm; for
            tests and rehearsals).
        ray_address: the Ray cluster (``host:port`` or ``auto``).
        ray_timeout_s: how long to wait for the Ray cluster to answer.
    """

    launcher: str = "local"
    root_dir: str = "."
    partition: str | None = None
    time_min: int = 60
    cpus_per_run: int = 1
    gpus_per_run: int = 0
    mem_gb: int | None = None
    retries: int = 2
    slurm_params: tuple[str, ...] = field(default_factory=tuple)
    slurm_local: bool = False
    ray_address: str = "auto"
    ray_timeout_s: float = 20.0


def make_launcher(options: LaunchOptions) -> Launcher:
    """The launcher ``options.launcher`` names.

    Raises:
        LauncherError: an unknown launcher, its package missing, a Ray cluster that does
            not answer, a bad resource value.
    """
    if options.launcher not in LAUNCHERS:
        raise LauncherError(
            f"--launcher '{options.launcher}': unknown; expected one of {', '.join(LAUNCHERS)}"
        )
    if options.cpus_per_run < 1 or options.gpus_per_run < 0 or options.retries < 0:
        raise LauncherError("--cpus_per_run must be >= 1, --gpus_per_run and --retries >= 0")
    if options.time_min < 1:
        raise LauncherError(f"--time_min must be >= 1, got {options.time_min}")
    if options.launcher == "local":
        from alf.experiments.launchers.local import LocalLauncher

        return LocalLauncher()
    if options.launcher == "slurm":
        from alf.experiments.launchers.submitit_launcher import SubmititLauncher

        return SubmititLauncher(options)
    from alf.experiments.launchers.ray_launcher import RayLauncher

    return RayLauncher(options)


class JobRecord:
    """The ``.launcher/jobs.json`` of a controller's directory: which job (Slurm job id,
    Ray actor name) trains each run dir, so that a controller run again finds them.

    Args:
        root_dir: the controller's directory.
    """

    def __init__(self, root_dir: str) -> None:
        self.path = os.path.join(os.path.abspath(root_dir), JOBS_FILE)

    def read(self) -> dict[str, dict[str, str]]:
        """Run dir (relative to the root) -> the job's fields."""
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, run_dir: str) -> dict[str, str] | None:
        """The job recorded for ``run_dir``."""
        return self.read().get(self._key(run_dir))

    def put(self, run_dir: str, fields: dict[str, str]) -> None:
        """Records the job of ``run_dir`` (atomically: a write and a rename)."""
        data = self.read()
        data[self._key(run_dir)] = fields
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

    def _key(self, run_dir: str) -> str:
        root = os.path.dirname(os.path.dirname(self.path))
        return os.path.relpath(os.path.abspath(run_dir), root)
