"""Helpers of the asynchronous-collection tests: leak checks over real processes and a
user environment module that can fail or hang on purpose."""

from __future__ import annotations

import os
import re
import textwrap
import threading
import time
from collections.abc import Iterable
from pathlib import Path

SHM = Path("/dev/shm")

# A user module registering ``Faulty-v0``: CartPole that raises or hangs at a given step
# (counted per environment), first writing the time of the fault to a file.
FAULTY_ENV_MODULE = textwrap.dedent(
    '''
    import time

    import gymnasium as gym
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv


    class FaultyCartPole(CartPoleEnv):
        def __init__(self, fault="none", fault_at=10**9, stamp_file="", **kwargs):
            super().__init__(**kwargs)
            self.fault, self.fault_at, self.stamp_file = fault, fault_at, stamp_file
            self.steps = 0

        def step(self, action):
            self.steps += 1
            if self.steps == self.fault_at:
                with open(self.stamp_file, "w") as f:
                    f.write(repr(time.time()))
                if self.fault == "raise":
                    explode_in_user_env()
                if self.fault == "hang":
                    time.sleep(3600)
            return super().step(action)


    def explode_in_user_env():
        raise RuntimeError("the user environment exploded")


    gym.register("Faulty-v0", entry_point=FaultyCartPole, max_episode_steps=500)
    '''
)


def write_faulty_env_module(directory: Path, name: str = "alf_test_faulty_env") -> str:
    """Writes the module into ``directory``; returns its import name."""
    (directory / f"{name}.py").write_text(FAULTY_ENV_MODULE)
    return name


def shm_entries() -> set[str]:
    """Names in ``/dev/shm`` (shared-memory segments and named semaphores)."""
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


_OWNED_NAME = re.compile(r"^(?:torch_|sem\.alf_)(\d+)[_-]")


def shm_owner(name: str) -> int | None:
    """The pid of the process that created the ``/dev/shm`` entry ``name``, as its name
    tells: torch names its segments ``torch_<pid>_...`` and ALF its named semaphores
    ``sem.alf_<pid>-...``; None for any other entry."""
    match = _OWNED_NAME.match(name)
    return int(match.group(1)) if match else None


def mapped_shm_entries() -> set[str]:
    """Names in ``/dev/shm`` that some live process has mapped (semaphores and segments
    in use)."""
    mapped = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            maps = (entry / "maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            if "/dev/shm/" in line:
                mapped.add(line.rsplit("/dev/shm/", 1)[1].split(" ")[0])
    return mapped


def leaked_shm_entries(before: set[str], pids: Iterable[int] | None = None) -> set[str]:
    """Entries of ``/dev/shm`` created since ``before`` by the processes ``pids`` (default:
    this one), as their names tell (:func:`shm_owner`), that no live process maps: left
    behind by those processes. ``/dev/shm`` is machine-wide: the entries of other programs
    (other ALF runs included) come and go meanwhile, and are not looked at."""
    pids = {os.getpid()} if pids is None else set(pids)
    new = {name for name in shm_entries() - before if shm_owner(name) in pids}
    return new - mapped_shm_entries() if new else new


def processes_with_marker(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``ALF_TEST_MARKER=marker``
    (children inherit it, so this finds every descendant of a marked process, even
    those reparented after their parent died)."""
    needle = f"ALF_TEST_MARKER={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if needle in environ.split(b"\0") and "State:\tZ" not in status:
            found.append(int(entry.name))
    return found


def wait_until_gone(marker: str, timeout: float = 10.0) -> list[int]:
    """Waits until no marked process is alive; returns those still alive at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        alive = processes_with_marker(marker)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


class MarkedPids:
    """Records, in a background thread, the pids of the live processes marked with
    ``marker`` (see :func:`processes_with_marker`): a run's trainer and its descendants,
    the actors included, which may be gone by the time the run is checked.

    Args:
        marker: the ``ALF_TEST_MARKER`` value of the run.
        interval_s: how often the processes are listed.
        max_s: when to stop if :meth:`stop` is not called (a test that failed early).
    """

    def __init__(self, marker: str, interval_s: float = 0.25, max_s: float = 900.0) -> None:
        self.pids: set[int] = set()
        self._marker = marker
        self._interval_s = interval_s
        self._deadline = time.monotonic() + max_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while time.monotonic() < self._deadline:
            self.pids.update(processes_with_marker(self._marker))
            if self._stop.wait(self._interval_s):
                return

    def stop(self) -> set[int]:
        """Stops watching; returns every pid seen."""
        self._stop.set()
        self._thread.join()
        return self.pids
