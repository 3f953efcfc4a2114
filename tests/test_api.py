"""The Python API (``alf.train``, ``alf.load``, ``Run``): the run directory it writes is
the one the command-line tools write and read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers_cli import REPO, cli_env, run_cli

import alf
from alf.errors import UserError
from alf.run_dir.layout import RunDirError

CONF = str(REPO / "alf" / "examples" / "ppo_cart_pole.gin")
BINDINGS = {
    "TrainerConfig.num_env_steps": 4096,
    "TrainerConfig.eval_interval": 8,
    "TrainerConfig.progress_interval_s": 0,
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> alf.Run:
    return alf.train(CONF, root_dir=str(tmp_path_factory.mktemp("api") / "ppo"), bindings=BINDINGS)


def test_import_alf_is_light() -> None:
    code = "import sys, alf; print('torch' in sys.modules, 'alf.api' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=60
    )
    assert result.stdout.split() == ["False", "False"], result.stderr


def test_train_writes_a_finished_run_dir(run: alf.Run) -> None:
    root = Path(run.root_dir)
    status = run.status()
    assert status is not None and status["state"] == "finished" and status["env_steps"] == 4096
    assert (root / "checkpoints" / "ckpt-16.pt").is_file()
    assert "TrainerConfig.random_seed" in (root / "config.gin").read_text()
    evals = [r for r in run.progress() if "eval/average_return" in r]
    assert [r["iteration"] for r in evals] == [8, 16]
    info = json.loads((root / "run_info.json").read_text())
    assert info["algorithm"] == "PPOAlgorithm"


def test_evaluate_gives_each_episode(run: alf.Run) -> None:
    result = run.evaluate(num_episodes=3, seed=0)
    assert len(result.returns) == len(result.lengths) == 3
    assert result.returns == [float(n) for n in result.lengths]  # CartPole: 1 per step
    assert result.average_return > 30  # a random policy averages about 22


def test_exploring_evaluation_samples(run: alf.Run) -> None:
    greedy = [run.evaluate(num_episodes=2, seed=0).lengths for _ in range(2)]
    assert greedy[0] == greedy[1]  # the greedy policy from one seed: the same episodes
    exploring = [run.evaluate(num_episodes=2, seed=0, exploring=True) for _ in range(3)]
    assert len({tuple(r.lengths) for r in exploring}) > 1  # sampled actions
    assert all(r.returns == [float(n) for n in r.lengths] for r in exploring)


def test_training_can_evaluate_the_exploring_policy(tmp_path: Path) -> None:
    bindings = {
        **BINDINGS,
        "TrainerConfig.num_env_steps": 1024,
        "TrainerConfig.eval_exploring": True,
    }
    run = alf.train(CONF, root_dir=str(tmp_path / "ppo"), bindings=bindings)
    evals = [r for r in run.progress() if "eval/average_return" in r]
    assert evals and all(r["eval/average_return"] > 0 for r in evals)
    assert "TrainerConfig.eval_exploring = True" in (tmp_path / "ppo" / "config.gin").read_text()


def test_the_policy_acts_like_play(run: alf.Run) -> None:
    policy = alf.load(run.root_dir).policy
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    policy.reset()
    total = 0.0
    for _ in range(500):
        action = policy(obs)
        assert isinstance(action, np.ndarray) and action.shape == () and action in (0, 1)
        obs, reward, terminated, truncated, _ = env.step(int(action))
        total += reward
        if terminated or truncated:
            break
    assert total > 30
    batch = policy(np.zeros((5, 4), dtype=np.float32))
    assert batch.shape == (5,)
    with pytest.raises(ValueError, match="fits neither"):
        policy(np.zeros(3, dtype=np.float32))


def test_the_cli_reads_a_python_trained_run(run: alf.Run) -> None:
    play = [sys.executable, "-m", "alf.bin.play", f"--root_dir={run.root_dir}", "--num_episodes=2"]
    played = run_cli(play)
    assert played.returncode == 0, played.stderr[-2000:]
    exploring = run_cli([*play, "--exploring"])
    assert exploring.returncode == 0, exploring.stderr[-2000:]
    assert exploring.stdout.splitlines()[-1].startswith("average_return: ")
    wrong = run_cli([*play, "--exploring", "--opponent=random"])
    assert wrong.returncode == 2 and "--exploring" in wrong.stderr, wrong.stderr[-2000:]
    report = run_cli([sys.executable, "-m", "alf.bin.report", str(Path(run.root_dir).parent)])
    assert report.returncode == 0, report.stderr[-2000:]
    assert "4,096" in report.stdout and "PPOAlgorithm" in report.stdout, report.stdout


def test_training_a_finished_run_again_changes_nothing(run: alf.Run) -> None:
    before = {p: p.read_bytes() for p in Path(run.root_dir).rglob("*") if p.is_file()}
    again = alf.train(CONF, root_dir=run.root_dir, bindings=BINDINGS)
    assert again.status()["state"] == "finished"
    after = {p: p.read_bytes() for p in Path(run.root_dir).rglob("*") if p.is_file()}
    assert after == before


def test_errors_are_alf_errors(tmp_path: Path) -> None:
    with pytest.raises(RunDirError):
        alf.load(str(tmp_path))
    with pytest.raises(UserError, match="PPOAlgorithm.num_epochs"):
        alf.train(CONF, root_dir=str(tmp_path / "x"), bindings={"PPOAlgorithm.num_epochs": 0})
    assert not (tmp_path / "x").exists()


def test_videos_while_training_and_per_episode_evaluation_records(tmp_path: Path) -> None:
    import imageio.v3 as iio

    run = alf.train(
        CONF,
        root_dir=str(tmp_path / "video"),
        bindings={
            **BINDINGS,
            "TrainerConfig.num_env_steps": 2048,
            "TrainerConfig.video_interval": 4,
            "TrainerConfig.eval_interval": 4,
            "TrainerConfig.num_eval_episodes": 3,
        },
    )
    videos = sorted(p.name for p in (Path(run.root_dir) / "videos").iterdir())
    assert videos == ["iteration-4.mp4", "iteration-8.mp4"]
    frames = iio.imread(Path(run.root_dir) / "videos" / "iteration-8.mp4")
    assert frames.ndim == 4 and frames.shape[0] >= 9 and frames.shape[-1] == 3
    records = run.evaluations()
    assert [r["iteration"] for r in records] == [4, 8]
    assert all(len(r["returns"]) == len(r["lengths"]) == 3 for r in records)
    progress = [r for r in run.progress() if "eval/return_std" in r]
    assert progress[-1]["eval/return_std"] == pytest.approx(np.std(records[-1]["returns"]))


def test_a_video_that_cannot_be_made_is_a_warning(tmp_path: Path) -> None:
    # ALF's MaskedChoice environment does not render: the run trains on without videos.
    run = alf.train(
        str(REPO / "alf" / "examples" / "ppo_masked.gin"),
        root_dir=str(tmp_path / "novideo"),
        bindings={"TrainerConfig.num_env_steps": 512, "TrainerConfig.video_interval": 1},
    )
    assert run.status()["state"] == "finished"
    assert not (Path(run.root_dir) / "videos").exists() or not any(
        (Path(run.root_dir) / "videos").iterdir()
    )
