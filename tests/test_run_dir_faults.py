"""Faults of the run directory while a run starts or trains (issue 30, point 2): a
folder that cannot be written is refused at the start (exit 2, nothing trained); a write
that fails while training (a file-size limit, a full device) is one line naming the file,
exit 3, ``status.json`` ``failed`` with that line, no temporary file left, the
checkpoints already written kept and, when the failed file is not a checkpoint, a final
checkpoint of the healthy learner (if ``checkpoints/`` can still be written)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
from pathlib import Path

import pytest
from helpers_cli import (
    STEPS_PER_ITERATION,
    TINY_PARAMS,
    assert_clean_user_error,
    checkpoint_steps,
    cli_env,
    copy_run,
    run_cli,
    shared_tiny_run,
    snapshot,
    train_cmd,
)

from alf.run_dir import layout
from alf.run_dir.checkpoints import read_checkpoint

TRAIN = "alf.bin.train"

# PPO with 512x512 networks: a checkpoint of several MB, far above the limit below.
BIG_NETWORKS = (
    "ActorDistributionNetwork.fc_layer_params=(512, 512)",
    "ValueNetwork.fc_layer_params=(512, 512)",
    "TrainerConfig.num_env_steps=512",
    "TrainerConfig.checkpoint_interval=1",
    "TrainerConfig.eval_interval=0",
)
FILE_SIZE_LIMIT = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_tiny_run(tmp_path_factory)[0]


def _temporaries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp" in p.name)


def _status(root: Path) -> dict:
    return json.loads((root / "status.json").read_text())


def test_checkpoints_that_is_not_a_folder_is_refused_at_the_start(tiny_run, tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    (root / "checkpoints").write_text("not a folder")
    result = run_cli(train_cmd(root, *TINY_PARAMS))
    assert result.returncode == 2, result.stderr[-3000:]
    assert_clean_user_error(result, TRAIN, f"cannot write in '{root / 'checkpoints'}'")
    assert sorted(p.name for p in root.iterdir()) == ["checkpoints"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_checkpoints_folder_is_refused_at_the_start(tiny_run, tmp_path):
    root = copy_run(tiny_run, tmp_path / "run")
    before = snapshot(root)
    (root / "checkpoints").chmod(0o555)
    try:
        grown = [p for p in TINY_PARAMS if not p.startswith("TrainerConfig.num_env_steps")]
        result = run_cli(train_cmd(root, *grown, "TrainerConfig.num_env_steps=4096"))
    finally:
        (root / "checkpoints").chmod(0o755)
    assert result.returncode == 2
    assert_clean_user_error(result, TRAIN, "cannot write in", "Permission denied")
    assert snapshot(root) == before


def _limit_file_size() -> None:
    # (Python ignores SIGXFSZ, so a write past the limit fails with EFBIG.)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def test_a_checkpoint_that_cannot_be_written_is_one_line_and_a_failed_status(tmp_path):
    root = tmp_path / "run"
    result = subprocess.run(
        train_cmd(root, *BIG_NETWORKS),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_file_size,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    checkpoint = root / "checkpoints" / "ckpt-1.pt"
    stderr = assert_clean_user_error(
        result, TRAIN, f"cannot write checkpoint '{checkpoint}'", "File too large"
    )
    status = _status(root)
    assert status["state"] == "failed" and status["exit_code"] == 3
    assert status["error"] in stderr
    assert _temporaries(root) == []
    assert not checkpoint.exists()
    assert "final checkpoint" not in stderr  # a failed checkpoint write is not tried again


def test_a_summary_write_on_a_full_device_is_one_line_and_a_failed_status(tiny_run, tmp_path):
    root = copy_run(tiny_run, tmp_path / "run")
    kept = sorted(p.name for p in (root / "checkpoints").iterdir())
    checkpoints = {name: (root / "checkpoints" / name).read_bytes() for name in kept}
    # A stale temporary file of a killed process is cleaned up by the next start.
    (root / "status.json.tmp.999999999").write_text("")
    progress = root / layout.PROGRESS_FILE
    progress.unlink()
    progress.symlink_to("/dev/full")  # every write: ENOSPC
    grown = [p for p in TINY_PARAMS if not p.startswith("TrainerConfig.num_env_steps")]
    result = run_cli(train_cmd(root, *grown, "TrainerConfig.num_env_steps=3072"))
    assert result.returncode == 3, result.stderr[-3000:]
    stderr = assert_clean_user_error(
        result, TRAIN, f"cannot write '{progress}'", "No space left on device"
    )
    status = _status(root)
    assert status["state"] == "failed" and status["error"] in stderr
    assert _temporaries(root) == []
    # Iteration 10's summary failed before its periodic checkpoint: the final checkpoint
    # is 10's (the oldest of the 2 kept is rotated out as usual); the newest is untouched.
    assert checkpoint_steps(root) == [8, 10]
    assert (root / "checkpoints" / "ckpt-8.pt").read_bytes() == checkpoints["ckpt-8.pt"]


def _progress_on_a_full_device(root: Path) -> Path:
    """A fresh run dir whose ``progress.jsonl`` fails every write with ENOSPC."""
    root.mkdir()
    progress = root / layout.PROGRESS_FILE
    progress.symlink_to("/dev/full")
    return progress


def test_a_summary_that_cannot_be_written_still_leaves_a_final_checkpoint(tmp_path):
    root = tmp_path / "run"
    progress = _progress_on_a_full_device(root)
    params = [p for p in TINY_PARAMS if not p.startswith("TrainerConfig.summary_interval")]
    # Periodic checkpoints at 2, 4, ...; the first summary (iteration 3) fails.
    params += ["TrainerConfig.summary_interval=3", "TrainerConfig.eval_interval=0"]
    result = run_cli(train_cmd(root, *params))
    assert result.returncode == 3, result.stderr[-3000:]
    stderr = assert_clean_user_error(
        result, TRAIN, f"cannot write '{progress}'", "No space left on device"
    )
    status = _status(root)
    assert status["state"] == "failed" and status["exit_code"] == 3
    assert status["error"] in stderr
    assert _temporaries(root) == []
    # The periodic checkpoint of iteration 2 and the final one of iteration 3.
    assert checkpoint_steps(root) == [2, 3]
    final = read_checkpoint(str(root))
    assert (final.iteration, final.env_steps) == (3, 3 * STEPS_PER_ITERATION)


def test_a_final_checkpoint_that_fails_too_keeps_the_first_error(tmp_path):
    root = tmp_path / "run"
    progress = _progress_on_a_full_device(root)
    result = subprocess.run(
        train_cmd(root, *BIG_NETWORKS, "TrainerConfig.summary_interval=1"),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_file_size,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    stderr = assert_clean_user_error(
        result, TRAIN, f"cannot write '{progress}'", "No space left on device"
    )
    assert "Could not write a final checkpoint" in stderr and "File too large" in stderr
    status = _status(root)
    assert status["state"] == "failed" and status["error"] in stderr
    assert _temporaries(root) == []
    assert checkpoint_steps(root) == []


def test_write_json_atomic_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "status.json"
    target.mkdir()  # the rename onto it fails after the temporary file is written
    with pytest.raises(OSError):
        layout.write_json_atomic(str(target), {"state": "running"})
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]
