"""Goal environments: the bit-flipping task, their reward function for HER
(``goal_env_reward``), success rates (``info["is_success"]`` in training and evaluation),
Gymnasium-Robotics' Fetch ids with a headless video, and the one-line refusals of HER on
environments that are not goal-conditioned (exit status 2)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_cli import assert_clean_user_error, play_cmd, run_cli, train_cmd

from alf.data_structures import StepType, TimeStep
from alf.environments import GoalEnvironmentError, create_environment, goal_env_reward, suite_gym
from alf.environments.bit_flipping import BitFlippingEnv
from alf.unrollers import EpisodeTracker

TESTS = Path(__file__).resolve().parent
BITS_CONF = TESTS.parent / "alf" / "examples" / "dqn_her_bit_flipping.gin"
FETCH_CONF = TESTS.parent / "alf" / "examples" / "sac_her_fetch_reach.gin"
HAS_ROBOTICS = importlib.util.find_spec("gymnasium_robotics") is not None
TINY = (
    "TrainerConfig.num_env_steps=300",
    "TrainerConfig.initial_collect_steps=100",
    "TrainerConfig.eval_interval=150",
    "TrainerConfig.num_eval_episodes=4",
    "TrainerConfig.summary_interval=50",
    'create_environment.env_kwargs={"n_bits": 4}',
)


def test_bit_flipping_rewards_successes_and_episode_ends() -> None:
    env = BitFlippingEnv(n_bits=4)
    obs, info = env.reset(seed=0)
    assert set(obs) == {"observation", "achieved_goal", "desired_goal"}
    assert info["is_success"] == 0.0 and not np.array_equal(obs["observation"], obs["desired_goal"])
    achieved = np.array([[0, 1, 1, 0], [1, 1, 1, 1]], dtype=np.float32)
    desired = np.array([[0, 1, 1, 0], [1, 1, 1, 0]], dtype=np.float32)
    assert env.compute_reward(achieved, desired, None).tolist() == [0.0, -1.0]
    # Flip exactly the differing bits: success ends the episode (terminated).
    differing = np.flatnonzero(obs["observation"] != obs["desired_goal"])
    for bit in differing:
        obs, reward, terminated, truncated, info = env.step(bit)
    expected = (0.0, True, len(differing) == 4, 1.0)
    assert (reward, terminated, truncated, info["is_success"]) == expected
    # Without a success the episode is truncated after n_bits steps.
    env = BitFlippingEnv(n_bits=3, end_on_success=False)
    env.reset(seed=1)
    ends = [env.step(0)[2:4] for _ in range(3)]
    assert ends == [(False, False), (False, False), (False, True)]


def test_goal_env_reward_wraps_compute_reward_batched() -> None:
    reward_fn = goal_env_reward(env_name="alf/BitFlipping-v0", env_kwargs={"n_bits": 3})
    achieved = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    desired = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    reward = reward_fn(achieved, desired)
    assert reward.dtype == torch.float32 and reward.tolist() == [0.0, -1.0, 0.0]


@pytest.mark.parametrize(
    ("env_name", "match"),
    [
        ("CartPole-v1", "without 'achieved_goal'"),
        ("alf_test_goal_envs:GoalWithoutReward-v0", "has none"),
    ],
)
def test_goal_env_reward_refuses_other_environments(env_name: str, match: str) -> None:
    with pytest.raises(GoalEnvironmentError, match=match) as err:
        goal_env_reward(env_name=env_name)
    assert match in str(err.value).splitlines()[0]  # (gin appends where, on a line of its own)


def test_the_sync_backend_passes_successes_on() -> None:
    env = create_environment("alf/BitFlipping-v0", 2, seed=0, env_kwargs={"n_bits": 2})
    env.reset()
    step = env.step(torch.zeros(2, dtype=torch.int64))
    success = step.env_info["is_success"]
    assert success.dtype == torch.float32 and success.shape == (2,)
    goal_reached = (step.observation["achieved_goal"] == step.observation["desired_goal"]).all(1)
    assert torch.equal(success, goal_reached.float())
    env.close()


def _ts(step_types: list[int], success: list[float] | None) -> TimeStep:
    n = len(step_types)
    return TimeStep(
        step_type=torch.tensor(step_types, dtype=torch.int32),
        reward=torch.zeros(n),
        discount=torch.ones(n),
        observation=torch.zeros(n, 1),
        prev_action=torch.zeros(n),
        env_id=torch.arange(n),
        env_info=() if success is None else {"is_success": torch.tensor(success)},
    )


def test_episode_tracker_records_the_success_of_each_episodes_last_step() -> None:
    f, m, last = StepType.FIRST, StepType.MID, StepType.LAST
    tracker = EpisodeTracker(batch_size=2)
    tracker.update(_ts([f, f], [0.0, 0.0]))
    tracker.update(_ts([m, last], [1.0, 1.0]))  # env 1 succeeds
    tracker.update(_ts([last, f], [0.0, 0.0]))  # env 0 fails
    tracker.update(_ts([f, last], [float("nan"), float("nan")]))  # env 1: unknown
    assert tracker.completed_env_ids == [1, 0, 1]
    assert tracker.completed_successes[:2] == [1.0, 0.0]
    assert np.isnan(tracker.completed_successes[2])
    popped = tracker.pop_completed()
    assert popped.successes[:2] == [1.0, 0.0] and np.isnan(popped.successes[2])
    assert tracker.completed_successes == []
    tracker.update(_ts([m, f], None))  # an environment without successes
    tracker.update(_ts([last, m], None))
    assert np.isnan(tracker.completed_successes[0])


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_success_rates_in_training_and_evaluation(tmp_path: Path) -> None:
    root = tmp_path / "bits"
    result = run_cli(train_cmd(root, *TINY, conf=BITS_CONF))
    assert result.returncode == 0, result.stderr[-3000:]
    progress = _jsonl(root / "progress.jsonl")
    train = [p["train/success_rate"] for p in progress if "train/success_rate" in p]
    evals = [p["eval/success_rate"] for p in progress if "eval/success_rate" in p]
    assert train and all(0.0 <= r <= 1.0 for r in train)
    assert len(evals) == 2 and all(0.0 <= r <= 1.0 for r in evals)
    evaluations = _jsonl(root / "evaluations.jsonl")
    assert [len(e["successes"]) for e in evaluations] == [4, 4]
    assert np.mean(evaluations[-1]["successes"]) == pytest.approx(evals[-1])
    assert "success rate" in result.stderr  # the evaluation's log line


@pytest.mark.parametrize(
    "backend",
    [
        ('create_environment.vectorization_mode="subprocess"',),
        ("TrainerConfig.async_unroll=True", "AsyncUnroller.num_actors=1"),
    ],
    ids=["subprocess_envs", "async_actors"],
)
def test_training_success_rates_from_other_backends(
    tmp_path: Path, backend: tuple[str, ...]
) -> None:
    # The successes travel from worker processes (subprocess) or actors (async).
    root = tmp_path / "bits"
    result = run_cli(train_cmd(root, *TINY, *backend, conf=BITS_CONF))
    assert result.returncode == 0, result.stderr[-3000:]
    progress = _jsonl(root / "progress.jsonl")
    train = [p["train/success_rate"] for p in progress if "train/success_rate" in p]
    assert train and all(0.0 <= r <= 1.0 for r in train)


@pytest.mark.parametrize(
    ("env_name", "words"),
    [
        ("CartPole-v1", ("goal environment", "CartPole-v1", "achieved_goal")),
        ("alf_test_goal_envs:GoalWithoutReward-v0", ("compute_reward", "GoalWithoutReward")),
    ],
)
def test_her_on_a_non_goal_environment_is_one_line_exit_2(
    tmp_path: Path, env_name: str, words: tuple[str, ...]
) -> None:
    root = tmp_path / "run"
    cmd = train_cmd(
        root,
        *TINY,
        f'create_environment.env_name="{env_name}"',
        "create_environment.env_kwargs=None",
        conf=BITS_CONF,
    )
    result = run_cli(cmd, pythonpath=TESTS)
    assert result.returncode == 2, result.stderr[-3000:]
    assert_clean_user_error(result, "alf.bin.train", *words)
    assert not (root / "checkpoints").exists()


@pytest.mark.skipif(not HAS_ROBOTICS, reason="needs the [robotics] extra (gymnasium-robotics)")
def test_fetch_ids_load_and_their_reward_recomputes() -> None:
    env = suite_gym.load("FetchPush-v4")
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"observation", "achieved_goal", "desired_goal"}
    obs, reward, _, _, info = env.step(env.action_space.sample())
    assert "is_success" in info
    reward_fn = goal_env_reward(env_name="FetchReach-v4")
    achieved = torch.zeros(3, 3)
    desired = torch.tensor([[0.0, 0.0, 0.01], [0.0, 0.0, 0.2], [0.3, 0.0, 0.0]])
    assert reward_fn(achieved, desired).tolist() == [0.0, -1.0, -1.0]  # within 5 cm
    env.close()


@pytest.mark.skipif(not HAS_ROBOTICS, reason="needs the [robotics] extra (gymnasium-robotics)")
def test_fetch_reach_trains_and_plays_a_headless_video(tmp_path: Path) -> None:
    root, video = tmp_path / "fetch", tmp_path / "fetch.mp4"
    tiny = (
        "TrainerConfig.num_env_steps=60",
        "TrainerConfig.initial_collect_steps=50",
        "TrainerConfig.eval_interval=0",
        "TrainerConfig.num_eval_episodes=1",
        "TrainerConfig.summary_interval=10",
        "SacAlgorithm.mini_batch_size=16",
    )
    result = run_cli(train_cmd(root, *tiny, conf=FETCH_CONF))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "success rate" in result.stderr  # the final evaluation
    played = run_cli(play_cmd(root, "--num_episodes=1", f"--record_file={video}"))
    if played.returncode == 2 and "no working MuJoCo OpenGL backend" in played.stderr:
        pytest.skip("no headless OpenGL backend here (egl, osmesa)")
    assert played.returncode == 0, played.stderr[-3000:]
    assert video.read_bytes()[4:8] == b"ftyp"  # an mp4 container
