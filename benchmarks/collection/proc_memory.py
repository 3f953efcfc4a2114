"""Reading a process tree's memory from ``/proc`` and the ``/dev/shm`` files it holds
(``benchmarks/collection/memory_soak.py``'s probes).

Per process: RSS (with its anonymous and shared-memory parts) from ``/proc/PID/status``,
PSS from ``smaps_rollup``, parent and command line; the tree below a learner, each
process classified (learner, actor: a ``spawn`` child, other). Per run: the ``/dev/shm``
files its processes hold, found through their open files and mappings (torch unlinks its
shared tensors at once) and by name (the queues' semaphores), each inode counted once.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

SHM_DIR = "/dev/shm"


def read_status(pid: int | str) -> dict[str, int]:
    """``rss_bytes``, ``rss_anon_bytes``, ``rss_shmem_bytes`` of process ``pid`` (or
    ``"self"``) from ``/proc/PID/status``; raises OSError if it is gone."""
    keys = {"VmRSS": "rss_bytes", "RssAnon": "rss_anon_bytes", "RssShmem": "rss_shmem_bytes"}
    result = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in keys:
                result[keys[name]] = int(value.split()[0]) * 1024  # kB
    return result


def read_pss(pid: int | str) -> int | None:
    """The proportional set size from ``/proc/PID/smaps_rollup`` in bytes (None if the
    file is missing or unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def read_cmdline(pid: int | str) -> str:
    """The command line of a process, arguments joined by spaces ("" if unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def read_stat(pid: int | str) -> tuple[int, int] | None:
    """``(ppid, start time in clock ticks)`` from ``/proc/PID/stat`` (None if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and ')'
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (children first, by pid)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = read_stat(name)
            if stat is not None:
                children.setdefault(stat[0], []).append(int(name))
    found, todo = [], [root]
    while todo:
        kids = sorted(children.get(todo.pop(0), []))
        found += kids
        todo += kids
    return found


def classify(pid: int, learner: int, ppid: int, cmdline: str) -> str:
    """The kind of a process of the run: ``learner``, ``actor`` (a ``multiprocessing``
    spawn child of the learner: ``AsyncUnroller`` starts its actors with ``spawn``),
    ``resource_tracker`` or ``other`` (e.g. an actor's environment workers)."""
    if pid == learner:
        return "learner"
    if "resource_tracker" in cmdline:
        return "resource_tracker"
    if "spawn_main" in cmdline and ppid == learner:
        return "actor"
    return "other"


@dataclass(frozen=True)
class ShmFile:
    """One ``/dev/shm`` file a run holds: its path (``" (deleted)"`` stripped), size and
    allocated bytes (its blocks: the memory it occupies)."""

    name: str
    size: int
    allocated: int


def shm_files_of(pid: int | str, shm_dir: str = SHM_DIR) -> dict[tuple[int, int], ShmFile]:
    """The files under ``shm_dir`` that a process has open or mapped (deleted ones
    included), by ``(device, inode)``; {} if the process is gone."""
    prefix = shm_dir.rstrip("/") + "/"
    found: dict[tuple[int, int], ShmFile] = {}
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        fds = []
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
            if not target.startswith(prefix):
                continue
            st = os.stat(f"{fd_dir}/{fd}")
        except OSError:
            continue
        found[(st.st_dev, st.st_ino)] = ShmFile(
            target.removesuffix(" (deleted)"), st.st_size, st.st_blocks * 512
        )
    shm_dev = os.stat(shm_dir).st_dev
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.readlines()
    except OSError:
        lines = []
    extent: dict[tuple[int, int], tuple[str, int]] = {}
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith(prefix):
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        key = (shm_dev, int(parts[4]))
        name, size = extent.get(key, (parts[5].strip().removesuffix(" (deleted)"), 0))
        extent[key] = (name, max(size, int(parts[2], 16) + end - start))
    for key, (name, size) in extent.items():
        if key in found:
            continue
        try:  # mapped only (its fd closed, e.g. a named semaphore): the file if it exists
            st = os.stat(name)
            if (st.st_dev, st.st_ino) == key:
                found[key] = ShmFile(name, st.st_size, st.st_blocks * 512)
                continue
        except OSError:
            pass
        found[key] = ShmFile(name, size, size)  # unlinked: its mapped extent
    return found


def named_run_files(learner: int, pids: set[int], shm_dir: str = SHM_DIR) -> list[str]:
    """Names in ``shm_dir`` that belong to the run: the learner's named semaphores
    (``sem.alf_<learner>-*``) and torch segments named after a pid of the run."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    pattern = re.compile(r"^(?:sem\.alf_(\d+)-|torch_(\d+)_)")
    mine = []
    for name in names:
        match = pattern.match(name)
        if match and (int(match.group(1) or -1) == learner or int(match.group(2) or -1) in pids):
            mine.append(name)
    return sorted(mine)


def run_shm(learner: int, pids: list[int], shm_dir: str = SHM_DIR) -> dict[str, int]:
    """The ``/dev/shm`` files held by ``pids`` or named after the run, each once:
    ``shm_files``, ``shm_bytes`` (sizes), ``shm_alloc_bytes`` (blocks) and
    ``shm_sem_files`` (the named semaphores among them)."""
    files: dict[tuple[int, int], ShmFile] = {}
    for pid in pids:
        files.update(shm_files_of(pid, shm_dir))
    for name in named_run_files(learner, set(pids), shm_dir):
        path = os.path.join(shm_dir, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        # by its name (a semaphore is mapped under glibc's deleted temporary name)
        files[(st.st_dev, st.st_ino)] = ShmFile(path, st.st_size, st.st_blocks * 512)
    return {
        "shm_files": len(files),
        "shm_bytes": sum(f.size for f in files.values()),
        "shm_alloc_bytes": sum(f.allocated for f in files.values()),
        "shm_sem_files": sum(os.path.basename(f.name).startswith("sem.") for f in files.values()),
    }
