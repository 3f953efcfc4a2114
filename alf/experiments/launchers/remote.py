"""What runs inside a cluster job (:func:`train_to_end`), and the controller's side of
such a job (:class:`ClusterJob`): its end read from the run dir, a job that died
resubmitted so that the run resumes from its checkpoint.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from alf.experiments.launcher import RunSpec, launch
from alf.run_dir import layout

__all__ = ["ClusterJob", "train_to_end"]

_RESTARTS_IN_JOB = 3
"""How often a job resumes an adopted training that stopped under it (the training of
the job before it, writing its last checkpoint) before it gives up."""


def train_to_end(spec: RunSpec, stop: threading.Event | None = None) -> int:
    """Trains ``spec`` in this process's node until the run ends: launches
    ``alf.bin.train`` (or adopts the training still running in the run dir, e.g. the one
    of a job that died, and trains on once it stopped); returns its exit code.

    In the main thread, SIGTERM and SIGINT (a cancelled Slurm job) ask the training to
    checkpoint and exit; elsewhere (a Ray actor) ``stop`` does.

    Args:
        spec: the run.
        stop: set to stop the training with a checkpoint.
    """
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    code = 1
    for _ in range(_RESTARTS_IN_JOB + 1):
        process = launch(spec)
        code = None
        while code is None:
            if stop.is_set():
                process.terminate()
            code = process.wait(0.5)
        state = (layout.read_status(spec.run_dir) or {}).get("state")
        if stop.is_set() or not process.adopted or state == layout.RunStatus.FINISHED:
            return code
    return code


class ClusterJob:
    """The controller's handle on a run trained by cluster jobs (one at a time): the
    run's end is read from its run dir; a job that ended while the run neither
    finished, failed on its own nor was stopped by the controller is resubmitted
    (``retries`` times), and the new job resumes the run from its checkpoint.

    Subclasses say how a job is submitted, watched and cancelled.

    Args:
        spec: the run.
        retries: resubmissions allowed.
        adopted: the first job was found running (started by an earlier controller).
        out: where lines are printed.
    """

    def __init__(
        self, spec: RunSpec, *, retries: int, adopted: bool, out: Callable[[str], None] = print
    ) -> None:
        self.spec = spec
        self.retries = retries
        self.adopted = adopted
        self.killed = False
        self.log_path = os.path.join(spec.run_dir, layout.LOG_FILE)
        self.pid = 0
        self._terminated = False
        self._code: int | None = None
        self._out = out

    # ------------------------------------------------------------ subclasses
    def _running(self) -> bool:
        """Whether the current job still runs (or waits in the queue)."""
        raise NotImplementedError

    def _result(self) -> int | None:
        """The current job's return value (the training's exit code), None if unknown."""
        raise NotImplementedError

    def _submit(self) -> None:
        """Submits a new job for the run (and records it)."""
        raise NotImplementedError

    def _cancel(self, hard: bool) -> None:
        """Asks the job to stop (``hard``: at once)."""
        raise NotImplementedError

    # ------------------------------------------------------------ the Job protocol
    def poll(self) -> int | None:
        """The run's exit code once it ended, None while a job trains it."""
        if self._code is not None:
            return self._code
        if self._running():
            return None
        code = self._result()
        status = layout.read_status(self.spec.run_dir) or {}
        state = status.get("state")
        if state == layout.RunStatus.FINISHED or self._terminated or self.killed:
            self._code = 0 if code is None else code
        elif state == layout.RunStatus.FAILED and code not in (None,) and code > 0:
            self._code = code  # the training failed on its own: a retry fails again
        elif self.retries > 0:
            self.retries -= 1
            self._out(
                f"launcher: the job of {self.spec.run_dir} ended ({state or 'no status'}, "
                f"code {code}); resubmitting it, it resumes from its checkpoint "
                f"({self.retries} retries left)"
            )
            self._submit()
            return None
        else:
            self._code = code if code else 1
        return self._code

    def terminate(self) -> None:
        """Asks the job's training to checkpoint and exit."""
        if not self._terminated and self.poll() is None:
            self._terminated = True
            self._cancel(hard=False)

    def kill(self) -> None:
        """Cancels the job at once."""
        self.killed = True
        self._cancel(hard=True)

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Waits for the run's end (None if ``timeout_s`` passed first)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.5)
        return self._code

    def after_kill(self) -> None:
        """Nothing to clean here: the cluster ends the job's processes."""

    def last_error_line(self) -> str:
        """``status.json``'s error, else the log's last ``alf.bin.train: error:`` line."""
        status = layout.read_status(self.spec.run_dir) or {}
        if status.get("error"):
            return str(status["error"])
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [line.rstrip() for line in f.readlines()[-200:] if line.strip()]
        except OSError:
            return f"job ended with code {self._code}"
        return lines[-1] if lines else f"job ended with code {self._code}"
