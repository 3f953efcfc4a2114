"""Tests of ``alf.bin.tune``: search-space parsing, bad input, and real Optuna studies of
CartPole runs: a study continued by a second command, a pruned trial, and a trial
interrupted by Ctrl-C and resumed from its checkpoint; every value of a space checked
before the first trial, exit 1 when no trial finished, a corrupt study file, and kill -9
of the tuner (no orphan; a trial that finished unwatched is told, not rerun)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from helpers_cli import (
    CONF,
    checkpoint_steps,
    error_lines,
    popen_cli,
    run_cli,
    snapshot,
    stop_process,
    wait_for,
)

from alf.experiments.tune import SearchSpaceError, parse_space

EVALUATED = (
    "TrainerConfig.eval_interval=4",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
    "TrainerConfig.checkpoint_interval=4",
)
LR_SPACE = "--space=lr/LinearSchedule.start=choice(3e-3, 1e-9)"


def tune_cmd(root: Path, *flags: str, steps: int = 6144) -> list[str]:
    cmd = [sys.executable, "-m", "alf.bin.tune", f"--conf={CONF}", f"--root_dir={root}"]
    params = (*EVALUATED, f"TrainerConfig.num_env_steps={steps}")
    return cmd + [f"--conf_param={p}" for p in params] + list(flags)


def test_search_spaces_parse():
    space = parse_space("lr/LinearSchedule.start=loguniform(1e-5, 1e-2)")
    assert space.name == "lr/LinearSchedule.start"
    assert (space.kind, space.args) == ("loguniform", (1e-5, 1e-2))
    assert parse_space("PPOAlgorithm.num_epochs=int(4, 20)").args == (4, 20)
    choice = parse_space("ActorDistributionNetwork.fc_layer_params=choice((64, 64), (32,))")
    assert choice.args == ("(64, 64)", "(32,)")
    assert choice.gin_value("(32,)") == "(32,)"
    assert parse_space("PPOAlgorithm.clip=uniform(0.1, 0.3)").gin_value(0.25) == "0.25"


@pytest.mark.parametrize(
    "flag, message",
    [
        ("PPOAlgorithm.clip", "expected 'Name.param=KIND"),
        ("PPOAlgorithm.clip=gaussian(0, 1)", "unknown kind 'gaussian'"),
        ("PPOAlgorithm.clip=uniform(0.3, 0.1)", "low must be below high"),
        ("PPOAlgorithm.clip=loguniform(0, 1)", "positive low bound"),
        ("PPOAlgorithm.num_epochs=int(1.5, 4)", "must be ints"),
        ("PPOAlgorithm.clip=uniform(0.1)", "two bounds"),
        ("PPOAlgorithm.clip=choice(0.1)", "at least two values"),
    ],
)
def test_bad_search_spaces_are_named(flag, message):
    with pytest.raises(SearchSpaceError, match=message) as info:
        parse_space(flag)
    assert flag in str(info.value)


@pytest.mark.parametrize(
    "flags, culprit",
    [
        (["--space=PPOAlgorithm.clip=normal(0, 1)", "--trials=2"], "unknown kind 'normal'"),
        (["--space=PPOAlgorithm.clipp=uniform(0.1, 0.3)", "--trials=2"], "clipp"),
        (["--space=PPOAlgorithm.clip=uniform(0.1, 0.3)", "--trials=0"], "--trials must be >= 1"),
        (["--space=PPOAlgorithm.clip=uniform(0.1, 0.3)", "--trials=2", "--objective=max"], "last"),
    ],
)
def test_bad_tune_input_gets_one_line_and_status_2(tmp_path, flags, culprit):
    proc = run_cli(tune_cmd(tmp_path / "study", *flags), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = error_lines(proc.stderr, "alf.bin.tune")
    assert len(errors) == 1 and culprit in errors[0], proc.stderr[-2000:]


@pytest.mark.parametrize(
    "space, value",
    [
        ("PPOAlgorithm.num_epochs=uniform(2, 5)", "3.11"),  # only the bounds are whole
        ("PPOAlgorithm.num_epochs=choice(2, 3.5)", "3.5"),  # the second choice
    ],
)
def test_every_value_of_a_space_is_checked_before_the_first_trial(tmp_path, space, value):
    # (A space that fits, e.g. int(2, 5) or LR_SPACE, runs in the studies below.)
    root = tmp_path / "study"
    proc = run_cli(tune_cmd(root, f"--space={space}", "--trials=1", steps=256), timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = error_lines(proc.stderr, "alf.bin.tune")
    assert len(errors) == 1, proc.stderr
    assert f"value {value}:" in errors[0] and "PPOAlgorithm.num_epochs" in errors[0]
    assert "must be an int" in errors[0]
    assert not list(root.glob("trial-*")) and not (root / "study.db").exists()


def test_a_study_where_no_trial_finishes_exits_1_naming_the_first_failure(tmp_path):
    space = "--space=create_environment.env_name=choice('NoSuchEnvA-v0', 'NoSuchEnvB-v0')"
    proc = run_cli(tune_cmd(tmp_path / "study", space, "--trials=1"), timeout=240)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "0 complete, 0 pruned, 1 fail trials" in proc.stdout
    errors = error_lines(proc.stderr, "alf.bin.tune")
    assert len(errors) == 1, proc.stderr
    assert "no trial of the study" in errors[0] and "NoSuchEnv" in errors[0]
    assert "trial-0000" in errors[0]  # the failed trial's log


def test_a_corrupt_study_file_is_one_line_naming_it(tmp_path):
    root = tmp_path / "study"
    root.mkdir()
    study = root / "study.db"
    study.write_bytes(b"not a database, " * 300)
    before = snapshot(root)
    proc = run_cli(tune_cmd(root, LR_SPACE, "--trials=1"), timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    errors = error_lines(proc.stderr, "alf.bin.tune")
    assert len(errors) == 1 and str(study) in errors[0] and "not a database" in errors[0]
    assert snapshot(root) == before


def test_a_study_continues_and_prunes_a_trial_below_the_median(tmp_path):
    root = tmp_path / "study"
    # Seed 0 samples the learning rates 1e-9, 3e-3, 1e-9 (Optuna's seeded start-up
    # sampling); with one start-up trial, the third (a copy of the first, which cannot
    # learn) falls below the median of the first two and is pruned.
    flags = (LR_SPACE, "--seed=0", "--prune_startup_trials=1")
    first = run_cli(tune_cmd(root, *flags, "--trials=2"), timeout=400)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert first.stdout.count("finished: last eval") == 2
    assert (root / "study.db").is_file()
    assert sorted(p.name for p in root.glob("trial-*")) == ["trial-0000", "trial-0001"]

    second = run_cli(tune_cmd(root, *flags, "--trials=3"), timeout=400)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "2 trials done, 0 to resume, 1 to start" in second.stdout
    assert "tune: trial 2 started: lr/LinearSchedule.start=1e-9" in second.stdout
    assert "tune: trial 2 pruned" in second.stdout
    assert "2 complete, 1 pruned, 0 fail trials" in second.stdout
    lines = second.stdout.strip().splitlines()
    assert lines[-2].startswith("tune: best trial 1 (last evaluation return")
    assert lines[-1] == "lr/LinearSchedule.start = 3e-3"  # ready to paste into a .gin file


def test_an_interrupted_trial_resumes_from_its_checkpoint(tmp_path):
    root = tmp_path / "study"
    proc, out_path, _ = popen_cli(
        tune_cmd(root, LR_SPACE, "--trials=1", steps=2_000_000), tmp_path / "logs"
    )
    trial_dir = root / "trial-0000"
    try:
        wait_for(lambda: checkpoint_steps(trial_dir), timeout=240, proc=proc, what="a checkpoint")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        stop_process(proc)
    assert "trial 0 stopped" in out_path.read_text()
    stopped = checkpoint_steps(trial_dir)[-1]
    budget = (stopped + 4) * 256  # four more iterations of ppo_cart_pole.gin
    again = run_cli(tune_cmd(root, LR_SPACE, "--trials=1", steps=budget), timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "0 trials done, 1 to resume, 0 to start" in again.stdout
    assert "tune: trial 0 finished" in again.stdout
    assert "Resumed from" in (trial_dir / "train.log").read_text()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie left to a non-reaping init is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _trial_command(trial_dir: Path, budget: int) -> list[str]:
    """The ``alf.bin.train`` command tune ran for a trial (its log's ``$`` line), with
    ``budget`` env steps."""
    line = next(x for x in (trial_dir / "train.log").read_text().splitlines() if x[:2] == "$ ")
    words = line[2:].split(" ")
    budget_flag = "--conf_param=TrainerConfig.num_env_steps="
    return [f"{budget_flag}{budget}" if w.startswith(budget_flag) else w for w in words]


def test_kill_9_of_tune_leaves_no_orphan_and_the_study_agrees_with_the_runs(tmp_path):
    root = tmp_path / "study"
    trial_dir = root / "trial-0000"
    proc, _, _ = popen_cli(
        tune_cmd(root, LR_SPACE, "--trials=1", steps=2_000_000), tmp_path / "logs"
    )
    try:
        wait_for(lambda: checkpoint_steps(trial_dir), timeout=240, proc=proc, what="a checkpoint")
        child = json.loads((trial_dir / "status.json").read_text())["pid"]
        proc.kill()  # kill -9 of the tuner alone
        proc.wait(timeout=30)
    finally:
        stop_process(proc)
    # No orphan: the trial gets SIGTERM from the kernel, checkpoints and exits.
    wait_for(lambda: not _running(child), timeout=120, what="the orphaned trial to exit")
    stopped = json.loads((trial_dir / "status.json").read_text())
    assert stopped["state"] == "stopped"
    # The trial then finishes with no tuner watching (as an orphan of an older ALF did).
    budget = stopped["env_steps"] + 4 * 256
    cmd = _trial_command(trial_dir, budget)
    assert run_cli(cmd, timeout=240).returncode == 0
    runs_before = snapshot(trial_dir)

    again = run_cli(tune_cmd(root, LR_SPACE, "--trials=1", steps=budget), timeout=240)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "tune: trial 0 had finished while no tuner watched it: last eval" in again.stdout
    assert "1 trials done, 0 to resume, 0 to start" in again.stdout
    assert "1 complete, 0 pruned, 0 fail trials" in again.stdout
    assert "FAIL" not in again.stdout.replace("0 fail", "")
    assert "started" not in again.stdout  # not launched again
    assert sorted(p.name for p in root.glob("trial-*")) == ["trial-0000"]
    assert snapshot(trial_dir) == runs_before
