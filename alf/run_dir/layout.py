"""The files of a run directory: their names, and how to read the small ones.

A run directory (``--root_dir`` of ``alf.bin.train``) holds::

    config.gin          the operative config (every binding, defaults included)
    progress.jsonl      one JSON object per train summary or evaluation
    evaluations.jsonl   one JSON object per evaluation: each episode's return and length
    videos/             iteration-<N>.mp4 of evaluation episodes (TrainerConfig.video_interval)
    status.json         what the run is doing: running (with its pid), finished,
                        stopped or failed (with the error)
    run_info.json       how it was started (command line, git revision, versions, host,
                        trackers' run ids) and resumed
    code.diff           ``git diff HEAD`` of the ALF checkout at the start, if not empty
    train.log           the output of runs launched by ``alf.bin.sweep`` / ``alf.bin.tune``
    checkpoints/        ckpt-<iteration>.pt
    .lock               flock'ed by the process training in the run
    train/, eval/       TensorBoard events

This module is the one place that spells those names; it imports nothing heavy (no
torch), so the command-line tools that read many runs (sweep, plot, report, tune) start
fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import Any

from alf.errors import TrainingError, UserError

__all__ = [
    "RunDirError",
    "RunDirWriteError",
    "describe_write_failure",
    "check_run_dir",
    "check_writable",
    "CHECKPOINT_DIR",
    "LOCK_FILE",
    "CODE_DIFF_FILE",
    "CONFIG_FILE",
    "EVALUATIONS_FILE",
    "LOG_FILE",
    "METADATA_FILE",
    "PROGRESS_FILE",
    "STATUS_FILE",
    "VIDEO_DIR",
    "RunStatus",
    "find_run_dirs",
    "is_run_dir",
    "parse_bindings",
    "pid_alive",
    "read_bindings",
    "read_json",
    "read_metadata",
    "read_evaluations",
    "read_progress",
    "read_status",
    "remove_stale_temporaries",
    "write_config",
    "write_json_atomic",
    "write_text_atomic",
    "write_status",
]


class RunDirError(UserError, ValueError):
    """A ``root_dir`` that is not the directory of a training run."""


def check_run_dir(root_dir: str) -> str:
    """The path of ``root_dir``'s ``config.gin`` (what ``play`` and ``export`` rebuild a
    run from).

    Raises:
        RunDirError: ``root_dir`` does not exist or holds no ``config.gin``.
    """
    if not os.path.isdir(root_dir):
        raise RunDirError(f"root_dir '{root_dir}' does not exist")
    conf_path = os.path.join(root_dir, CONFIG_FILE)
    if not os.path.isfile(conf_path):
        raise RunDirError(
            f"'{conf_path}' not found: is '{root_dir}' the root_dir of a training run?"
        )
    return conf_path


def check_writable(root_dir: str) -> None:
    """Checks, by writing a file, that a run can write in ``root_dir`` and its
    ``checkpoints/`` folder (created if missing): at the start, rather than after a
    checkpoint interval of training.

    Raises:
        RunDirError: naming the folder and the reason.
    """
    for directory in (root_dir, os.path.join(root_dir, CHECKPOINT_DIR)):
        try:
            os.makedirs(directory, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".alf-write-check-", dir=directory)
            os.close(fd)
            os.remove(probe)
        except OSError as err:
            raise RunDirError(
                f"cannot write in '{directory}': {describe_write_failure(err)}; the run "
                "needs to write its checkpoints and summaries there"
            ) from err


CONFIG_FILE = "config.gin"
PROGRESS_FILE = "progress.jsonl"
EVALUATIONS_FILE = "evaluations.jsonl"
"""One JSON object per evaluation: ``iteration``, ``env_steps``, ``elapsed_s`` and the
per-episode ``returns``, ``lengths`` and ``cut`` (cut at the step cap)."""
STATUS_FILE = "status.json"
METADATA_FILE = "run_info.json"
CODE_DIFF_FILE = "code.diff"
CHECKPOINT_DIR = "checkpoints"
VIDEO_DIR = "videos"
"""``iteration-<N>.mp4``: evaluation episodes recorded while training
(``TrainerConfig.video_interval``)."""
LOCK_FILE = ".lock"
"""Held (``flock``) by the process training in the run directory."""
LOG_FILE = "train.log"

_RUN_FILES = (CONFIG_FILE, STATUS_FILE, METADATA_FILE, CODE_DIFF_FILE)
"""The files written atomically through a temporary sibling."""


class RunStatus:
    """The values of ``status.json``'s ``state``."""

    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"


class RunDirWriteError(TrainingError, OSError):
    """A file of the run could not be written while training (disk full, permissions,
    a read-only filesystem); the message names the file and the reason, and the newest
    checkpoint already written is kept."""


def describe_write_failure(err: BaseException) -> str:
    """The reason of a failed write in a few words: ``No space left on device (errno
    28)`` for an ``OSError``, the first line of anything else."""
    if isinstance(err, OSError) and err.strerror:
        return f"{err.strerror} (errno {err.errno})"
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def write_text_atomic(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` through a temporary file (``<path>.tmp.<pid>``) and a
    rename, so a reader never sees half a file; the temporary file is removed if the
    write fails (disk full)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Writes ``data`` as JSON to ``path`` through a temporary file and a rename, so a
    reader never sees half a file (and no temporary file is left if it fails)."""
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    write_text_atomic(path, text)


_TMP_RE = re.compile(r"^(?P<name>.+)\.tmp(\.(?P<pid>\d+))?$")


def remove_stale_temporaries(run_dir: str) -> list[str]:
    """Removes the temporary files of atomic writes (``status.json.tmp.<pid>``,
    ``config.gin.tmp``) that a killed process left at the top of ``run_dir``, except those
    of a live process; returns the removed names. Call it holding the run's lock."""
    removed = []
    try:
        names = os.listdir(run_dir)
    except OSError:
        return removed
    for name in names:
        match = _TMP_RE.match(name)
        if match is None or match.group("name") not in _RUN_FILES:
            continue
        pid = match.group("pid")
        if pid is not None and int(pid) != os.getpid() and pid_alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.remove(os.path.join(run_dir, name))
            removed.append(name)
    return removed


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None if it is missing or unreadable."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_config(run_dir: str, text: str) -> None:
    """Writes the run's ``config.gin`` atomically (creating ``run_dir``)."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, CONFIG_FILE)
    write_text_atomic(path, text)


def write_status(run_dir: str, state: str, **fields: Any) -> None:
    """Records the run's ``state`` (a :class:`RunStatus` value) and ``fields`` in
    ``status.json``, with the time and this process's pid."""
    data = {"state": state, "pid": os.getpid(), "time": time.time(), **fields}
    path = os.path.join(run_dir, STATUS_FILE)
    try:
        write_json_atomic(path, data)
    except OSError:
        # A full disk cannot take a new file, but the old status.json's block can take
        # the new one in place (it is small): better a failed status than a stale one.
        if not os.path.isfile(path):
            raise
        with open(path, "r+") as f:
            f.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
            f.truncate()


def read_status(run_dir: str) -> dict[str, Any] | None:
    """``status.json`` of ``run_dir`` (None if the run never started).

    A ``running`` status whose process is gone (killed, machine restarted) is reported
    as ``state: "interrupted"``."""
    status = read_json(os.path.join(run_dir, STATUS_FILE))
    if status is None:
        return None
    if status.get("state") == RunStatus.RUNNING and not pid_alive(status.get("pid")):
        status = {**status, "state": "interrupted"}
    return status


def read_metadata(run_dir: str) -> dict[str, Any] | None:
    """``run_info.json`` of ``run_dir`` (None if missing or unreadable)."""
    return read_json(os.path.join(run_dir, METADATA_FILE))


def pid_alive(pid: Any) -> bool:
    """Whether a process with this pid exists (on this machine)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_run_dir(path: str) -> bool:
    """Whether ``path`` is a run directory (it has a config or a progress log)."""
    return os.path.isfile(os.path.join(path, CONFIG_FILE)) or os.path.isfile(
        os.path.join(path, PROGRESS_FILE)
    )


def find_run_dirs(paths: Iterable[str]) -> list[str]:
    """Every run directory at or under ``paths``, sorted (a run's own subdirectories,
    e.g. ``checkpoints/``, are not searched)."""
    found: set[str] = set()
    for path in paths:
        path = os.path.abspath(os.path.expanduser(path))
        for dirpath, dirnames, _ in os.walk(path):
            if is_run_dir(dirpath):
                found.add(dirpath)
                dirnames[:] = []
            else:
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


def read_evaluations(run_dir: str) -> list[dict[str, Any]]:
    """The records of ``evaluations.jsonl`` in order (unreadable lines skipped): each
    evaluation's per-episode ``returns`` and ``lengths``."""
    return _read_jsonl(os.path.join(run_dir, EVALUATIONS_FILE))


def read_progress(run_dir: str) -> list[dict[str, Any]]:
    """The records of ``progress.jsonl`` in order (a line being written, or otherwise
    unreadable, is skipped)."""
    return _read_jsonl(os.path.join(run_dir, PROGRESS_FILE))


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a ``.jsonl`` file (unreadable lines skipped; [] if missing)."""
    records = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except FileNotFoundError:
        pass
    return records


def _gin_statements(text: str) -> Iterator[str]:
    """The statements of a gin file: comments dropped, lines joined while brackets are
    open."""
    depth = 0
    current: list[str] = []
    for raw in text.splitlines():
        line = _strip_comment(raw).rstrip()
        if not line.strip() and depth == 0:
            continue
        current.append(line.strip())
        for ch in _unquoted(line):
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
        if depth <= 0:
            depth = 0
            yield " ".join(current)
            current = []
    if current:
        yield " ".join(current)


def _unquoted(line: str) -> Iterator[str]:
    quote = None
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
            continue
        yield ch


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def parse_bindings(text: str) -> dict[str, str]:
    """``{'Name.param': 'value text'}`` of the bindings in gin config text (imports and
    includes are skipped; values are kept as written, whitespace normalised)."""
    bindings: dict[str, str] = {}
    for statement in _gin_statements(text):
        if statement.startswith(("import ", "include ", "from ")) or "=" not in statement:
            continue
        name, value = statement.split("=", 1)
        bindings[name.strip()] = " ".join(value.split())
    return bindings


def read_bindings(run_dir: str) -> dict[str, str]:
    """The bindings of the run's ``config.gin`` (empty if it has none)."""
    try:
        with open(os.path.join(run_dir, CONFIG_FILE)) as f:
            return parse_bindings(f.read())
    except FileNotFoundError:
        return {}
