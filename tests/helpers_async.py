"""Helpers of the asynchronous-collection tests: leak checks over real processes and a
user environment module that can fail or hang on purpose."""

from __future__ import annotations

import os
import textwrap
import time
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


def mapped_shm_entries() -> set[str]:
    """Names in ``/dev/shm`` that some live process has mapped (semaphores and segments
    in use, e.g. by other programs running at the same time)."""
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


def leaked_shm_entries(before: set[str]) -> set[str]:
    """Entries of ``/dev/shm`` created since ``before`` that no live process maps: left
    behind by processes that have exited."""
    new = shm_entries() - before
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
