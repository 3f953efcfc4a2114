"""An exclusive lock on a run's ``root_dir``, so two trainers never share one."""

from __future__ import annotations

import fcntl
import os

from alf.errors import UserError
from alf.run_dir import layout

__all__ = ["RunDirLock", "RunDirLockedError"]


class RunDirLockedError(UserError, RuntimeError):
    """Another live process is training in the same ``root_dir``."""


class RunDirLock:
    """Holds an exclusive ``flock`` on ``root_dir/.lock`` until :meth:`release`.

    The operating system drops the lock when the holding process dies (even by
    ``kill -9``), so a crashed run never blocks its own restart.

    Args:
        root_dir: the run's directory (created if missing).
    """

    def __init__(self, *, root_dir: str) -> None:
        os.makedirs(root_dir, exist_ok=True)
        self.path = os.path.join(root_dir, layout.LOCK_FILE)
        self._file = open(self.path, "a+")  # noqa: SIM115 - held for the run's lifetime
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "unknown"
            self._file.close()
            raise RunDirLockedError(
                f"root_dir '{root_dir}' is in use by another training process (pid {holder}); "
                "wait for it to finish or stop it first."
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(str(os.getpid()))
        self._file.flush()

    def release(self) -> None:
        """Releases the lock (idempotent)."""
        if not self._file.closed:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
