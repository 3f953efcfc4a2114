"""Tests of alf.environments.legacy_gym: environments of the old gym API, unchanged."""

import sys
import textwrap

import gin
import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.data_structures import StepType
from alf.environments import create_environment, suite_gym
from alf.environments.legacy_gym import LegacyEnvAdapter, convert_space

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST

# An old-API corridor in a user module: its own spaces (named like gym's, not
# gymnasium's), reset() -> obs, seed(), a 4-tuple step, its own time limit that sets
# info["TimeLimit.truncated"], and render(mode=...).
LEGACY_MODULE = '''
import gymnasium
import numpy as np


class Box:
    def __init__(self, low, high, shape, dtype):
        self.low = np.full(shape, low, dtype=dtype)
        self.high = np.full(shape, high, dtype=dtype)
        self.shape = shape
        self.dtype = np.dtype(dtype)


class Discrete:
    def __init__(self, n):
        self.n = n


class Corridor:
    """Walk right (action 1) from a random cell 0..3 to cell 6; at most `limit` steps."""

    metadata = {"render.modes": ["rgb_array"]}

    def __init__(self, limit=8):
        self.observation_space = Box(0.0, 6.0, (1,), np.float32)
        self.action_space = Discrete(2)
        self.limit = limit
        self.rng = np.random.RandomState()

    def seed(self, seed=None):
        self.rng = np.random.RandomState(seed)
        return [seed]

    def reset(self):
        self.pos = int(self.rng.randint(0, 4))
        self.t = 0
        return np.array([self.pos], dtype=np.float64)

    def step(self, action):
        self.pos = max(0, self.pos + (1 if int(action) == 1 else -1))
        self.t += 1
        at_goal = self.pos >= 6
        info = {}
        if self.t >= self.limit and not at_goal:
            info["TimeLimit.truncated"] = True
        done = at_goal or self.t >= self.limit
        return np.array([self.pos], dtype=np.float64), (1.0 if at_goal else -0.1), done, info

    def render(self, mode="human"):
        return np.full((2, 7, 3), self.pos, dtype=np.uint8)


gymnasium.register(id="AlfLegacyCorridor-v0", entry_point="alf_test_legacy_envs:Corridor")
'''

ENV_NAME = "alf_test_legacy_envs:AlfLegacyCorridor-v0"


@pytest.fixture
def legacy_env_config(tmp_path, monkeypatch):
    (tmp_path / "alf_test_legacy_envs.py").write_text(textwrap.dedent(LEGACY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "alf_test_legacy_envs", raising=False)
    gin.parse_config("suite_gym.load.legacy_api = True")
    yield
    gym.registry.pop("AlfLegacyCorridor-v0", None)


def _walk(env, actions):
    ts = env.reset()
    steps = [ts]
    for a in actions:
        ts = env.step(torch.tensor(a))
        steps.append(ts)
    return steps


def test_termination_has_discount_zero_truncation_discount_one(legacy_env_config):
    env = create_environment(ENV_NAME, 2, seed=0)
    try:
        assert env.observation_spec().shape == (1,)
        assert env.observation_spec().dtype == torch.float32
        assert env.action_spec().num_actions == 2
        # Env 0 walks right and reaches the goal within 6 steps (terminated); env 1
        # walks left and hits the corridor's own limit of 8 steps (truncated).
        steps = _walk(env, [[1, 0]] * 9)
        types = torch.stack([ts.step_type for ts in steps])
        discounts = torch.stack([ts.discount for ts in steps])
        goal = int((types[:, 0] == LAST).nonzero()[0])
        assert 3 <= goal <= 6 and discounts[goal, 0] == 0.0 and steps[goal].reward[0] == 1.0
        assert types[goal + 1, 0] == FIRST
        assert types[8, 1] == LAST and discounts[8, 1] == 1.0
        assert (types[1:8, 1] == MID).all() and types[9, 1] == FIRST
        assert steps[9].observation.dtype == torch.float32
    finally:
        env.close()


def test_gymnasium_time_limit_truncates(legacy_env_config):
    env = create_environment(ENV_NAME, 1, seed=0, max_episode_steps=3)
    try:
        steps = _walk(env, [[0]] * 4)
        assert [int(ts.step_type) for ts in steps] == [FIRST, MID, MID, LAST, FIRST]
        assert float(steps[3].discount) == 1.0
    finally:
        env.close()


def test_seeds_reach_the_legacy_env(legacy_env_config):
    def first_obs(seed):
        env = create_environment(ENV_NAME, 4, seed=seed)
        try:
            return env.reset().observation[:, 0].tolist()
        finally:
            env.close()

    a, b = first_obs(10), first_obs(10)
    assert a == b
    assert first_obs(11)[:3] == a[1:]  # environment i is seeded with seed + i
    assert any(first_obs(s) != a for s in (20, 30))


def test_load_adapts_and_renders(legacy_env_config):
    env = suite_gym.load(ENV_NAME, render_mode="rgb_array", env_kwargs={"limit": 2})
    try:
        assert isinstance(env.unwrapped, LegacyEnvAdapter)
        assert env.metadata["render_modes"] == ["rgb_array"]
        obs, info = env.reset(seed=1)
        assert info == {} and obs.shape == (1,)
        assert env.render().shape == (2, 7, 3)
        env.step(1)
        _, _, terminated, truncated, info = env.step(0)
        assert (terminated, truncated) == (False, True) and info["TimeLimit.truncated"]
    finally:
        env.close()


def test_new_api_env_with_legacy_flag_is_a_clear_error(legacy_env_config):
    env = suite_gym.load("CartPole-v1")  # legacy_api=True is bound: built from entry point
    env.reset(seed=0)
    with pytest.raises(ValueError, match="legacy_api"):
        env.step(0)


def test_preset_and_legacy_api_conflict(legacy_env_config):
    with pytest.raises(ValueError, match="legacy_api"):
        suite_gym.load(ENV_NAME, preset="atari")


def test_convert_space_by_duck_typing():
    def old(kind, **attributes):
        return type(kind, (), attributes)()

    box = convert_space(old("Box", low=np.zeros(2), high=np.ones(2), shape=(2,), dtype=np.float32))
    assert box == gym.spaces.Box(0.0, 1.0, (2,), dtype=np.float32)
    assert convert_space(old("Discrete", n=3)) == gym.spaces.Discrete(3)
    assert convert_space(old("MultiDiscrete", nvec=[2, 3])) == gym.spaces.MultiDiscrete([2, 3])
    assert convert_space(old("MultiBinary", n=4)) == gym.spaces.MultiBinary(4)
    nested = convert_space(
        old("Dict", spaces={"a": old("Discrete", n=2), "b": old("Tuple", spaces=[box])})
    )
    assert nested == gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Tuple([box])})
    assert convert_space(box) is box
    with pytest.raises(TypeError):
        convert_space(old("Sphere", radius=1.0))


@pytest.mark.slow
def test_a_legacy_env_trains_unchanged_through_the_command_line(tmp_path):
    """PPO through ``alf.bin.train`` learns the old-API corridor (a random policy mostly
    hits the 8-step limit, about -0.7; walking right scores 0.5 to 0.8), and ``play``
    replays it."""
    from helpers_cli import play_cmd, played_average_return, read_progress, run_cli, train_cmd

    (tmp_path / "alf_test_legacy_envs.py").write_text(textwrap.dedent(LEGACY_MODULE))
    root = tmp_path / "run"
    params = (
        f"create_environment.env_name='{ENV_NAME}'",
        "suite_gym.load.legacy_api=True",
        "TrainerConfig.num_env_steps=12000",
        "TrainerConfig.eval_interval=10",
        "TrainerConfig.stop_at_eval_return=0.5",
        "PPOAlgorithm.gamma=0.99",
    )
    conf = tmp_path / "legacy.gin"
    conf.write_text("include 'ppo_cart_pole.gin'\n")
    proc = run_cli(train_cmd(root, *params, conf=conf), pythonpath=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = [r for r in read_progress(root) if "eval/average_return" in r]
    assert evals[-1]["eval/average_return"] >= 0.5, evals
    played = run_cli(
        play_cmd(root, "--num_episodes=4", "--trust_module=alf_test_legacy_envs"),
        pythonpath=tmp_path,
    )
    assert played_average_return(played) >= 0.5
