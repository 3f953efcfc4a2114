"""An exclusive lock on a run's ``root_dir``, so two trainers never share one."""

from __future__ import annotations

import fcntl
import os
import shutil
from typing import BinaryIO

from alf.errors import UserError
from alf.run_dir import layout

__all__ = ["RunDirLock", "RunDirLockedError"]

_RUN_FILES = (
    layout.CONFIG_FILE,
    layout.PROGRESS_FILE,
    layout.EVALUATIONS_FILE,
    layout.STATUS_FILE,
    layout.METADATA_FILE,
    layout.CODE_DIFF_FILE,
)
"""Files a trainer writes at the top of ``root_dir`` (with their ``.tmp`` siblings)."""

_RUN_DIRS = (layout.CHECKPOINT_DIR, layout.VIDEO_DIR, "train", "eval", "wandb")
"""Folders a trainer writes into: checkpoints, TensorBoard's ``train/`` and ``eval/``
(:class:`~alf.utils.summary.SummaryLogger`) and W&B's files
(:class:`~alf.utils.trackers.WandbTracker`)."""

_ATTEMPTS = 20
"""Tries at taking the lock while failed starts remove the lock file under us."""


class RunDirLockedError(UserError, RuntimeError):
    """Another live process is training in the same ``root_dir``."""


class RunDirLock:
    """Holds an exclusive ``flock`` on ``root_dir/.lock`` until :meth:`release`.

    The operating system drops the lock when the holding process dies (even by
    ``kill -9``), so a crashed run never blocks its own restart.

    The lock remembers how it found ``root_dir`` (whether it existed, which of its parent
    folders it had to create, the lock file's contents, the run files and folders
    present), so that a start that fails before training can leave ``root_dir`` as it was:
    :meth:`release` with ``undo_start=True``.

    Args:
        root_dir: the run's directory (created if missing).

    Raises:
        RunDirLockedError: another process holds the lock.
        OSError: ``root_dir`` cannot be created or the lock file opened.
    """

    def __init__(self, *, root_dir: str) -> None:
        self.root_dir = os.path.abspath(root_dir)
        self.path = os.path.join(self.root_dir, layout.LOCK_FILE)
        self._created_dirs: list[str] = []  # outermost first
        self._old_lock_bytes: bytes | None = None  # None: this lock created the file
        try:
            self._file = self._acquire()
        except BaseException:
            self._remove_created_dirs()
            raise
        self._found = self._run_entries()
        self._file.seek(0)
        self._file.truncate()
        self._file.write(str(os.getpid()).encode())
        self._file.flush()

    def _acquire(self) -> BinaryIO:
        for _ in range(_ATTEMPTS):
            self._make_dirs()
            try:
                file, created = _open_lock_file(self.path)
            except FileNotFoundError:  # root_dir removed meanwhile by a failed start
                continue
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = file.read().decode(errors="replace").strip() or "unknown"
                file.close()
                raise RunDirLockedError(
                    f"root_dir '{self.root_dir}' is in use by another training process "
                    f"(pid {holder}); wait for it to finish or stop it first."
                ) from None
            except BaseException:  # e.g. no locks on this file system
                file.close()
                if created:
                    _remove(self.path)
                raise
            if _is_file_at(file, self.path):
                self._old_lock_bytes = None if created else file.read()
                return file
            # A failed start removed the file after we opened it: its lock guards nothing.
            file.close()
        raise OSError(f"cannot lock root_dir '{self.root_dir}': its lock file keeps vanishing")

    def _make_dirs(self) -> None:
        """Creates the missing folders of ``root_dir``'s path, remembering which."""
        missing = []
        path = self.root_dir
        while not os.path.isdir(path) and os.path.dirname(path) != path:
            missing.append(path)
            path = os.path.dirname(path)
        for path in reversed(missing):
            try:
                os.mkdir(path)
            except FileExistsError:
                if not os.path.isdir(path):
                    raise
                continue
            self._created_dirs.append(path)

    def _run_entries(self) -> set[str]:
        """Paths (relative to ``root_dir``) of the run files and folders present, and of
        what the run folders hold."""
        found = set()
        for name in _list(self.root_dir):
            if _is_run_entry(name):
                found.add(name)
                if name in _RUN_DIRS:
                    found.update(os.path.join(name, child) for child in _list(self._at(name)))
        return found

    def _at(self, relative: str) -> str:
        return os.path.join(self.root_dir, relative)

    def release(self, *, undo_start: bool = False) -> None:
        """Releases the lock (idempotent).

        Args:
            undo_start: the start failed before training: first remove what it wrote
                (the run files and folders that were not there when the lock was taken,
                and what is new in the run folders that were), give the lock file back
                its earlier contents (or remove it if this lock created it), and remove
                ``root_dir`` and its parent folders if this lock created them. Files that
                were there stay untouched; anything else found in a folder keeps it.
        """
        if self._file.closed:
            return
        try:
            if undo_start:
                self._undo_start()
        finally:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
        if undo_start:
            self._remove_created_dirs()

    def _undo_start(self) -> None:
        """Puts ``root_dir`` back as the lock found it (while still holding the lock)."""
        if self.root_dir in self._created_dirs:
            # Everything in it was written by this start, under the lock.
            shutil.rmtree(self.root_dir, ignore_errors=True)
            return
        for relative in sorted(self._run_entries() - self._found, reverse=True):
            _remove(self._at(relative))
        if self._old_lock_bytes is None:
            _remove(self.path)
        else:
            self._file.seek(0)
            self._file.truncate()
            self._file.write(self._old_lock_bytes)
            self._file.flush()

    def _remove_created_dirs(self) -> None:
        """Removes the folders this lock created, innermost first, while they are empty."""
        for path in reversed(self._created_dirs):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                continue
            except OSError:  # not empty: someone else's now
                break
        self._created_dirs = []


def _open_lock_file(path: str) -> tuple[BinaryIO, bool]:
    """Opens (creating it if missing) the lock file; returns it and whether it was
    created."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        created = True
    except FileExistsError:
        fd = os.open(path, os.O_RDWR)
        created = False
    return os.fdopen(fd, "r+b"), created


def _is_file_at(file: BinaryIO, path: str) -> bool:
    """Whether ``path`` still names the open ``file`` (not removed or replaced)."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(file.fileno())
    return (at_path.st_dev, at_path.st_ino) == (opened.st_dev, opened.st_ino)


def _is_run_entry(name: str) -> bool:
    """Whether ``name``, at the top of a ``root_dir``, is a trainer's file or folder (or a
    temporary file of one being written)."""
    return name in _RUN_DIRS or any(
        name == run_file or name.startswith(f"{run_file}.tmp") for run_file in _RUN_FILES
    )


def _list(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (NotADirectoryError, FileNotFoundError):
        return []


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
