"""Tests of the Atari preset through Gymnasium (ale_py) and EnvPool."""

import gin
import numpy as np
import pytest
import torch

from alf.data_structures import StepType
from alf.environments import create_environment, suite_gym
from alf.environments.atari import AtariPreset, envpool_atari_id

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST


def _random_until_done(env, rng, max_steps=1000):
    """Steps ``env`` with random actions until an episode ends; returns the rewards and
    the info of the last step."""
    rewards = []
    for _ in range(max_steps):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        rewards.append(reward)
        if terminated or truncated:
            assert terminated and not truncated
            return rewards, info
    pytest.fail(f"no episode ended within {max_steps} steps")


@pytest.mark.parametrize("env_name", ["ALE/Pong-v5", "PongNoFrameskip-v4"])
def test_preset_observations(env_name):
    env = suite_gym.load(env_name, preset="atari")
    try:
        assert env.observation_space.shape == (1, 84, 84)
        assert env.observation_space.dtype == np.uint8
        assert env.action_space.n == 6
        assert env.unwrapped._frameskip == 1
        obs, _ = env.reset(seed=0)
        assert obs.shape == (1, 84, 84) and obs.dtype == np.uint8 and obs.max() > obs.min()
    finally:
        env.close()


def test_episodic_life_when_training_continues_the_game():
    env = suite_gym.load("ALE/Breakout-v5", preset="atari")
    ale = env.unwrapped.ale
    rng = np.random.default_rng(0)
    try:
        env.reset(seed=0)
        _, info = _random_until_done(env, rng)
        assert info["lives"] == 4 and not ale.game_over()  # a lost life ends the episode
        frame = ale.getEpisodeFrameNumber()
        env.reset()  # ... but does not restart the game: one no-op step
        assert ale.lives() == 4 and ale.getEpisodeFrameNumber() == frame + 4
        for lives in (3, 2, 1):
            _, info = _random_until_done(env, rng)
            assert info["lives"] == lives
            env.reset()
        _, info = _random_until_done(env, rng)
        assert info["lives"] == 0 and ale.game_over()
        env.reset()  # the game is over: a new game
        assert ale.lives() == 5 and ale.getEpisodeFrameNumber() <= 30 * 4
    finally:
        env.close()


def test_evaluation_env_plays_whole_games_unclipped():
    rng = np.random.default_rng(0)
    train_env = suite_gym.load("ALE/SpaceInvaders-v5", preset="atari", training=True)
    eval_env = suite_gym.load("ALE/SpaceInvaders-v5", preset="atari", training=False)
    try:
        train_env.reset(seed=0)
        rewards, info = _random_until_done(train_env, rng)
        assert info["lives"] > 0
        assert set(rewards) <= {0.0, 1.0} and 1.0 in rewards  # kills score 5-30, clipped

        eval_env.reset(seed=0)
        rewards, info = _random_until_done(eval_env, rng)
        assert info["lives"] == 0 and eval_env.unwrapped.ale.game_over()
        assert max(rewards) >= 5.0
    finally:
        train_env.close()
        eval_env.close()


def test_preset_options_are_configurable():
    gin.parse_config(
        """
        suite_gym.load.preset = "atari"
        AtariPreset.screen_size = 42
        AtariPreset.clip_rewards = False
        """
    )
    env = create_environment("ALE/Breakout-v5", 2, seed=0)
    try:
        assert env.observation_spec().shape == (1, 42, 42)
        assert env.observation_spec().dtype == torch.uint8
        assert env.reset().observation.shape == (2, 1, 42, 42)
    finally:
        env.close()
    kwargs = AtariPreset(clip_rewards=False).envpool_kwargs(training=True)
    assert kwargs["episodic_life"] and not kwargs["reward_clip"]


def test_life_loss_is_a_terminated_time_step():
    gin.parse_config('suite_gym.load.preset = "atari"')
    env = create_environment("ALE/Breakout-v5", 2, seed=0)
    try:
        env.reset()
        for _ in range(200):
            ts = env.step(torch.randint(0, 4, (2,)))
            if ts.is_last().any():
                break
        last = ts.is_last()
        assert last.any() and (ts.discount[last] == 0).all()
        assert (env.step(torch.zeros(2, dtype=torch.int64)).step_type[last] == FIRST).all()
    finally:
        env.close()


def test_envpool_ids():
    assert envpool_atari_id("ALE/Pong-v5") == "Pong-v5"
    assert envpool_atari_id("PongNoFrameskip-v4") == "Pong-v5"
    assert envpool_atari_id("BreakoutDeterministic-v4") == "Breakout-v5"
    assert envpool_atari_id("Pong-v5") == "Pong-v5"
    assert envpool_atari_id("dm_control/cheetah-run-v0") is None


def test_vector_entry_point_refuses_the_preset():
    gin.parse_config('suite_gym.load.preset = "atari"')
    with pytest.raises(ValueError, match="vector_entry_point"):
        create_environment("ALE/Pong-v5", 2, vectorization_mode="vector_entry_point")


def _first_end_lives(pool, steps=1000):
    """Steps an EnvPool pool of one env randomly until its first episode end; the lives
    left then."""
    rng = np.random.default_rng(1)
    pool.reset()
    for _ in range(steps):
        _, _, terminated, truncated, info = pool.step(rng.integers(0, 4, size=1))
        if terminated[0] or truncated[0]:
            return int(info["lives"][0])
    pytest.fail(f"no episode ended within {steps} steps")


@pytest.mark.parametrize("env_name", ["ALE/Breakout-v5", "BreakoutNoFrameskip-v4"])
def test_envpool_backend_matches_the_gymnasium_one(env_name):
    pytest.importorskip("envpool")
    gin.parse_config('suite_gym.load.preset = "atari"')
    sync = create_environment(env_name, 1, seed=0)
    train = create_environment(env_name, 1, seed=0, vectorization_mode="envpool")
    evaluation = create_environment(
        env_name, 1, seed=0, vectorization_mode="envpool", for_evaluation=True
    )
    try:
        assert train.observation_spec() == sync.observation_spec()
        assert train.action_spec() == sync.action_spec()
        assert train.reset().observation.shape == sync.reset().observation.shape == (1, 1, 84, 84)
        config = train.envpool_env.config
        assert config["episodic_life"] and config["reward_clip"]
        assert config["stack_num"] == 1 and config["max_episode_steps"] == 27_000
        assert config["repeat_action_probability"] == 0.0 and config["noop_max"] == 30
        config = evaluation.envpool_env.config
        assert not config["episodic_life"] and not config["reward_clip"]
        # Episodic life: the first episode of training ends at a lost life, with the
        # game going on; the evaluation one only when the game is over.
        assert _first_end_lives(train.envpool_env) == 4
        assert _first_end_lives(evaluation.envpool_env) == 0
    finally:
        for env in (sync, train, evaluation):
            env.close()


def test_envpool_without_the_preset_hints_at_it():
    pytest.importorskip("envpool")
    with pytest.raises(ValueError, match="preset"):
        create_environment("ALE/Pong-v5", 1, vectorization_mode="envpool")


def test_for_evaluation_reaches_the_subprocess_workers():
    gin.parse_config('suite_gym.load.preset = "atari"')
    actions = torch.randint(0, 4, (150, 1), generator=torch.Generator().manual_seed(0))

    def step_types(**kwargs):
        env = create_environment("ALE/Breakout-v5", 1, seed=0, **kwargs)
        try:
            env.reset()
            return [int(env.step(a).step_type) for a in actions]
        finally:
            env.close()

    train = step_types()
    evaluation = step_types(for_evaluation=True)
    first_life_lost = train.index(LAST)  # life losses end training episodes only
    assert LAST not in evaluation[: first_life_lost + 1]
    assert step_types(for_evaluation=True, vectorization_mode="subprocess") == evaluation
