"""Data-parallel training through the real launcher: ``torchrun --nproc_per_node=2`` on
CPU (gloo), and two ranks started by hand (as on two machines) for the failure cases."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers_cli import (
    CONF,
    REPO,
    checkpoint_steps,
    cli_env,
    eval_records,
    free_port,
    read_progress,
    run_cli,
    stop_process,
    train_records,
    wait_for,
)

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)

# Unanchored: the two ranks write to one stream, and a line of one may be glued to the
# other's (the newline written after the other's text).
DIGEST_RE = re.compile(
    r"rank (\d): Finished at iteration (\d+) [^\n]*?parameters sha256 ([0-9a-f]{64})"
)

# Learning threshold of the two-rank PPO run: an evaluation average return of at least
# LEARNED_RETURN on CartPole-v1 within LEARNING_BUDGET env steps (random play: ~22).
LEARNED_RETURN = 400
LEARNING_BUDGET = 40_960

RANK_KILL_DEADLINE_S = 60


def _train_args(root: Path, *params: str) -> list[str]:
    return [
        "-m",
        "alf.bin.train",
        f"--root_dir={root}",
        f"--conf={CONF}",
        *(f"--conf_param={p}" for p in params),
    ]


def _torchrun(root: Path, *params: str, nproc: int = 2) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{free_port()}",
        *_train_args(root, *params),
    ]


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=timeout
    )


def _digests(stdout: str) -> dict[int, tuple[int, str]]:
    """``rank -> (final iteration, parameter digest)`` from the ranks' last lines."""
    found = {}
    for match in DIGEST_RE.finditer(stdout):
        found[int(match.group(1))] = (int(match.group(2)), match.group(3))
    return found


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


@pytest.mark.slow
def test_two_ranks_learn_with_identical_parameters_and_rank_0_alone_writes(tmp_path):
    workdir = tmp_path / "cwd"  # where a stray relative write would land
    workdir.mkdir()
    root = tmp_path / "run"
    proc = _run(
        _torchrun(
            root,
            f"TrainerConfig.num_env_steps={LEARNING_BUDGET}",
            "TrainerConfig.eval_interval=20",
            "TrainerConfig.checkpoint_interval=40",
            f"TrainerConfig.stop_at_eval_return={LEARNED_RETURN}",
        ),
        cwd=workdir,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # Both ranks end at the same iteration with bit-identical parameters.
    digests = _digests(proc.stdout)
    assert sorted(digests) == [0, 1], proc.stdout[-3000:]
    assert digests[0] == digests[1], digests

    # The run learned (the stop at the target is agreed by both ranks).
    evals = eval_records(read_progress(root))
    returns = [e["eval/average_return"] for e in evals]
    print(f"two-rank PPO CartPole evaluations: {returns} at {[e['env_steps'] for e in evals]}")
    assert evals[-1]["eval/average_return"] >= LEARNED_RETURN, returns
    assert evals[-1]["env_steps"] <= LEARNING_BUDGET + 256

    # Only rank 0 wrote: one writer per file, nothing outside root_dir.
    assert _files(workdir) == []
    files = _files(root)
    assert [f for f in files if f.startswith("train/")] and len(
        [f for f in files if f.startswith("train/events")]
    ) == 1, files
    assert len([f for f in files if f.startswith("eval/events")]) == 1, files
    assert not [f for f in files if ".tmp" in f], files
    records = read_progress(root)
    keys = [(r["iteration"], "fps" in r) for r in records]
    assert len(keys) == len(set(keys)), "a summary line was written twice"
    trains = train_records(records)
    assert all(len(r["fps_per_rank"]) == 2 for r in trains)
    # env_steps count both ranks: 8 envs (4 per rank) x 32 steps per iteration.
    assert all(r["env_steps"] == r["iteration"] * 256 for r in trains)
    state = torch.load(
        root / "checkpoints" / f"ckpt-{checkpoint_steps(root)[-1]}.pt", weights_only=True
    )
    assert state["world_size"] == 2 and len(state["torch_rng_per_rank"]) == 2
    assert (root / ".lock").read_text().strip().isdigit()

    # The research tools read a data-parallel run like any other.
    report = run_cli([sys.executable, "-m", "alf.bin.report", str(root)])
    assert report.returncode == 0, report.stderr[-2000:]
    row = next(line for line in report.stdout.splitlines() if "PPOAlgorithm" in line)
    assert "| CartPole-v1 | PPOAlgorithm | 1 |" in row, report.stdout
    plotted = run_cli(
        [sys.executable, "-m", "alf.bin.plot", str(root), f"--out={tmp_path / 'c.png'}"]
    )
    assert plotted.returncode == 0 and (tmp_path / "c.csv").is_file(), plotted.stderr[-2000:]


@pytest.mark.slow
def test_two_ranks_resume_from_rank_0_checkpoint(tmp_path):
    root = tmp_path / "run"
    budget = ("TrainerConfig.checkpoint_interval=5", "TrainerConfig.eval_interval=0")
    first = _run(_torchrun(root, "TrainerConfig.num_iterations=10", *budget), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert checkpoint_steps(root)[-1] == 10
    second = _run(_torchrun(root, "TrainerConfig.num_iterations=20", *budget), cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Resumed from" in second.stderr and "iteration 10" in second.stderr
    digests = _digests(second.stdout)
    assert digests[0] == digests[1] and digests[0][0] == 20, digests
    iterations = [r["iteration"] for r in train_records(read_progress(root))]
    assert iterations == sorted(set(iterations)) and iterations[-1] == 20, iterations


def _start_rank(rank: int, root: Path, port: int, log_dir: Path, *params: str) -> tuple:
    """One rank started by hand, as a launcher on another machine would."""
    env = cli_env()
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE="2",
        RANK=str(rank),
        LOCAL_RANK=str(rank),
    )
    log = log_dir / f"rank{rank}.txt"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, *_train_args(root, *params)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log


LONG_RUN = (
    "TrainerConfig.num_env_steps=10000000",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.checkpoint_interval=5",
    "TrainerConfig.eval_interval=0",
)


@pytest.mark.parametrize("failure", ["killed", "hung"])
def test_surviving_rank_exits_with_an_error_when_the_other_dies_or_hangs(tmp_path, failure):
    root = tmp_path / "run"
    port = free_port()
    params = (*LONG_RUN, "TrainerConfig.distributed_timeout_s=10")
    rank0, log0 = _start_rank(0, root, port, tmp_path, *params)
    rank1, log1 = _start_rank(1, root, port, tmp_path, *params)
    try:
        wait_for(
            lambda: len(checkpoint_steps(root)) >= 1, 120, rank0, what="the first checkpoint"
        )
        saved = checkpoint_steps(root)
        os.kill(rank1.pid, signal.SIGKILL if failure == "killed" else signal.SIGSTOP)
        start = time.monotonic()
        rank0.wait(timeout=RANK_KILL_DEADLINE_S)
        took = time.monotonic() - start
    finally:
        for proc in (rank0, rank1):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
            stop_process(proc)
    output = log0.read_text()
    print(f"rank 1 {failure}: rank 0 exited after {took:.1f}s with {rank0.returncode}")
    assert rank0.returncode == 3, output[-3000:]
    assert "alf.bin.train: error: rank 0: lost contact with the other ranks" in output, output[
        -3000:
    ]
    # What was saved before the failure is intact and loadable.
    assert set(saved) <= set(checkpoint_steps(root))
    for step in checkpoint_steps(root):
        torch.load(root / "checkpoints" / f"ckpt-{step}.pt", weights_only=True)


def _rank_pid(launcher_pid: int, rank: int) -> int | None:
    """The pid of the torchrun worker with ``RANK=rank`` (Linux ``/proc``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().split()
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and int(stat[3]) == launcher_pid:
            return int(entry.name)
    return None


def _start_long_torchrun(root: Path, log: Path, *, new_session: bool) -> subprocess.Popen:
    """A two-rank run with a budget it never reaches, its output going to ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen(
            _torchrun(root, *LONG_RUN),
            cwd=root.parent,
            env=cli_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
        )


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the rank's pid in /proc")
def test_torchrun_stops_the_run_when_a_rank_is_killed(tmp_path):
    root, log = tmp_path / "run", tmp_path / "torchrun.txt"
    launcher = _start_long_torchrun(root, log, new_session=True)
    try:
        wait_for(lambda: checkpoint_steps(root), 120, launcher, what="the first checkpoint")
        pid = _rank_pid(launcher.pid, 1)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        launcher.wait(timeout=RANK_KILL_DEADLINE_S)
        took = time.monotonic() - start
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
    output = log.read_text()
    print(f"torchrun exited {took:.1f}s after rank 1 was killed")
    assert launcher.returncode != 0, output[-3000:]
    assert "rank      : 1" in output and "SIGKILL" in output, output[-3000:]
    # No worker is left behind.
    assert _rank_pid(launcher.pid, 0) is None


@pytest.mark.parametrize(
    ("conf", "params"),
    [
        # Off-policy: a replay buffer per rank, random initial steps shared out.
        (
            "sac_pendulum.gin",
            (
                "create_environment.num_parallel_environments=2",
                "TrainerConfig.initial_collect_steps=100",
                "SacAlgorithm.mini_batch_size=64",
                "TrainerConfig.num_iterations=80",
            ),
        ),
        # Asynchronous collection: each rank runs its own actor processes.
        ("appo_cart_pole.gin", ("TrainerConfig.num_iterations=6",)),
        # Both: actors feed each rank's replay buffer at their own pace.
        (
            "async_sac_pendulum.gin",
            (
                "create_environment.num_parallel_environments=4",
                "TrainerConfig.initial_collect_steps=200",
                "SacAlgorithm.mini_batch_size=64",
                "TrainerConfig.num_iterations=40",
            ),
        ),
        # Several policies (one per agent): each learning policy's gradients averaged
        # over the ranks by its own DDP, the policies updated in the same order.
        (
            "ppo_simple_spread.gin",
            (
                "policy_mapping.mapping='per_agent'",
                "create_environment.num_parallel_environments=12",
                "PPOAlgorithm.mini_batch_size=50",
                "PPOAlgorithm.num_epochs=2",
                "TrainerConfig.num_iterations=4",
            ),
        ),
        # Updates that leave the actor without a gradient need find_unused_parameters.
        (
            "td3_pendulum.gin",
            (
                "create_environment.num_parallel_environments=2",
                "TrainerConfig.initial_collect_steps=100",
                "Td3Algorithm.mini_batch_size=64",
                "TrainerConfig.num_iterations=80",
                "TrainerConfig.find_unused_parameters=True",
            ),
        ),
    ],
)
def test_off_policy_and_async_algorithms_stay_identical_across_ranks(tmp_path, conf, params):
    """Every rank makes the same updates (or the run would hang or fail its checks)."""
    root = tmp_path / "run"
    cmd = _torchrun(root, *params, "TrainerConfig.eval_interval=0", "TrainerConfig.evaluate=False")
    cmd[cmd.index(f"--conf={CONF}")] = f"--conf={CONF.parent / conf}"
    proc = _run(cmd, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    digests = _digests(proc.stdout)
    assert sorted(digests) == [0, 1] and digests[0] == digests[1], proc.stdout[-2000:]


def test_sigterm_to_torchrun_stops_every_rank_at_the_same_checkpointed_iteration(tmp_path):
    root, log = tmp_path / "run", tmp_path / "torchrun.txt"
    launcher = _start_long_torchrun(root, log, new_session=False)
    try:
        wait_for(lambda: checkpoint_steps(root), 120, launcher, what="the first checkpoint")
        launcher.send_signal(signal.SIGTERM)  # torchrun passes it on to every rank
        launcher.wait(timeout=60)
    finally:
        stop_process(launcher)
    output = log.read_text()
    stopped = re.findall(
        r"rank (\d): Stopped by signal at iteration (\d+); checkpoint written; parameters "
        r"sha256 ([0-9a-f]{64})",
        output,
    )
    # Each rank's line appears twice (its log and its stdout): one entry per rank.
    by_rank = {rank: (iteration, digest) for rank, iteration, digest in stopped}
    assert sorted(by_rank) == ["0", "1"], output[-3000:]
    assert len(set(stopped)) == 2, stopped  # no rank reported two different stops
    (iteration0, digest0), (iteration1, digest1) = by_rank["0"], by_rank["1"]
    assert (iteration0, digest0) == (iteration1, digest1)
    assert checkpoint_steps(root)[-1] == int(iteration0)


def test_an_update_without_gradients_for_some_parameters_is_a_clear_error(tmp_path):
    root = tmp_path / "run"
    params = (
        "create_environment.num_parallel_environments=2",
        "TrainerConfig.initial_collect_steps=100",
        "Td3Algorithm.mini_batch_size=64",
        "TrainerConfig.num_iterations=80",
        "TrainerConfig.evaluate=False",
    )
    cmd = _torchrun(root, *params)
    cmd[cmd.index(f"--conf={CONF}")] = f"--conf={CONF.parent / 'td3_pendulum.gin'}"
    proc = _run(cmd, cwd=tmp_path)
    assert proc.returncode != 0
    assert "set TrainerConfig.find_unused_parameters = True" in proc.stderr, proc.stderr[-3000:]
