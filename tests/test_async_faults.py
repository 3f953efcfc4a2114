"""Failure contract of asynchronous collection, with real processes through the command
line: an environment that raises or hangs inside an actor, SIGINT/SIGTERM to the
trainer, and a normal run. After each, no process of the run is left alive and no
shared-memory segment it created remains (whatever other programs leave in /dev/shm
meanwhile)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import shared_memory
from pathlib import Path

import pytest
from helpers_async import (
    SHM,
    MarkedPids,
    leaked_shm_entries,
    mapped_shm_entries,
    shm_entries,
    shm_owner,
    wait_until_gone,
    write_faulty_env_module,
)
from helpers_cli import checkpoint_steps, cli_env, read_progress, train_cmd, wait_for

EXIT_TRAINING_ERROR = 3

ASYNC_PARAMS = (
    "TrainerConfig.async_unroll=True",
    "create_environment.num_parallel_environments=4",
    "AsyncUnroller.num_actors=2",
    "TrainerConfig.unroll_length=16",
    "TrainerConfig.evaluate=False",
    "TrainerConfig.summary_interval=2",
    "TrainerConfig.checkpoint_interval=1000",
    "TrainerConfig.progress_interval_s=0",
    "PPOAlgorithm.num_epochs=2",
)


# Another program that leaves entries in /dev/shm, unmapped (as a leak of its own would
# be), then keeps running: one named by Python, two named as torch's and ALF's are.
UNRELATED_PROGRAM = """
import os, time
from multiprocessing import shared_memory
names = []
for name in (None, f"torch_{os.getpid()}_0_0", f"sem.alf_{os.getpid()}-unrelated"):
    shm = shared_memory.SharedMemory(name=name, create=True, size=16)
    names.append(shm.name.lstrip("/"))
    shm.close()
print(" ".join(names), flush=True)
time.sleep(600)
"""


@contextmanager
def unrelated_shm_leftovers() -> Iterator[set[str]]:
    """Runs :data:`UNRELATED_PROGRAM` meanwhile; yields the names of its entries."""
    proc = subprocess.Popen(
        [sys.executable, "-c", UNRELATED_PROGRAM],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # (its resource tracker's warnings once it is killed)
        text=True,
    )
    names: set[str] = set()
    try:
        names.update(proc.stdout.readline().split())
        assert len(names) == 3, names
        yield names
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        for name in names:
            (SHM / name).unlink(missing_ok=True)


class Run:
    """A marked trainer process with a user env module on its PYTHONPATH."""

    def __init__(self, tmp_path: Path, *params: str, fault: str = "none", fault_at: int = 0):
        self.root = tmp_path / "run"
        self.stamp = tmp_path / "fault_time"
        module = write_faulty_env_module(tmp_path)
        fault_at = fault_at or 10**9
        kwargs = f'{{"fault": "{fault}", "fault_at": {fault_at}, "stamp_file": "{self.stamp}"}}'
        self.cmd = train_cmd(
            self.root,
            *ASYNC_PARAMS,
            f'create_environment.env_name="{module}:Faulty-v0"',
            f"create_environment.env_kwargs={kwargs}",
            *params,
        )
        self.marker = uuid.uuid4().hex
        self.env = cli_env()
        self.env["ALF_TEST_MARKER"] = self.marker
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(tmp_path), self.env.get("PYTHONPATH", "")) if p
        )
        self.shm_before = shm_entries()
        self.log = tmp_path / "stderr.txt"
        self.pids = MarkedPids(self.marker)  # the run's processes, the actors included

    def start(self) -> subprocess.Popen:
        with open(self.log, "w") as err:
            return subprocess.Popen(
                self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=err,
                start_new_session=True,
            )

    def run(self, timeout: float = 180) -> tuple[subprocess.CompletedProcess, float]:
        """Runs to the end; returns the result and the time it ended."""
        result = subprocess.run(
            self.cmd, env=self.env, capture_output=True, text=True, timeout=timeout,
            check=False,
        )
        return result, time.time()

    def fault_time(self) -> float:
        return float(self.stamp.read_text())

    def assert_nothing_left(self) -> None:
        alive = wait_until_gone(self.marker)
        assert not alive, f"processes of the run still alive: {alive}"
        pids = self.pids.stop()
        assert pids, "the run's processes were never seen"
        leaked = leaked_shm_entries(self.shm_before, pids)
        assert not leaked, f"shared-memory entries left behind: {sorted(leaked)}"


def test_leak_check_looks_only_at_the_runs_own_entries():
    assert shm_owner("torch_123_4_5") == 123
    assert shm_owner("sem.alf_77-x1y2") == 77
    assert shm_owner("sem.mp-x1y2") is None and shm_owner("psm_1234") is None
    before = shm_entries()
    with unrelated_shm_leftovers() as theirs:
        # New and mapped by no live process: what a leak of the run would look like.
        assert theirs <= shm_entries() - before
        assert not theirs & mapped_shm_entries()
        own = shared_memory.SharedMemory(
            name=f"torch_{os.getpid()}_0_leakcheck", create=True, size=16
        )
        own.close()  # unmapped, not unlinked: this process's leak
        try:
            assert leaked_shm_entries(before) == {own.name.lstrip("/")}
        finally:
            own.unlink()
        assert not leaked_shm_entries(before)


def test_normal_async_run_reports_async_summaries_and_leaves_nothing(tmp_path):
    # The env id names a user module: importable in the actors (spawned), not just here.
    run = Run(tmp_path, "TrainerConfig.num_iterations=12")
    result, _ = run.run()
    assert result.returncode == 0, result.stderr[-3000:]
    records = [r for r in read_progress(run.root) if "fps" in r]
    assert records
    last = records[-1]
    for key in (
        "train/async/policy_lag_min",
        "train/async/policy_lag_mean",
        "train/async/policy_lag_max",
        "train/async/fragments_dropped",
        "train/async/actor_env_steps_per_second",
        "train/async/learner_wait_s",
        "train/async/queue_depth",
    ):
        assert key in last, sorted(last)
    assert last["train/async/policy_lag_max"] >= last["train/async/policy_lag_min"] >= 0
    assert last["train/async/actor_env_steps_per_second"] > 0
    assert last["env_steps"] == 12 * 16 * 2  # 12 fragments of 16 steps x 2 envs
    assert checkpoint_steps(run.root) == [12]
    # The actors' environment count is part of the operative config (so the saved
    # config.gin retrains the same run).
    assert "create_environment.num_parallel_environments = 4" in (
        run.root / "config.gin"
    ).read_text()
    run.assert_nothing_left()


def test_env_exception_in_actor_stops_training_with_its_traceback(tmp_path):
    run = Run(tmp_path, "TrainerConfig.num_iterations=100000", fault="raise", fault_at=40)
    with unrelated_shm_leftovers():  # another program's entries are not the run's
        result, ended = run.run()
        assert result.returncode == EXIT_TRAINING_ERROR, result.stderr[-3000:]
        stderr = result.stderr
        assert "alf.bin.train: error: Actor " in stderr
        assert "failed:" in stderr
        # The actor's own traceback, down to the user's function and message.
        assert "explode_in_user_env" in stderr
        assert "RuntimeError: the user environment exploded" in stderr
        assert ended - run.fault_time() < 10.0
        run.assert_nothing_left()


def test_hung_actor_is_detected_by_its_heartbeat(tmp_path):
    run = Run(
        tmp_path,
        "TrainerConfig.num_iterations=100000",
        "AsyncUnroller.heartbeat_timeout_s=3.0",
        fault="hang",
        fault_at=40,
    )
    result, ended = run.run()
    assert result.returncode == EXIT_TRAINING_ERROR, result.stderr[-3000:]
    assert "no sign of life" in result.stderr
    assert "heartbeat_timeout_s=3.0" in result.stderr
    assert "alf.bin.train: error: Actor " in result.stderr
    assert ended - run.fault_time() < 3.0 + 10.0
    run.assert_nothing_left()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_trainer_checkpoints_and_exits(tmp_path, signum):
    run = Run(tmp_path, "TrainerConfig.num_iterations=100000")
    proc = run.start()
    try:
        wait_for(
            lambda: (run.root / "progress.jsonl").is_file()
            and (run.root / "progress.jsonl").read_text().strip(),
            timeout=120,
            proc=proc,
            what="the first summary",
        )
        # The leak check sees the run's named semaphores (named after the trainer).
        ours = [name for name in shm_entries() if shm_owner(name) == proc.pid]
        assert any(name.startswith("sem.alf_") for name in ours), ours
        sent = time.monotonic()
        proc.send_signal(signum)
        rc = proc.wait(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, run.log.read_text()[-3000:]
    assert took < 10.0
    assert checkpoint_steps(run.root), "no checkpoint written"
    run.assert_nothing_left()
