"""Launching ``alf.bin.train`` as a child process in a run directory, as the sweep and
the tuner do: one torch thread by default, output to the run's ``train.log``, its own
session (so a terminal's Ctrl-C reaches only the parent, which stops the child with one
SIGTERM: a checkpoint, then exit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any

from alf.run_dir import layout

__all__ = ["RunProcess", "RunSpec", "check_bindings", "run_progress", "run_stopping_on_signals"]

STOP_WAIT_S = 300.0
"""How long stopped runs get to write their checkpoints before they are killed."""


@dataclass(frozen=True)
class RunSpec:
    """What one training run is.

    Attributes:
        run_dir: its root directory.
        conf: the gin config file (None: bindings only).
        conf_params: ``--conf_param`` bindings, in order (later ones win).
        threads: torch threads of the child (``OMP_NUM_THREADS``; the config's
            ``TrainerConfig.torch_num_threads``, if set, wins).
    """

    run_dir: str
    conf: str | None
    conf_params: tuple[str, ...] = ()
    threads: int = 1
    extra_env: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        """The ``python -m alf.bin.train`` command line."""
        cmd = [sys.executable, "-m", "alf.bin.train", f"--root_dir={self.run_dir}"]
        if self.conf:
            cmd.append(f"--conf={self.conf}")
        cmd += [f"--conf_param={param}" for param in self.conf_params]
        return cmd


class RunProcess:
    """A running ``alf.bin.train`` child of a :class:`RunSpec`.

    Args:
        spec: the run.
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        os.makedirs(spec.run_dir, exist_ok=True)
        self.log_path = os.path.join(spec.run_dir, layout.LOG_FILE)
        self._log: IO[str] = open(self.log_path, "a")  # noqa: SIM115 - closed in wait/poll
        self._log.write(f"\n$ {' '.join(spec.command())}\n")
        self._log.flush()
        env = os.environ.copy()
        threads = str(spec.threads)
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1")
        env.update(spec.extra_env)
        self.start_time = time.monotonic()
        self._terminated = False
        self.process = subprocess.Popen(
            spec.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        code = self.process.poll()
        if code is not None and not self._log.closed:
            self._log.close()
        return code

    def terminate(self) -> None:
        """Asks the run to checkpoint and exit (one SIGTERM; repeated calls do nothing)."""
        if not self._terminated and self.process.poll() is None:
            self._terminated = True
            self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """Kills the run and its process group at once (no checkpoint)."""
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Waits for the exit (None if ``timeout_s`` passed first)."""
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    def last_error_line(self) -> str:
        """The ``alf.bin.train: error:`` line of the log, or its last non-empty line."""
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [line.rstrip() for line in f.readlines()[-200:] if line.strip()]
        except OSError:
            return ""
        for line in reversed(lines):
            if "alf.bin.train: error:" in line:
                return line.split("alf.bin.train: error:", 1)[1].strip()
        return lines[-1] if lines else ""


def run_progress(run_dir: str) -> dict[str, Any]:
    """What a run has done so far, from its files: ``env_steps``, ``iteration``,
    ``elapsed_s``, ``last_eval`` and ``last_eval_env_steps`` (None where unknown), and
    the ``budget`` in env steps when the run recorded it."""
    records = layout.read_progress(run_dir)
    out: dict[str, Any] = {
        "env_steps": 0,
        "iteration": 0,
        "elapsed_s": None,
        "last_eval": None,
        "last_eval_env_steps": None,
        "budget": None,
    }
    for record in records:
        out["env_steps"] = max(out["env_steps"], int(record.get("env_steps", 0)))
        out["iteration"] = max(out["iteration"], int(record.get("iteration", 0)))
        if "elapsed_s" in record:
            out["elapsed_s"] = record["elapsed_s"]
        if "eval/average_return" in record:
            out["last_eval"] = float(record["eval/average_return"])
            out["last_eval_env_steps"] = int(record.get("env_steps", 0))
    status = layout.read_status(run_dir) or {}
    if status.get("num_env_steps"):
        out["budget"] = int(status["num_env_steps"])
    if status.get("env_steps") is not None:
        out["env_steps"] = max(out["env_steps"], int(status["env_steps"]))
    return out


def check_bindings(conf: str | None, conf_params: Sequence[str]) -> str | None:
    """Loads ``conf`` with ``conf_params`` as a run would, in this process; returns the
    error as one line (None when they load). Catches unknown names and parameters and
    syntax errors before any run is launched."""
    from alf import config as alf_config
    from alf.configurables import import_configurables

    import_configurables()
    try:
        alf_config.load_config(conf, list(conf_params))
    except alf_config.ConfigError as err:
        return " ".join(str(err).split())
    return None


def run_stopping_on_signals(
    run: Callable[[], int],
    *,
    request_stop: Callable[[], None],
    running: Callable[[], list[RunProcess]],
    announce: Callable[[str], None],
) -> int:
    """Calls ``run()`` with SIGINT/SIGTERM handled as a launcher of runs should: the
    first signal calls ``request_stop`` (the caller then terminates its runs, which
    checkpoint), a second one kills the ``running()`` runs at once. Runs still going when
    ``run`` returns or raises are terminated (killed after :data:`STOP_WAIT_S`).

    Args:
        run: the launcher's loop; returns its exit status.
        request_stop: asks the loop to stop its runs and return.
        running: the runs still going.
        announce: called with the first signal's name.
    """
    signals = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            announce(signal.Signals(signum).name)
            request_stop()
        else:
            for process in running():
                process.kill()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for process in running():  # e.g. after an exception in the loop
            process.terminate()
            if process.wait(STOP_WAIT_S) is None:
                process.kill()
