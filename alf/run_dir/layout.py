"""The files of a run directory: their names, and how to read the small ones.

A run directory (``--root_dir`` of ``alf.bin.train``) holds::

    config.gin          the operative config (every binding, defaults included)
    progress.jsonl      one JSON object per train summary or evaluation
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

import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

from alf.errors import UserError

__all__ = [
    "RunDirError",
    "check_run_dir",
    "CHECKPOINT_DIR",
    "LOCK_FILE",
    "CODE_DIFF_FILE",
    "CONFIG_FILE",
    "LOG_FILE",
    "METADATA_FILE",
    "PROGRESS_FILE",
    "STATUS_FILE",
    "RunStatus",
    "find_run_dirs",
    "is_run_dir",
    "parse_bindings",
    "pid_alive",
    "read_bindings",
    "read_json",
    "read_metadata",
    "read_progress",
    "read_status",
    "write_config",
    "write_json_atomic",
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


CONFIG_FILE = "config.gin"
PROGRESS_FILE = "progress.jsonl"
STATUS_FILE = "status.json"
METADATA_FILE = "run_info.json"
CODE_DIFF_FILE = "code.diff"
CHECKPOINT_DIR = "checkpoints"
LOCK_FILE = ".lock"
"""Held (``flock``) by the process training in the run directory."""
LOG_FILE = "train.log"


class RunStatus:
    """The values of ``status.json``'s ``state``."""

    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Writes ``data`` as JSON to ``path`` through a temporary file and a rename, so a
    reader never sees half a file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


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
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_status(run_dir: str, state: str, **fields: Any) -> None:
    """Records the run's ``state`` (a :class:`RunStatus` value) and ``fields`` in
    ``status.json``, with the time and this process's pid."""
    data = {"state": state, "pid": os.getpid(), "time": time.time(), **fields}
    write_json_atomic(os.path.join(run_dir, STATUS_FILE), data)


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


def read_progress(run_dir: str) -> list[dict[str, Any]]:
    """The records of ``progress.jsonl`` in order (a line being written, or otherwise
    unreadable, is skipped)."""
    records = []
    try:
        with open(os.path.join(run_dir, PROGRESS_FILE)) as f:
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
