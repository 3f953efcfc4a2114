"""Launching ``alf.bin.train`` as a child process in a run directory, as the sweep and
the tuner do: one torch thread by default, output to the run's ``train.log``, its own
session (so a terminal's Ctrl-C reaches only the parent, which stops the child with one
SIGTERM: a checkpoint, then exit).

A child never outlives its launcher: on Linux it asks the kernel for a SIGTERM when its
parent dies (``prctl(PR_SET_PDEATHSIG)``), so a launcher killed with ``kill -9`` or a
closed terminal leaves runs that checkpoint and exit. A launcher that finds a run
directory still held by a live trainer (one that is writing its last checkpoint, or one
started by hand) adopts it: it waits for that process as for its own child instead of
starting a second one that would fail on the directory's lock.
"""

from __future__ import annotations

import ast
import ctypes
import errno
import fcntl
import glob
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

__all__ = [
    "RunProcess",
    "RunSpec",
    "check_bindings",
    "reached_budget",
    "requested_budget",
    "launch",
    "run_holder",
    "run_progress",
    "run_stopping_on_signals",
]

STOP_WAIT_S = 300.0
"""How long stopped runs get to write their checkpoints before they are killed."""

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SEMAPHORE_GLOB = "/dev/shm/sem.alf_{pid}-*"
"""Named semaphores of an asynchronous run's learner (``alf.unrollers.async_unroller``
names them after its pid); a SIGKILL of the run's process group leaves them behind."""


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux;
    None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request was made
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def run_holder(run_dir: str) -> int | None:
    """The pid of the live process holding ``run_dir``'s lock (training there), None
    when no process does.

    The lock is an ``flock`` the operating system drops when its holder dies, so a pid
    left in a ``status.json`` or ``.lock`` by a killed run is never taken for a live one.
    """
    path = os.path.join(run_dir, layout.LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            text = os.read(fd, 32).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def remove_semaphores_of(pid: int) -> int:
    """Removes the named semaphores an asynchronous learner with ``pid`` left in
    ``/dev/shm`` (after a SIGKILL of its process group); returns how many."""
    removed = 0
    for path in glob.glob(_SEMAPHORE_GLOB.format(pid=pid)):
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed


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
    """A running ``alf.bin.train`` child of a :class:`RunSpec`, or an adopted process
    already training in its run directory.

    Args:
        spec: the run.
        adopt_pid: the pid of a live process training in ``spec.run_dir`` (see
            :func:`run_holder`) to follow instead of starting a child.
    """

    def __init__(self, spec: RunSpec, *, adopt_pid: int | None = None) -> None:
        self.spec = spec
        os.makedirs(spec.run_dir, exist_ok=True)
        self.log_path = os.path.join(spec.run_dir, layout.LOG_FILE)
        self.start_time = time.monotonic()
        self._terminated = False
        self.killed = False
        """Whether :meth:`kill` was called (the run got no final checkpoint)."""
        self.adopted = adopt_pid is not None
        self.process: subprocess.Popen[bytes] | None = None
        if adopt_pid is not None:
            self.pid = adopt_pid
            self._log: IO[str] | None = None
            self._adopted_code: int | None = None
            return
        self._log = open(self.log_path, "a")  # noqa: SIM115 - closed in wait/poll
        self._log.write(f"\n$ {' '.join(spec.command())}\n")
        self._log.flush()
        env = os.environ.copy()
        threads = str(spec.threads)
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1")
        env.update(spec.extra_env)
        self.process = subprocess.Popen(
            spec.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=_parent_death_signal(),  # noqa: PLW1509 - no threads launch runs
        )
        self.pid = self.process.pid

    def poll(self) -> int | None:
        """The exit code, or None while it runs. An adopted process's code is not
        known: 0 when its ``status.json`` says ``finished`` or ``stopped``, else 1."""
        if self.process is None:
            if self._adopted_code is None and run_holder(self.spec.run_dir) is None:
                status = layout.read_status(self.spec.run_dir) or {}
                done = (layout.RunStatus.FINISHED, layout.RunStatus.STOPPED)
                code = status.get("exit_code", 1)
                self._adopted_code = 0 if status.get("state") in done else int(code or 1)
            return self._adopted_code
        code = self.process.poll()
        if code is not None and self._log is not None and not self._log.closed:
            self._log.close()
        return code

    def terminate(self) -> None:
        """Asks the run to checkpoint and exit (one SIGTERM; repeated calls do nothing)."""
        if not self._terminated and self.poll() is None:
            self._terminated = True
            self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """Kills the run and its process group at once (no checkpoint)."""
        self.killed = True
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            if self.adopted:  # started by hand: maybe not a process group leader
                try:
                    os.kill(self.pid, signum)
                except (ProcessLookupError, PermissionError):
                    pass

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Waits for the exit (None if ``timeout_s`` passed first)."""
        if self.process is None:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while self.poll() is None:
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                time.sleep(0.1)
            return self.poll()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    def after_kill(self) -> None:
        """Once a killed run has exited: removes the semaphores its learner left in
        ``/dev/shm`` and records ``stopped`` in its ``status.json`` (which still says
        ``running``), naming the kill."""
        remove_semaphores_of(self.pid)
        status = layout.read_status(self.spec.run_dir) or {}
        if status.get("state") in (layout.RunStatus.RUNNING, "interrupted"):
            fields = {k: v for k, v in status.items() if k not in ("state", "pid", "time")}
            layout.write_status(
                self.spec.run_dir,
                layout.RunStatus.STOPPED,
                **fields,
                killed=f"process group of pid {self.pid} killed (SIGKILL) by its launcher: "
                "no final checkpoint, a rerun resumes from the last one",
            )

    def last_error_line(self) -> str:
        """The run's error: ``status.json``'s of a failed run, else the
        ``alf.bin.train: error:`` line of the log, else its last non-empty line."""
        status = layout.read_status(self.spec.run_dir) or {}
        if status.get("state") == layout.RunStatus.FAILED and "exit_code" in status:
            return str(status.get("error", ""))  # the line alf.bin.train printed
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [line.rstrip() for line in f.readlines()[-200:] if line.strip()]
        except OSError:
            return ""
        for line in reversed(lines):
            if "alf.bin.train: error:" in line:
                return line.split("alf.bin.train: error:", 1)[1].strip()
        return lines[-1] if lines else ""


def launch(spec: RunSpec) -> RunProcess:
    """Starts the run of ``spec``, or adopts the live process already training in its
    directory (so a rerun of a sweep or tuner never fails on a run's lock)."""
    holder = run_holder(spec.run_dir)
    if holder is not None and holder > 0 and layout.pid_alive(holder):
        return RunProcess(spec, adopt_pid=holder)
    return RunProcess(spec)


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


def requested_budget(conf: str | None, conf_params: Sequence[str]) -> tuple[int, int]:
    """``(num_env_steps, num_iterations)`` a run of ``conf`` with ``conf_params`` would
    train to (0: no limit of that kind), read from the loaded bindings.

    Raises:
        alf.config.ConfigError: the config does not load.
    """
    from alf import config as alf_config
    from alf.configurables import import_configurables

    import_configurables()
    alf_config.load_config(conf, list(conf_params))
    bindings = alf_config.current_bindings()
    budget = []
    for name in ("num_env_steps", "num_iterations"):
        text = bindings.get(f"TrainerConfig.{name}")
        value = ast.literal_eval(text) if text is not None else None
        if value is None:
            value = alf_config.default_value("TrainerConfig", name)
        budget.append(int(value or 0))
    return budget[0], budget[1]


def reached_budget(status: dict[str, Any], budget: tuple[int, int]) -> bool:
    """Whether a finished run's ``status.json`` shows it trained to ``budget`` (as the
    trainer counts: the larger of the env-step and iteration fractions reaches 1)."""
    num_env_steps, num_iterations = budget
    env_steps, iteration = status.get("env_steps"), status.get("iteration")
    if num_env_steps and isinstance(env_steps, int) and env_steps >= num_env_steps:
        return True
    return bool(num_iterations) and isinstance(iteration, int) and iteration >= num_iterations


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
                process.kill()  # the loop's reaping then cleans up after them

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
                process.wait(60)
                process.after_kill()
