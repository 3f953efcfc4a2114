"""Runs on Slurm through ``submitit``: one Slurm job per run, which trains it with
:func:`~alf.experiments.launchers.remote.train_to_end`. Job ids are recorded in the
controller's directory (``.launcher/jobs.json``), so a controller run again follows the
jobs still queued or running instead of submitting duplicates. With
:attr:`~alf.experiments.launchers.base.LaunchOptions.slurm_local`, submitit's local
executor runs the jobs as processes of this machine (no Slurm: tests and rehearsals).
"""

from __future__ import annotations

import os
import shutil
import signal
from typing import Any

from alf.errors import install_hint
from alf.experiments.launcher import RunSpec
from alf.experiments.launchers.base import JobRecord, LauncherError, LaunchOptions
from alf.experiments.launchers.remote import ClusterJob, train_to_end
from alf.run_dir import layout

__all__ = ["SubmititJob", "SubmititLauncher"]


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process of this machine (a zombie, left to an init that
    does not reap, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return layout.pid_alive(pid)


class SubmititLauncher:
    """Submits each run as a Slurm job (or a local submitit job).

    Args:
        options: the partition, time, CPUs, GPUs, retries, the controller's directory.

    Raises:
        LauncherError: ``submitit`` is not installed, a ``--slurm_param`` is not
            ``name=value``, or there is no Slurm here (without ``slurm_local``).
    """

    def __init__(self, options: LaunchOptions) -> None:
        try:
            import submitit  # noqa: F401 - checked here, used on the first submission
        except ImportError:
            raise LauncherError(
                f"--launcher=slurm needs submitit: {install_hint('slurm')}"
            ) from None
        self.options = options
        self.record = JobRecord(options.root_dir)
        self.folder = os.path.join(os.path.abspath(options.root_dir), ".launcher", "slurm")
        extra: dict[str, str] = {}
        for param in options.slurm_params:
            name, sep, value = param.partition("=")
            if not sep or not name:
                raise LauncherError(f"--slurm_param '{param}': expected name=value")
            extra[name] = value
        if not options.slurm_local and shutil.which("sbatch") is None:
            raise LauncherError(
                "--launcher=slurm: no Slurm here (sbatch not found); run the command on the "
                "cluster's login node, or add --slurm_local to rehearse on this machine"
            )
        self.backend = "local" if options.slurm_local else "slurm"
        self._extra = extra
        self._executor: Any = None

    @property
    def executor(self) -> Any:
        """The submitit executor, made on the first submission (it creates its folder,
        which nothing may write before the controller checked its directory)."""
        if self._executor is not None:
            return self._executor
        import submitit

        options = self.options
        if options.slurm_local:
            self._executor = submitit.LocalExecutor(folder=self.folder)
            self._executor.update_parameters(timeout_min=options.time_min)
            return self._executor
        self._executor = submitit.AutoExecutor(folder=self.folder, cluster="slurm")
        params: dict[str, Any] = dict(
            timeout_min=options.time_min,
            cpus_per_task=options.cpus_per_run,
            gpus_per_node=options.gpus_per_run,
            tasks_per_node=1,
            nodes=1,
            name="alf",
            slurm_additional_parameters=self._extra,
        )
        if options.partition:
            params["slurm_partition"] = options.partition
        if options.mem_gb:
            params["mem_gb"] = options.mem_gb
        self._executor.update_parameters(**params)
        return self._executor

    def launch(self, spec: RunSpec) -> SubmititJob:
        """Follows the job recorded for ``spec.run_dir`` if it still runs, else submits
        one."""
        job = SubmititJob(self, spec)
        recorded = self.record.get(spec.run_dir)
        if recorded and recorded.get("backend") == self.backend:
            job.attach(recorded["job_id"])
            if job._running():
                job.adopted = True
                return job
        job._submit()
        return job

    def submit(self, spec: RunSpec) -> Any:
        """Submits one job training ``spec``; records its id."""
        job = self.executor.submit(train_to_end, spec)
        self.record.put(spec.run_dir, {"backend": self.backend, "job_id": str(job.job_id)})
        return job

    def job_of(self, job_id: str) -> Any:
        """The submitit job of a recorded id."""
        import submitit
        from submitit.local.local import LocalJob

        if self.backend == "local":
            return LocalJob(self.folder, job_id)
        return submitit.SlurmJob(self.folder, job_id)


class SubmititJob(ClusterJob):
    """A run trained by submitit jobs, resubmitted when one dies.

    Args:
        launcher: the launcher that submits its jobs.
        spec: the run.
    """

    def __init__(self, launcher: SubmititLauncher, spec: RunSpec) -> None:
        super().__init__(spec, retries=launcher.options.retries, adopted=False)
        self.launcher = launcher
        self.job: Any = None

    def attach(self, job_id: str) -> None:
        """Follows the recorded job ``job_id``."""
        self.job = self.launcher.job_of(job_id)
        self._set_pid()

    def _set_pid(self) -> None:
        job_id = str(self.job.job_id)
        self.pid = int(job_id) if job_id.isdigit() and self.launcher.backend == "local" else 0

    def _running(self) -> bool:
        if self.job is None:
            return False
        if self.launcher.backend == "local" and getattr(self.job, "_process", None) is None:
            return bool(self.pid) and _alive(self.pid)  # a job of an earlier controller
        return not self.job.done()

    def _result(self) -> int | None:
        try:
            value = self.job.result()
        except Exception:  # noqa: BLE001 - a job that died has no result, whatever the reason
            return None
        return int(value) if isinstance(value, int) else None

    def _submit(self) -> None:
        self.job = self.launcher.submit(self.spec)
        self._set_pid()

    def _cancel(self, hard: bool) -> None:
        if self.job is None:
            return
        if self.launcher.backend == "local":  # submitit's job controller, on this machine
            if not (self.pid and _alive(self.pid)):
                return
            if hard:  # the controller, then the job it runs (which it leaves behind)
                for pid in (self.pid, *_children(self.pid)):
                    _signal(pid, signal.SIGKILL)
            else:  # forwarded to the job, whose training checkpoints and exits
                _signal(self.pid, signal.SIGTERM)
            return
        self.job.cancel(check=False)  # scancel: SIGTERM, then SIGKILL after KillWait


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(word) for word in f.read().split()]
    except OSError:
        return []


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
