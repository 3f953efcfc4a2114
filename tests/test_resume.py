"""Crash and signal safety of ``python -m alf.bin.train`` (real subprocesses):
``kill -9`` then restart resumes from the newest checkpoint; SIGTERM / SIGINT write a
checkpoint and exit 0."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest
from helpers_cli import (
    CONF,
    STEPS_PER_ITERATION,
    TINY_PARAMS,
    checkpoint_steps,
    popen_cli,
    read_progress,
    run_cli,
    snapshot,
    stop_process,
    train_cmd,
    train_records,
    wait_for,
)

# Killed right after its first checkpoint (iteration 2), so it is killed far from the end.
RESUME_ITERATIONS = 30
RESUME_PARAMS = (
    f"TrainerConfig.num_env_steps={RESUME_ITERATIONS * STEPS_PER_ITERATION}",
    "TrainerConfig.checkpoint_interval=2",
    "TrainerConfig.num_checkpoints=3",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.evaluate=False",
    "TrainerConfig.progress_interval_s=0",
)

# Never finishes by itself; writes a checkpoint only at the end (or when stopped).
ENDLESS_PARAMS = (
    "TrainerConfig.num_env_steps=100000000",
    "TrainerConfig.checkpoint_interval=1000000",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.evaluate=False",
    "TrainerConfig.progress_interval_s=0",
)


def _lenient_progress(root) -> list[dict]:
    """progress.jsonl of a killed run: its last line may be torn."""
    path = root / "progress.jsonl"
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return records


def test_kill_9_then_restart_resumes_from_newest_checkpoint(tmp_path):
    root = tmp_path / "root"
    cmd = train_cmd(root, *RESUME_PARAMS)
    proc, _, _ = popen_cli(cmd, tmp_path / "first")
    try:
        wait_for(
            lambda: checkpoint_steps(root),
            timeout=180,
            proc=proc,
            interval=0.01,
            what="the first checkpoint",
        )
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        stop_process(proc)

    steps = checkpoint_steps(root)
    newest = steps[-1]
    assert newest < RESUME_ITERATIONS
    before = _lenient_progress(root)
    ckpt_dir = root / "checkpoints"
    # A torn write of a "newer" checkpoint left by a crash: it must be ignored and removed.
    torn = ckpt_dir / "ckpt-999.pt.tmp-123"
    torn.write_bytes((ckpt_dir / f"ckpt-{newest}.pt").read_bytes()[:1000])

    result = run_cli(cmd)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    newest_path = ckpt_dir / f"ckpt-{newest}.pt"
    assert (
        f"Resumed from {newest_path} (iteration {newest}, {newest * STEPS_PER_ITERATION} env steps)"
    ) in result.stderr, result.stderr
    assert "ckpt-999" not in result.stderr + result.stdout
    assert not torn.exists()
    assert not list(ckpt_dir.glob("*.tmp*"))
    budget = RESUME_ITERATIONS * STEPS_PER_ITERATION
    assert f"Finished at iteration {RESUME_ITERATIONS} ({budget} env steps)" in result.stdout
    assert checkpoint_steps(root)[-1] == RESUME_ITERATIONS
    assert 999 not in checkpoint_steps(root)

    # progress.jsonl: the first run's lines up to the checkpoint are kept, its lines past
    # the checkpoint (trained again) are dropped, and the restart continues from there.
    kept = [r for r in train_records(before) if r["iteration"] <= newest]
    after = train_records(read_progress(root))
    assert after[: len(kept)] == kept
    new = after[len(kept) :]
    assert new, "the restart wrote no progress line"
    assert new[0]["iteration"] == newest + 1, new[0]
    assert new[0]["env_steps"] == (newest + 1) * STEPS_PER_ITERATION
    assert [r["iteration"] for r in after] == list(range(1, RESUME_ITERATIONS + 1))
    assert all(r["env_steps"] == r["iteration"] * STEPS_PER_ITERATION for r in after)
    elapsed = [r["elapsed_s"] for r in after]
    assert elapsed == sorted(elapsed), "training time restarted from 0"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_checkpoints_and_exits_zero(tmp_path, signum):
    root = tmp_path / "root"
    proc, out_path, err_path = popen_cli(train_cmd(root, *ENDLESS_PARAMS), tmp_path / "logs")
    try:
        # Two summaries: the loop (and the signal handler installed before it) is running.
        progress = root / "progress.jsonl"
        wait_for(
            lambda: progress.exists() and len(progress.read_text().splitlines()) >= 2,
            timeout=180,
            proc=proc,
            what="two progress lines",
        )
        assert checkpoint_steps(root) == []
        sent = time.monotonic()
        proc.send_signal(signum)
        rc = proc.wait(timeout=10)
        took = time.monotonic() - sent
    finally:
        stop_process(proc)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    assert rc == 0, stderr
    assert took < 10
    assert "Traceback" not in stderr
    assert f"Received {signum.name}" in stderr
    stopped = [int(x) for x in re.findall(r"Stopped by signal at iteration (\d+)", stdout)]
    assert len(stopped) == 1, stdout
    iteration = stopped[0]
    assert checkpoint_steps(root) == [iteration]
    last = train_records(read_progress(root))[-1]
    assert last["iteration"] == iteration
    assert last["env_steps"] == iteration * STEPS_PER_ITERATION


def test_second_trainer_on_the_same_root_dir_is_refused(tmp_path):
    """Two live trainers must never share a root_dir (they would prune each other's
    checkpoints); the second gets a clear error and the first run is unaffected."""
    from alf import config as alf_config
    from alf.trainers import RLTrainer, TrainerConfig
    from alf.trainers.run_lock import RunDirLockedError

    alf_config.load_config(
        str(CONF), ["TrainerConfig.num_env_steps=512", "TrainerConfig.evaluate=False"]
    )
    root = str(tmp_path / "run")
    first = RLTrainer(config=TrainerConfig(), root_dir=root)
    try:
        with pytest.raises(RunDirLockedError, match="in use by another training process"):
            RLTrainer(config=TrainerConfig(), root_dir=root)
        assert first.train()["iteration"] == 2
    finally:
        first.close()
    second = RLTrainer(config=TrainerConfig(), root_dir=root)  # free again after close()
    second.close()


def test_resume_with_a_different_config_is_refused_and_keeps_the_run(tmp_path):
    """Resuming a PPO run with the A2C config must not silently train A2C from PPO's
    weights (and later prune PPO's checkpoints): it names the differing bindings."""
    root = tmp_path / "run"
    first = run_cli(train_cmd(root, *TINY_PARAMS))
    assert first.returncode == 0, first.stderr
    before = snapshot(root)
    a2c = CONF.parent / "ac_cart_pole.gin"
    second = run_cli(train_cmd(root, *TINY_PARAMS, conf=a2c))
    assert second.returncode != 0
    assert "config differs" in second.stderr and "TrainerConfig.algorithm_ctor" in second.stderr
    assert "Traceback" not in second.stderr
    assert snapshot(root) == before
    # Extending the budget is a resumable change.
    longer = [p for p in TINY_PARAMS if "num_env_steps" not in p]
    budget = f"TrainerConfig.num_env_steps={10 * STEPS_PER_ITERATION}"
    third = run_cli(train_cmd(root, *longer, budget))
    assert third.returncode == 0, third.stderr
    assert "Resumed from" in third.stderr
