"""Tests of the launchers of ``alf.bin.sweep``, ``alf.bin.tune`` and ``alf.bin.pbt``
(``--launcher=local|slurm|ray``): bad input (an unknown launcher, a package missing, a
Ray address that does not answer: one line, status 2, nothing started), and real
CartPole sweeps and studies through submitit's local executor and a local Ray head, each
with one job killed mid-run (resubmitted: the run resumes from its checkpoint) and the
controller killed with ``kill -9`` and run again (it finds its jobs: no duplicate run)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers_cli import (
    CONF,
    REPO,
    checkpoint_steps,
    cli_env,
    error_lines,
    free_port,
    popen_cli,
    run_cli,
    stop_process,
    train_cmd,
    wait_for,
)

from alf.experiments.launchers.base import JobRecord

SMALL = (
    "TrainerConfig.eval_interval=2",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
    "TrainerConfig.checkpoint_interval=2",
)
STEPS = 3072
"""Env steps of a run: 12 iterations of ``ppo_cart_pole.gin``, time to kill a job."""
SLURM_LOCAL = ("--launcher=slurm", "--slurm_local")


def tool_cmd(tool: str, root: Path, *flags: str, steps: int = STEPS) -> list[str]:
    cmd = [sys.executable, "-m", f"alf.bin.{tool}", f"--conf={CONF}", f"--root_dir={root}"]
    params = (*SMALL, f"TrainerConfig.num_env_steps={steps}")
    return (
        cmd
        + [f"--conf_param={p}" for p in params]
        + ["--status_interval_s=1000"] * (tool == "sweep")
        + list(flags)
    )


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def launches(run_dir: Path) -> int:
    """``alf.bin.train`` commands started in ``run_dir`` (the ``$`` lines of its log)."""
    return sum(line.startswith("$ ") for line in (run_dir / "train.log").read_text().splitlines())


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("tool", ["sweep", "tune", "pbt"])
def test_an_unknown_launcher_is_one_line_and_status_2(tmp_path, tool):
    flags = {
        "sweep": ["--seeds=0"],
        "tune": ["--space=PPOAlgorithm.num_epochs=int(2, 4)", "--trials=2"],
        "pbt": [
            "--population=2",
            "--interval=512",
            "--mutate=PPOAlgorithm.gae_lambda=uniform(0.8, 0.99)",
        ],
    }[tool]
    result = run_cli(tool_cmd(tool, tmp_path / "root", *flags, "--launcher=kubernetes"))
    assert result.returncode == 2, result.stderr
    lines = error_lines(result.stderr, f"alf.bin.{tool}")
    assert len(lines) == 1 and "--launcher 'kubernetes': unknown" in lines[0], result.stderr
    assert not (tmp_path / "root").exists()


def _hiding(tmp_path: Path, package: str) -> dict[str, str]:
    """An environment where ``import package`` fails (as when it is not installed)."""
    fake = tmp_path / "hide" / package
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"raise ImportError('No module named {package}')\n")
    return {**cli_env(), "PYTHONPATH": f"{fake.parent}{os.pathsep}{REPO}"}


@pytest.mark.parametrize(
    ("launcher", "package", "extra"), [("slurm", "submitit", "slurm"), ("ray", "ray", "ray")]
)
def test_a_launcher_without_its_package_is_one_line_naming_the_extra(
    tmp_path, launcher, package, extra
):
    cmd = tool_cmd("sweep", tmp_path / "root", "--seeds=0", f"--launcher={launcher}")
    result = subprocess.run(
        cmd, cwd=REPO, env=_hiding(tmp_path, package), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = error_lines(result.stderr, "alf.bin.sweep")
    assert len(lines) == 1 and f"[{extra}]" in lines[0] and package in lines[0], result.stderr
    assert not (tmp_path / "root").exists()


@pytest.mark.skipif(shutil.which("sbatch") is not None, reason="Slurm is installed here")
def test_slurm_without_slurm_is_one_line_pointing_at_the_rehearsal(tmp_path):
    pytest.importorskip("submitit")
    result = run_cli(tool_cmd("sweep", tmp_path / "root", "--seeds=0", "--launcher=slurm"))
    assert result.returncode == 2, result.stderr
    lines = error_lines(result.stderr, "alf.bin.sweep")
    assert len(lines) == 1 and "sbatch not found" in lines[0] and "--slurm_local" in lines[0]
    assert not (tmp_path / "root").exists()


def test_a_ray_address_that_does_not_answer_is_one_line(tmp_path):
    pytest.importorskip("ray")
    port = free_port()
    cmd = tool_cmd(
        "tune",
        tmp_path / "root",
        "--space=PPOAlgorithm.num_epochs=int(2, 4)",
        "--trials=2",
        "--launcher=ray",
        f"--ray_address=127.0.0.1:{port}",
        "--ray_timeout_s=3",
    )
    result = run_cli(cmd, timeout=120)
    assert result.returncode == 2, result.stderr
    assert error_lines(result.stderr, "alf.bin.tune") == [
        f"alf.bin.tune: error: --ray_address '127.0.0.1:{port}': the Ray cluster does not "
        "answer (Connection refused); start it with 'ray start --head' or give its address"
    ], result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert not (tmp_path / "root").exists()


def test_the_job_record_is_relative_to_the_controllers_directory(tmp_path):
    record = JobRecord(str(tmp_path))
    record.put(str(tmp_path / "a" / "seed-0"), {"backend": "slurm", "job_id": "17"})
    assert record.get(str(tmp_path / "a" / "seed-0")) == {"backend": "slurm", "job_id": "17"}
    assert json.loads((tmp_path / ".launcher" / "jobs.json").read_text()) == {
        "a/seed-0": {"backend": "slurm", "job_id": "17"}
    }
    assert record.get(str(tmp_path / "b")) is None


# ------------------------------------------------------------------ Ray head
@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[str]:  # noqa: ANN001
    """A Ray head on 127.0.0.1 with 2 CPUs, in a session of its own that the test ends."""
    pytest.importorskip("ray")
    port = free_port()
    temp = tmp_path_factory.mktemp("ray")
    ray_bin = Path(sys.executable).parent / "ray"
    head = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = head.communicate(timeout=120)
        assert head.returncode == 0, out
        yield f"127.0.0.1:{port}"
    finally:
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(head.pid, signum)  # ray start's session: the head's processes
            except ProcessLookupError:
                break
            time.sleep(3)


# ------------------------------------------------------------------ scenarios
def _kill_the_controller_then_a_job(
    cmd: list[str], run_dir: Path, tmp_path: Path
) -> subprocess.CompletedProcess:
    """Starts the controller and kills it (``kill -9``) once ``run_dir`` checkpointed; runs
    it again, which must adopt the jobs still training; kills the job of the first run it
    adopted, which it must resubmit. Returns the second controller's output."""
    first, _, _ = popen_cli(cmd, tmp_path / "first")
    paused: list[int] = []
    try:
        wait_for(lambda: checkpoint_steps(run_dir), timeout=300, proc=first, what="a checkpoint")
        first.kill()  # its jobs train on
        first.wait(timeout=30)
        # The trainings wait (SIGSTOP) until the second controller has found them: none
        # may finish while it starts.
        for path in run_dir.parent.glob("*/status.json"):
            if json.loads(path.read_text()).get("state") == "running":
                paused.append(json.loads(path.read_text())["pid"])
                os.kill(paused[-1], signal.SIGSTOP)
    finally:
        stop_process(first)
    second, out_path, err_path = popen_cli(cmd, tmp_path / "second")
    try:
        wait_for(
            lambda: out_path.read_text().count("adopted") >= len(paused),
            timeout=180,
            proc=second,
            what="adoption",
        )
        adopted = next(line for line in out_path.read_text().splitlines() if "adopted" in line)
        log = re.search(r"\(log: (.*)/train\.log\)", adopted)
        assert log, adopted
        # The run dir's lock holds against a second trainer, wherever the job runs.
        second_trainer = run_cli(train_cmd(log.group(1), *SMALL), timeout=120)
        assert second_trainer.returncode == 2, second_trainer.stderr
        assert "in use by another training process" in second_trainer.stderr
        _kill_job_of(Path(log.group(1)))()  # a job the second controller follows
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        second.wait(timeout=400)
    finally:
        for pid in paused:
            if alive(pid):
                os.kill(pid, signal.SIGCONT)
        stop_process(second)
    return subprocess.CompletedProcess(
        cmd, second.returncode, out_path.read_text(), err_path.read_text()
    )


def _kill_job_of(run_dir: Path) -> Callable[[], None]:
    """Kills (SIGKILL) the process that trains ``run_dir`` as its job: submitit's job
    process or Ray's actor worker, the parent of the ``alf.bin.train`` process."""

    def kill() -> None:
        os.kill(parent_of(status(run_dir)["pid"]), signal.SIGKILL)

    return kill


def _resubmitted(again: subprocess.CompletedProcess, ray: bool) -> None:
    """Submitit's dead job was resubmitted by the controller; Ray restarts an actor
    itself."""
    assert ray or "resubmitting it" in again.stdout, again.stdout


def _check_sweep(root: Path, again: subprocess.CompletedProcess, ray: bool = False) -> None:
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "FAILED" not in again.stdout, again.stdout
    _resubmitted(again, ray)
    for seed in (0, 1):
        run = root / "ppo_cart_pole" / f"seed-{seed}"
        assert status(run)["state"] == "finished" and status(run)["env_steps"] >= STEPS
        assert "in use by another" not in (run / "train.log").read_text()  # no duplicate
    runs = [root / "ppo_cart_pole" / f"seed-{seed}" for seed in (0, 1)]
    assert any("Resumed from" in (run / "train.log").read_text() for run in runs)


@pytest.mark.slow
def test_a_submitit_sweep_resumes_a_killed_job_and_a_rerun_finds_its_jobs(tmp_path):
    pytest.importorskip("submitit")
    root = tmp_path / "sweep"
    cmd = tool_cmd("sweep", root, "--seeds=0,1", "--jobs=2", *SLURM_LOCAL)
    run_dir = root / "ppo_cart_pole" / "seed-0"
    _check_sweep(root, _kill_the_controller_then_a_job(cmd, run_dir, tmp_path))


@pytest.mark.slow
def test_a_ray_sweep_resumes_a_killed_actor_and_a_rerun_finds_its_actors(tmp_path, ray_head):
    root = tmp_path / "sweep"
    cmd = tool_cmd(
        "sweep", root, "--seeds=0,1", "--jobs=2", "--launcher=ray", f"--ray_address={ray_head}"
    )
    run_dir = root / "ppo_cart_pole" / "seed-0"
    _check_sweep(root, _kill_the_controller_then_a_job(cmd, run_dir, tmp_path), ray=True)


TUNE_FLAGS = (
    "--space=PPOAlgorithm.num_epochs=int(2, 6)",
    "--trials=3",
    "--workers=2",
    "--pruner=none",
)


def _check_study(root: Path, again: subprocess.CompletedProcess, ray: bool = False) -> None:
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    _resubmitted(again, ray)
    assert "3 complete, 0 pruned, 0 fail trials" in again.stdout, again.stdout
    assert (root / "study.journal").is_file()
    trials = sorted(p.name for p in root.glob("trial-*"))
    assert trials == ["trial-0000", "trial-0001", "trial-0002"]  # no trial run twice
    for name in trials:
        assert status(root / name)["state"] == "finished"
        assert "in use by another" not in (root / name / "train.log").read_text()
    assert any("Resumed from" in (root / name / "train.log").read_text() for name in trials)


@pytest.mark.slow
def test_a_submitit_study_with_two_workers_resumes_a_killed_trial(tmp_path):
    pytest.importorskip("submitit")
    root = tmp_path / "study"
    cmd = tool_cmd("tune", root, *TUNE_FLAGS, *SLURM_LOCAL)
    run_dir = root / "trial-0000"
    _check_study(root, _kill_the_controller_then_a_job(cmd, run_dir, tmp_path))


@pytest.mark.slow
def test_a_ray_study_with_two_workers_resumes_a_killed_trial(tmp_path, ray_head):
    root = tmp_path / "study"
    cmd = tool_cmd("tune", root, *TUNE_FLAGS, "--launcher=ray", f"--ray_address={ray_head}")
    run_dir = root / "trial-0000"
    _check_study(root, _kill_the_controller_then_a_job(cmd, run_dir, tmp_path), ray=True)
