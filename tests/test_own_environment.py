"""Bringing your own environment (issue 29, point 6): ``module:Class``, MiniGrid ids
without a prefix, a ``Dict`` key ALF cannot convert named with the wrapper that drops it,
``DropObservationKeys``, and the ``PYTHONPATH`` hint for a module that is not found."""

from __future__ import annotations

import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers_cli import assert_clean_user_error, run_cli, train_cmd

from alf.environments.suite_gym import UnknownEnvironmentError, resolve_env_id
from alf.environments.wrappers import DropObservationKeys
from alf.tensor_specs import UnsupportedSpaceError, from_gym_space

TRAIN = "alf.bin.train"

_MODULE = '''
import gymnasium as gym
import numpy as np


class AlfTestLine(gym.Env):
    """Reach the right end of a line of 6 cells: reward 1."""

    def __init__(self, render_mode=None, length=6):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        obs = np.zeros(self.length, np.float32)
        obs[self.pos] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return self._obs(), {}

    def step(self, action):
        self.pos = max(0, min(self.length - 1, self.pos + (1 if action == 1 else -1)))
        done = self.pos == self.length - 1
        return self._obs(), float(done), done, False, {}
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "alf_test_line_env.py").write_text(textwrap.dedent(_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_module_colon_class_is_registered_and_made(user_module: Path) -> None:
    env_id = resolve_env_id("alf_test_line_env:AlfTestLine")
    assert env_id == "alf_test_line_env/AlfTestLine"
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (6,)
    assert resolve_env_id("alf_test_line_env:AlfTestLine") == env_id  # registered once


def test_module_colon_class_trains_through_the_cli(user_module: Path) -> None:
    root = user_module / "run"
    params = (
        "create_environment.env_name='alf_test_line_env:AlfTestLine'",
        "create_environment.max_episode_steps=50",
        "TrainerConfig.num_env_steps=4096",
        "TrainerConfig.eval_interval=16",
    )
    result = run_cli(train_cmd(root, *params), pythonpath=user_module)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "evaluation average return 1.00" in result.stdout, result.stdout[-2000:]


def test_a_module_that_is_not_found_gets_the_pythonpath_hint() -> None:
    with pytest.raises(UnknownEnvironmentError, match="PYTHONPATH") as info:
        resolve_env_id("alf_test_no_such_module:Env-v0")
    assert "alf_test_no_such_module" in str(info.value)


def test_an_unconvertible_dict_key_is_named_with_its_fix() -> None:
    space = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (3, 3, 3), np.uint8), "mission": gym.spaces.Text(10)}
    )
    with pytest.raises(UnsupportedSpaceError) as info:
        from_gym_space(space)
    message = str(info.value)
    assert "at ['mission'] of the space" in message
    assert "suite_gym.load.wrappers = [@DropObservationKeys]" in message
    assert "DropObservationKeys.keys = ['mission']" in message
    nested = gym.spaces.Dict({"outer": space})
    with pytest.raises(UnsupportedSpaceError, match=r"\['outer'\]\['mission'\].*'outer/mission'"):
        from_gym_space(nested)


class _DictEnv(gym.Env):
    observation_space = gym.spaces.Dict(
        {
            "a": gym.spaces.Box(0, 1, (2,), np.float32),
            "b": gym.spaces.Dict({"c": gym.spaces.Discrete(3), "d": gym.spaces.Text(4)}),
            "e": gym.spaces.Text(4),
        }
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        return {"a": np.zeros(2, np.float32), "b": {"c": 1, "d": "ab"}, "e": "x"}, {}


def test_drop_observation_keys_leaves_out_top_level_and_nested_entries() -> None:
    env = DropObservationKeys(_DictEnv(), keys=["e", "b/d"])
    assert set(env.observation_space.spaces) == {"a", "b"}
    assert set(env.observation_space["b"].spaces) == {"c"}
    obs, _ = env.reset()
    assert set(obs) == {"a", "b"} and obs["b"] == {"c": 1}
    from_gym_space(env.observation_space)  # convertible now
    with pytest.raises(ValueError, match="no observation entry 'b/x'"):
        DropObservationKeys(_DictEnv(), keys=["b/x"])
    with pytest.raises(ValueError, match="every entry"):
        DropObservationKeys(_DictEnv(), keys=["a", "b", "e"])
    with pytest.raises(TypeError, match="needs a Dict"):
        DropObservationKeys(gym.make("CartPole-v1"), keys=["a"])


def test_minigrid_without_prefix_names_the_mission_key_then_trains(tmp_path: Path) -> None:
    pytest.importorskip("minigrid")
    root = tmp_path / "run"
    env = "create_environment.env_name='MiniGrid-Empty-5x5-v0'"
    result = run_cli(train_cmd(root, env, "TrainerConfig.num_env_steps=512"))
    assert_clean_user_error(result, TRAIN, "at ['mission']", "DropObservationKeys.keys")
    assert result.returncode == 2 and not root.exists()
    wrapped = (
        env,
        "suite_gym.load.wrappers=[@DropObservationKeys, @FlattenObservation]",
        "DropObservationKeys.keys=['mission']",
        "TrainerConfig.num_env_steps=512",
    )
    result = run_cli(train_cmd(root, *wrapped))
    assert result.returncode == 0, result.stderr[-3000:]
