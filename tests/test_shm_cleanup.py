"""What a SIGKILL of an asynchronous run's process group leaves in ``/dev/shm`` (its
learner's named semaphores, ``sem.alf_<pid>-*``) is removed by the next start: only the
entries of pids that are gone, never a live run's or another program's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from alf.unrollers.shared_memory import SEMAPHORE_PREFIX, remove_stale_semaphores


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_the_semaphores_of_dead_learners_are_removed(tmp_path: Path) -> None:
    dead, live = _dead_pid(), os.getpid()
    names = {
        f"sem.alf_{dead}-a1b2c3": False,  # a killed run's: removed
        f"sem.alf_{dead}-d4e5f6": False,
        f"sem.alf_{live}-a1b2c3": True,  # this live process's: kept
        "sem.mp-abcdef": True,  # not ALF's
        "torch_123_456": True,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert remove_stale_semaphores(str(tmp_path)) == 2
    assert {p.name for p in tmp_path.iterdir()} == {n for n, kept in names.items() if kept}
    assert SEMAPHORE_PREFIX.format(pid=live) == f"/alf_{live}"


def test_a_missing_shm_folder_is_nothing_to_remove(tmp_path: Path) -> None:
    assert remove_stale_semaphores(str(tmp_path / "missing")) == 0
