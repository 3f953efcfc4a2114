"""Tests of suite_gym.load, its gin configuration through create_environment, and the
small wrappers of alf.environments.wrappers."""

import sys

import gin
import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.environments import (
    MissingExtraError,
    UnknownEnvironmentError,
    create_environment,
    suite_gym,
)
from alf.environments.wrappers import ChannelFirst, ObservationSubset, RewardSign


def test_load_makes_one_registered_env():
    env = suite_gym.load("CartPole-v1")
    try:
        assert isinstance(env, gym.Env)
        assert env.spec.id == "CartPole-v1" and env.spec.max_episode_steps == 500
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4,)
    finally:
        env.close()


def test_load_passes_time_limit_render_mode_and_kwargs():
    env = suite_gym.load(
        "Pendulum-v1", max_episode_steps=3, render_mode="rgb_array", env_kwargs={"g": 0.0}
    )
    try:
        env.reset(seed=0)
        assert env.unwrapped.g == 0.0
        assert env.render().ndim == 3
        results = [env.step(np.zeros(1, dtype=np.float32)) for _ in range(3)]
        assert [r[3] for r in results] == [False, False, True]
    finally:
        env.close()


def test_wrappers_are_applied_in_order():
    order = []

    def tag(name):
        def wrap(env):
            order.append(name)
            return gym.wrappers.TransformReward(env, lambda r: r * 10 if name == "x10" else r + 1)

        return wrap

    env = suite_gym.load("CartPole-v1", wrappers=[tag("x10"), tag("+1")])
    try:
        env.reset(seed=0)
        assert order == ["x10", "+1"]
        assert env.step(0)[1] == 11.0  # (1 * 10) + 1
    finally:
        env.close()


def _masked_cart_pole_config():
    gin.parse_config(
        """
        suite_gym.load.wrappers = [@ObservationSubset]
        ObservationSubset.indices = (0, 2)
        """
    )


def test_gin_configured_wrapper_through_create_environment():
    _masked_cart_pole_config()
    env = create_environment("CartPole-v1", 2, seed=3)
    full = gym.make("CartPole-v1")
    try:
        assert env.observation_spec().shape == (2,)
        ts = env.reset()
        expected, _ = full.reset(seed=4)  # environment 1 gets seed + 1
        assert np.allclose(ts.observation[1].numpy(), expected[[0, 2]])
        for _ in range(3):
            ts = env.step(torch.tensor([0, 1]))
            expected = full.step(1)[0]
        assert np.allclose(ts.observation[1].numpy(), expected[[0, 2]])
    finally:
        env.close()
        full.close()
    assert "ObservationSubset.indices = (0, 2)" in gin.operative_config_str()


def test_gin_configured_wrapper_reaches_subprocess_workers():
    _masked_cart_pole_config()
    env = create_environment(
        "CartPole-v1", 2, seed=3, vectorization_mode="subprocess", num_workers=1
    )
    sync_env = create_environment("CartPole-v1", 2, seed=3)
    try:
        assert env.observation_spec().shape == (2,)
        assert torch.equal(env.reset().observation, sync_env.reset().observation)
        action = torch.tensor([1, 0])
        assert torch.equal(env.step(action).observation, sync_env.step(action).observation)
    finally:
        env.close()
        sync_env.close()


def test_operative_config_keeps_load_bindings_without_a_local_env():
    gin.parse_config("suite_gym.load.wrappers = [@ObservationSubset]")
    options = suite_gym.configured_options("CartPole-v1")
    assert options.wrappers == (ObservationSubset,) and options.customized
    assert "load.wrappers = [@ObservationSubset]" in gin.operative_config_str()


def test_backends_that_cannot_apply_wrappers_refuse():
    _masked_cart_pole_config()
    with pytest.raises(ValueError, match="vector_entry_point"):
        create_environment("CartPole-v1", 2, vectorization_mode="vector_entry_point")
    pytest.importorskip("envpool")
    with pytest.raises(ValueError, match="envpool"):
        create_environment("CartPole-v1", 2, vectorization_mode="envpool")


def test_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="preset"):
        suite_gym.load("CartPole-v1", preset="mario")


def test_unknown_ids_list_close_matches():
    with pytest.raises(UnknownEnvironmentError, match="CartPole-v1"):
        suite_gym.load("CartPole-v7")
    with pytest.raises(UnknownEnvironmentError, match="not registered"):
        create_environment("NoSuchEnvAtAll-v0", 1)


def test_missing_atari_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # `import ale_py` raises ImportError
    monkeypatch.delitem(gym.registry, "ALE/Pong-v5", raising=False)
    with pytest.raises(MissingExtraError, match=r"pip install 'alf-rl\[atari\]'"):
        suite_gym.load("ALE/Pong-v5")
    with pytest.raises(UnknownEnvironmentError):  # a MissingExtraError is one
        create_environment("ALE/Pong-v5", 1)


def test_missing_dmc_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "shimmy", None)
    monkeypatch.delitem(gym.registry, "dm_control/cheetah-run-v0", raising=False)
    with pytest.raises(MissingExtraError, match=r"pip install 'alf-rl\[dmc\]'"):
        suite_gym.resolve_env_id("dm_control/cheetah-run-v0")


def test_observation_subset():
    env = ObservationSubset(gym.make("CartPole-v1"), indices=(2, 0))
    assert env.observation_space.shape == (2,)
    assert env.observation_space.high[0] == gym.make("CartPole-v1").observation_space.high[2]
    obs, _ = env.reset(seed=0)
    full, _ = gym.make("CartPole-v1").reset(seed=0)
    assert np.array_equal(obs, full[[2, 0]]) and obs.dtype == np.float32
    with pytest.raises(ValueError):
        ObservationSubset(gym.make("CartPole-v1"), indices=(0, 4))
    with pytest.raises(ValueError):
        ObservationSubset(gym.make("CartPole-v1"), indices=(1, 1))
    with pytest.raises(TypeError):
        ObservationSubset(gym.make("FrozenLake-v1"), indices=(0,))


def test_reward_sign_and_channel_first():
    env = RewardSign(gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: -5 * r))
    env.reset(seed=0)
    assert env.step(0)[1] == -1.0

    class Image(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (5, 4, 3), dtype=np.uint8)
        action_space = gym.spaces.Discrete(1)

        def reset(self, *, seed=None, options=None):
            return np.arange(60, dtype=np.uint8).reshape(5, 4, 3), {}

    env = ChannelFirst(Image())
    assert env.observation_space.shape == (3, 5, 4)
    obs, _ = env.reset()
    assert obs[1, 2, 3] == np.arange(60).reshape(5, 4, 3)[2, 3, 1]
    gray = ChannelFirst(
        gym.wrappers.TransformObservation(
            Image(), lambda o: o[..., 0], gym.spaces.Box(0, 255, (5, 4), dtype=np.uint8)
        )
    )
    assert gray.observation_space.shape == (1, 5, 4) and gray.reset()[0].shape == (1, 5, 4)


def test_classic_atari_id_without_the_extra_hints_at_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)
    monkeypatch.delitem(gym.registry, "PongNoFrameskip-v4", raising=False)
    with pytest.raises(UnknownEnvironmentError, match=r"alf-rl\[atari\]"):
        suite_gym.resolve_env_id("PongNoFrameskip-v4")
