"""Tests of ``alf.bin.sweep``: grid parsing, launching grid points x seeds as real
``alf.bin.train`` runs (CartPole, a few thousand steps), skipping finished runs,
resuming interrupted ones after Ctrl-C, a failing run among good ones, and bad input;
no orphans: kill -9 of a sweep (its run checkpoints and exits, a rerun resumes it), a run
still training in a run directory adopted by the sweep, and a second Ctrl-C (nothing left
in /dev/shm, status.json repaired, no unrelated log line quoted)."""

from __future__ import annotations

import glob
import json
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers_cli import (
    CONF,
    REPO,
    checkpoint_steps,
    error_lines,
    popen_cli,
    read_progress,
    run_cli,
    stop_process,
    train_cmd,
    wait_for,
)

from alf.experiments.grid import GridError, expand_grid, parse_grid_flag, split_top_level
from alf.experiments.sweep import Sweep, parse_seeds

SMALL = (
    "TrainerConfig.num_env_steps=1024",
    "TrainerConfig.eval_interval=4",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
    "TrainerConfig.checkpoint_interval=2",
)


def sweep_cmd(root: Path, *flags: str, params: tuple[str, ...] = SMALL) -> list[str]:
    cmd = [sys.executable, "-m", "alf.bin.sweep", f"--conf={CONF}", f"--root_dir={root}"]
    return cmd + [f"--conf_param={p}" for p in params] + list(flags)


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


# ------------------------------------------------------------------ parsing
def test_grid_flags_parse_into_named_points_with_bindings():
    assert parse_grid_flag("PPOAlgorithm.num_epochs=[4, 10]") == (
        "PPOAlgorithm.num_epochs",
        ["4", "10"],
    )
    name, values = parse_grid_flag("lr/LinearSchedule.start=[1e-3,3e-4]")
    assert name == "lr/LinearSchedule.start" and values == ["1e-3", "3e-4"]
    assert split_top_level("(64, 64), (32,), 'a,b'") == ["(64, 64)", "(32,)", "'a,b'"]
    points = expand_grid(
        [
            "PPOAlgorithm.num_epochs=[4, 10]",
            "ActorDistributionNetwork.fc_layer_params=[(64,), (32, 32)]",
        ],
        "unused",
    )
    assert [p.name for p in points] == [
        "num_epochs=4,fc_layer_params=(64,)",
        "num_epochs=4,fc_layer_params=(32,32)",
        "num_epochs=10,fc_layer_params=(64,)",
        "num_epochs=10,fc_layer_params=(32,32)",
    ]
    assert points[1].bindings == (
        "PPOAlgorithm.num_epochs=4",
        "ActorDistributionNetwork.fc_layer_params=(32, 32)",
    )
    # The same parameter name on two classes keeps the class in the directory name.
    twins = expand_grid(["A.lr=[1]", "B.lr=[2]"], "unused")
    assert twins[0].name == "A.lr=1,B.lr=2"
    assert expand_grid([], "ppo_cart_pole")[0].name == "ppo_cart_pole"


@pytest.mark.parametrize(
    "flag, message",
    [
        ("PPOAlgorithm.num_epochs", "expected 'Name.param="),
        ("num_epochs=[1]", "not a 'Name.param'"),
        ("PPOAlgorithm.num_epochs=4", "list in brackets"),
        ("PPOAlgorithm.num_epochs=[4,]", "empty value"),
        ("PPOAlgorithm.num_epochs=[(4,]", "unbalanced"),
    ],
)
def test_bad_grid_flags_are_named(flag, message):
    with pytest.raises(GridError, match=message) as info:
        parse_grid_flag(flag)
    assert flag in str(info.value)


def test_seeds_parse_lists_and_ranges():
    assert parse_seeds("0,1,2") == [0, 1, 2]
    assert parse_seeds("3-5") == [3, 4, 5]
    assert parse_seeds("7") == [7]
    for bad in ("a", "", "1,1"):
        with pytest.raises(ValueError, match="--seeds"):
            parse_seeds(bad)


def test_sweep_lays_out_grid_point_and_seed_dirs(tmp_path):
    sweep = Sweep(
        conf=str(CONF),
        root_dir=str(tmp_path),
        seeds=[0, 1],
        grid=["PPOAlgorithm.num_epochs=[2, 4]"],
        conf_params=["TrainerConfig.num_env_steps=512"],
        jobs=2,
    )
    dirs = [Path(run.spec.run_dir).relative_to(tmp_path).as_posix() for run in sweep.runs]
    assert dirs == [
        "num_epochs=2/seed-0",
        "num_epochs=2/seed-1",
        "num_epochs=4/seed-0",
        "num_epochs=4/seed-1",
    ]
    params = sweep.runs[3].spec.conf_params
    # The sweep's own bindings come after the user's, so they win.
    assert params == (
        "TrainerConfig.num_env_steps=512",
        "PPOAlgorithm.num_epochs=4",
        "TrainerConfig.random_seed=1",
    )


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "flags, culprit",
    [
        (["--grid=PPOAlgorithm.num_epochz=[1,2]"], "num_epochz"),
        (["--grid=NoSuchThing.num_epochs=[1,2]"], "NoSuchThing"),
        (["--grid=PPOAlgorithm.num_epochs=(1,2)"], "list in brackets"),
        (["--jobs=0"], "--jobs must be >= 1"),
        (["--seeds=a,b"], "--seeds"),
    ],
)
def test_bad_sweep_input_gets_one_line_and_status_2(tmp_path, flags, culprit):
    proc = run_cli(sweep_cmd(tmp_path / "sweep", *flags), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = error_lines(proc.stderr, "alf.bin.sweep")
    assert len(errors) == 1 and culprit in errors[0], proc.stderr[-2000:]
    assert not (tmp_path / "sweep").exists()


def test_missing_config_file_is_named(tmp_path):
    cmd = [sys.executable, "-m", "alf.bin.sweep", "--conf=/no/such.gin", f"--root_dir={tmp_path}"]
    proc = run_cli(cmd, timeout=60)
    assert proc.returncode == 2
    assert "/no/such.gin" in error_lines(proc.stderr, "alf.bin.sweep")[0]


# ------------------------------------------------------------------ real runs
def test_sweep_runs_every_point_and_seed_then_skips_them(tmp_path):
    root = tmp_path / "sweep"
    proc = run_cli(
        sweep_cmd(root, "--seeds=0,1", "--grid=PPOAlgorithm.num_epochs=[2, 4]", "--jobs=2"),
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = sorted(p.parent.relative_to(root).as_posix() for p in root.rglob("status.json"))
    assert runs == [
        "num_epochs=2/seed-0",
        "num_epochs=2/seed-1",
        "num_epochs=4/seed-0",
        "num_epochs=4/seed-1",
    ]
    for run in runs:
        run_dir = root / run
        assert status(run_dir)["state"] == "finished"
        config = (run_dir / "config.gin").read_text()
        assert f"TrainerConfig.random_seed = {run[-1]}" in config
        assert f"PPOAlgorithm.num_epochs = {run.split('/')[0][-1]}" in config
        assert any("eval/average_return" in r for r in read_progress(run_dir))
    # A line per run with its state, env steps and last evaluation.
    assert "num_epochs=4/seed-1  done" in proc.stdout
    assert "1,024 env steps (100%), last eval" in proc.stdout

    again = run_cli(
        sweep_cmd(root, "--seeds=0,1", "--grid=PPOAlgorithm.num_epochs=[2, 4]"), timeout=120
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "4 already finished" in again.stdout
    assert "started" not in again.stdout
    assert again.stdout.count("done (skipped)") == 4

    # A larger budget extends the finished runs from their checkpoints.
    grown = (*SMALL[1:], "TrainerConfig.num_env_steps=1536")
    more = run_cli(
        sweep_cmd(root, "--seeds=0", "--grid=PPOAlgorithm.num_epochs=[2]", params=grown),
        timeout=300,
    )
    assert more.returncode == 0, more.stdout[-3000:] + more.stderr[-3000:]
    assert "0 already finished" in more.stdout and "done (skipped)" not in more.stdout
    extended = status(root / "num_epochs=2" / "seed-0")
    assert extended["state"] == "finished" and extended["env_steps"] == 1536
    resumed = json.loads((root / "num_epochs=2" / "seed-0" / "run_info.json").read_text())
    assert resumed["resumes"], resumed


def test_a_failing_run_is_reported_and_the_others_finish(tmp_path):
    root = tmp_path / "sweep"
    proc = run_cli(
        sweep_cmd(
            root,
            "--grid=create_environment.env_name=['CartPole-v1', 'NoSuchEnv-v0']",
            "--jobs=2",
        ),
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    good, bad = root / "env_name=CartPole-v1" / "seed-0", root / "env_name=NoSuchEnv-v0" / "seed-0"
    assert status(good)["state"] == "finished"
    failed = [line for line in proc.stdout.splitlines() if line.startswith("sweep: FAILED")]
    assert len(failed) == 1, proc.stdout
    assert "NoSuchEnv-v0" in failed[0] and str(bad / "train.log") in failed[0]
    assert "NoSuchEnv-v0" in (bad / "train.log").read_text()


def test_ctrl_c_stops_every_run_with_a_checkpoint_and_a_rerun_resumes_them(tmp_path):
    root = tmp_path / "sweep"
    long_budget = (*SMALL[1:], "TrainerConfig.num_env_steps=2000000")
    cmd = sweep_cmd(root, "--seeds=0,1", "--jobs=2", params=long_budget)
    proc, out_path, _ = popen_cli(cmd, tmp_path / "logs")
    runs = [root / "ppo_cart_pole" / f"seed-{k}" for k in (0, 1)]
    try:
        wait_for(
            lambda: all(checkpoint_steps(run) for run in runs),
            timeout=240,
            proc=proc,
            what="a checkpoint in both runs",
        )
        proc.send_signal(signal.SIGINT)  # as Ctrl-C in a terminal: the sweep alone
        assert proc.wait(timeout=120) == 130
    finally:
        stop_process(proc)
    out = out_path.read_text()
    assert out.count("sweep: stopped ppo_cart_pole/seed-") == 2, out
    stopped_at = {}
    for run in runs:
        assert status(run)["state"] == "stopped"
        stopped_at[run] = status(run)["env_steps"]
        # The checkpoint written on the signal is the run's last iteration.
        assert checkpoint_steps(run)[-1] == status(run)["iteration"]

    # Rerun with a budget just past where they stopped: both resume and finish.
    budget = max(stopped_at.values()) + 512
    resumed = run_cli(
        sweep_cmd(
            root,
            "--seeds=0,1",
            "--jobs=2",
            params=(*SMALL[1:], f"TrainerConfig.num_env_steps={budget}"),
        ),
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    for run in runs:
        assert status(run)["state"] == "finished"
        log = (run / "train.log").read_text()
        resumed_line = [line for line in log.splitlines() if "Resumed from" in line]
        assert len(resumed_line) == 1, log[-3000:]
        assert f"{stopped_at[run]} env steps" in resumed_line[0]
        assert status(run)["env_steps"] >= budget


# ------------------------------------------------------------------ kill -9, adoption
def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie left to a non-reaping init is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


LONG = (*SMALL[1:], "TrainerConfig.num_env_steps=2000000")


def test_kill_9_of_a_sweep_leaves_no_orphan_and_a_rerun_resumes(tmp_path):
    root = tmp_path / "sweep"
    run = root / "ppo_cart_pole" / "seed-0"
    proc, out_path, _ = popen_cli(sweep_cmd(root, "--jobs=1", params=LONG), tmp_path / "logs")
    try:
        wait_for(lambda: checkpoint_steps(run), timeout=240, proc=proc, what="a checkpoint")
        child = status(run)["pid"]
        proc.kill()  # kill -9 of the sweep alone: no chance to stop its run
        proc.wait(timeout=30)
    finally:
        stop_process(proc)
    # The kernel sends the run SIGTERM (its parent died): it checkpoints and exits.
    wait_for(lambda: not running(child), timeout=120, what="the orphaned run to exit")
    assert status(run)["state"] == "stopped"
    stopped_at = status(run)["env_steps"]

    again = run_cli(
        sweep_cmd(root, params=(*SMALL[1:], f"TrainerConfig.num_env_steps={stopped_at + 512}")),
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "FAILED" not in again.stdout and "in use" not in again.stdout
    assert status(run)["state"] == "finished"
    resumed = [line for line in (run / "train.log").read_text().splitlines() if "Resumed" in line]
    assert len(resumed) == 1 and f"{stopped_at} env steps" in resumed[0]


def test_a_sweep_adopts_a_run_still_training_in_its_directory(tmp_path):
    root = tmp_path / "sweep"
    run = root / "ppo_cart_pole" / "seed-0"
    # A run of the same point and seed started by hand (or left by an earlier sweep).
    params = (*LONG, "TrainerConfig.random_seed=0")
    by_hand, _, _ = popen_cli(train_cmd(run, *params), tmp_path / "hand")
    sweep = None
    try:
        wait_for(lambda: checkpoint_steps(run), timeout=240, proc=by_hand, what="a checkpoint")
        sweep, out_path, _ = popen_cli(sweep_cmd(root, params=LONG), tmp_path / "logs")
        wait_for(
            lambda: "sweep: adopted ppo_cart_pole/seed-0" in out_path.read_text(),
            timeout=120,
            proc=sweep,
            what="the sweep to adopt the run",
        )
        assert by_hand.poll() is None  # not a second trainer failing on the lock
        sweep.send_signal(signal.SIGINT)  # stopping the sweep stops the adopted run
        assert sweep.wait(timeout=120) == 130
        assert by_hand.wait(timeout=60) == 0
    finally:
        stop_process(by_hand)
        if sweep is not None:
            stop_process(sweep)
    out = out_path.read_text()
    assert f"pid {by_hand.pid}" in out and "FAILED" not in out and "in use" not in out, out
    assert "sweep: stopped ppo_cart_pole/seed-0" in out
    assert status(run)["state"] == "stopped"


def test_a_second_ctrl_c_kills_cleanly(tmp_path):
    """Second Ctrl-C: the runs' process groups are killed; nothing stays in /dev/shm,
    status.json says stopped (not running), and no unrelated log line is quoted."""
    root = tmp_path / "sweep"
    conf = REPO / "alf" / "examples" / "appo_cart_pole.gin"
    run = root / "appo_cart_pole" / "seed-0"
    cmd = [sys.executable, "-m", "alf.bin.sweep", f"--conf={conf}", f"--root_dir={root}"]
    cmd.append("--conf_param=TrainerConfig.num_env_steps=2000000")
    proc, out_path, _ = popen_cli(cmd, tmp_path / "logs")

    def semaphores() -> list[str]:
        return glob.glob(f"/dev/shm/sem.alf_{status(run)['pid']}-*")

    try:
        wait_for(lambda: (run / "status.json").is_file(), 240, proc, what="the run's start")
        wait_for(lambda: semaphores(), timeout=240, proc=proc, what="the actors' semaphores")
        learner = status(run)["pid"]
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        stop_process(proc)
    out = out_path.read_text()
    assert "sweep: killed appo_cart_pole/seed-0" in out and "FAILED" not in out, out
    assert not running(learner)
    assert not glob.glob(f"/dev/shm/sem.alf_{learner}-*")
    assert status(run)["state"] == "stopped" and "SIGKILL" in status(run)["killed"]
