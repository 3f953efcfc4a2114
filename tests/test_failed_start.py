"""A start of ``alf.bin.train`` that fails before training leaves no trace: no
``root_dir`` if there was none (nor the parent folders made for it), and otherwise the
directory exactly as it was, down to its folders, its ``.lock`` file and its bytes.

The command-line cases are independent: the module fixture runs them concurrently.
:class:`~alf.trainers.run_lock.RunDirLock`, which does the undoing, is also tested
in-process.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers_cli import (
    STEPS_PER_ITERATION,
    TINY_PARAMS,
    assert_clean_user_error,
    copy_run,
    run_many,
    shared_tiny_run,
    train_cmd,
)

from alf.trainers import run_lock
from alf.trainers.run_lock import RunDirLock, RunDirLockedError

TRAIN = "alf.bin.train"
# What a user would pass to resume the good run: its settings and a larger budget.
RESUME = (
    *(p for p in TINY_PARAMS if "num_env_steps" not in p),
    f"TrainerConfig.num_env_steps={16 * STEPS_PER_ITERATION}",
)


def tree(root: Path) -> dict[str, str]:
    """``relative path -> sha256`` of every file under ``root`` (``.lock`` included), and
    ``relative path -> "dir"`` of every folder."""
    found = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@dataclass
class Case:
    """A failing start in ``root`` (prepared by a ``_case`` function)."""

    root: Path
    cmd: list[str] = field(default_factory=list)
    keywords: tuple[str, ...] = ()
    before: dict[str, str] | None = None  # None: root did not exist
    result: subprocess.CompletedProcess | None = None


def _fresh_nested_dir(case: Case, tmp: Path, good: Path) -> None:
    # The example: the env id is checked while the trainer is built.
    case.root = tmp / "made_by_train" / "nested" / "run"
    case.cmd = train_cmd(case.root, 'create_environment.env_name="NoSuchEnv-v0"')
    case.keywords = ("NoSuchEnv-v0", "not registered")


def _users_empty_dir(case: Case, tmp: Path, good: Path) -> None:
    case.root.mkdir()
    (case.root / "notes.txt").write_text("the user's own file\n")
    case.cmd = train_cmd(case.root, 'ActorDistributionNetwork.activation="nope"')
    case.keywords = ("nope",)


def _resume_with_unfitting_checkpoint(case: Case, tmp: Path, good: Path) -> None:
    copy_run(good, case.root)
    case.cmd = train_cmd(
        case.root,
        *RESUME,
        "TrainerConfig.allow_config_change=True",
        "ActorDistributionNetwork.fc_layer_params=(7,)",
    )
    case.keywords = ("does not fit",)


def _resume_failing_after_writing(case: Case, tmp: Path, good: Path) -> None:
    # ``run_info.json`` is a folder: recording the session fails after the TensorBoard
    # writers wrote new event files into train/ and eval/ (as a full disk would).
    copy_run(good, case.root)
    (case.root / "run_info.json").unlink()
    (case.root / "run_info.json").mkdir()
    (case.root / "code.diff").unlink(missing_ok=True)  # rewritten from a changing checkout
    case.cmd = train_cmd(case.root, *RESUME)
    case.keywords = ("cannot use root_dir", "run_info.json")


def _resume_failing_in_summary_writers(case: Case, tmp: Path, good: Path) -> None:
    # ``eval`` is a file: the TensorBoard writer of eval/ fails after the one of train/
    # was opened.
    copy_run(good, case.root)
    for event_file in (case.root / "eval").iterdir():
        event_file.unlink()
    (case.root / "eval").rmdir()
    (case.root / "eval").write_text("not a folder\n")
    case.cmd = train_cmd(case.root, *RESUME)
    case.keywords = ("cannot use root_dir", "eval")


CASES: dict[str, Callable[[Case, Path, Path], None]] = {
    "fresh_nested_dir": _fresh_nested_dir,
    "users_empty_dir": _users_empty_dir,
    "resume_with_unfitting_checkpoint": _resume_with_unfitting_checkpoint,
    "resume_failing_after_writing": _resume_failing_after_writing,
    "resume_failing_in_summary_writers": _resume_failing_in_summary_writers,
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    good, _ = shared_tiny_run(tmp_path_factory)
    assert (good / ".lock").is_file()  # a finished run keeps its (unlocked) lock file
    prepared = {}
    for name, prepare in CASES.items():
        tmp = tmp_path_factory.mktemp(name)
        case = Case(root=tmp / "root")
        prepare(case, tmp, good)
        case.before = tree(case.root) if case.root.exists() else None
        prepared[name] = case
    results = run_many({name: case.cmd for name, case in prepared.items()})
    for name, case in prepared.items():
        case.result = results[name]
    return prepared


@pytest.mark.parametrize("name", list(CASES))
def test_failed_start_leaves_root_dir_as_it_was(cases: dict[str, Case], name: str) -> None:
    case = cases[name]
    assert case.result.returncode == 2, case.result.stderr[-3000:]
    assert_clean_user_error(case.result, TRAIN, *case.keywords)
    if case.before is None:  # nor the folders made for it
        made = case.root.parents[1]
        assert not made.exists(), sorted(str(p) for p in made.rglob("*"))
    else:
        assert tree(case.root) == case.before


# ----------------------------------------------------------------- RunDirLock


def test_undo_removes_the_folders_it_created_and_release_keeps_the_lock_file(
    tmp_path: Path,
) -> None:
    root = tmp_path / "a" / "b" / "run"
    lock = RunDirLock(root_dir=str(root))
    (root / "config.gin").write_text("x")
    (root / "train").mkdir()
    (root / "train" / "events.out.tfevents.1").write_bytes(b"e")
    lock.release(undo_start=True)
    lock.release(undo_start=True)  # idempotent
    assert list(tmp_path.iterdir()) == []

    kept = RunDirLock(root_dir=str(root))
    kept.release()
    assert (root / ".lock").read_text() == str(os.getpid())


def test_undo_in_an_existing_run_dir_removes_only_what_the_start_wrote(tmp_path: Path) -> None:
    root = tmp_path / "run"
    (root / "train").mkdir(parents=True)
    (root / "train" / "events.out.tfevents.old").write_bytes(b"old events")
    (root / "progress.jsonl").write_text('{"iteration": 2}\n')
    (root / ".lock").write_bytes(b"12345\r\n\xff")  # restored byte for byte
    before = tree(root)
    lock = RunDirLock(root_dir=str(root))
    assert (root / ".lock").read_text() == str(os.getpid())
    (root / "train" / "events.out.tfevents.new").write_bytes(b"new events")
    (root / "eval").mkdir()
    (root / "eval" / "events.out.tfevents.new").write_bytes(b"new events")
    (root / "run_info.json").write_text("{}")
    (root / "config.gin.tmp").write_text("half a config")
    lock.release(undo_start=True)
    assert tree(root) == before  # the lock file has its earlier contents again

    # Not the trainer's: a file someone else put there meanwhile stays.
    lock = RunDirLock(root_dir=str(root))
    (root / "notes.txt").write_text("mine")
    lock.release(undo_start=True)
    assert tree(root) == {**before, "notes.txt": tree(root)["notes.txt"]}


def test_refused_lock_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "run"
    first = RunDirLock(root_dir=str(root))
    try:
        with pytest.raises(RunDirLockedError, match=f"pid {os.getpid()}"):
            RunDirLock(root_dir=str(root))
        assert tree(root) == {".lock": hashlib.sha256(str(os.getpid()).encode()).hexdigest()}
    finally:
        first.release()


def test_lock_file_removed_by_a_failed_start_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer that opened the lock file just before a failed start removed it (with
    root_dir) must not lock that orphan: it starts over, so a third trainer is refused."""
    root = tmp_path / "run"
    failing = RunDirLock(root_dir=str(root))
    open_lock_file = run_lock._open_lock_file

    def open_then_the_other_start_fails(path: str):  # noqa: ANN202
        opened = open_lock_file(path)
        monkeypatch.setattr(run_lock, "_open_lock_file", open_lock_file)
        failing.release(undo_start=True)
        return opened

    monkeypatch.setattr(run_lock, "_open_lock_file", open_then_the_other_start_fails)
    second = RunDirLock(root_dir=str(root))
    try:
        assert (root / ".lock").read_text() == str(os.getpid())
        with pytest.raises(RunDirLockedError):
            RunDirLock(root_dir=str(root))
    finally:
        second.release(undo_start=True)
    assert not root.exists()
