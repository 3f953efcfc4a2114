"""Agents whose spaces differ: the batch's padded union of their spaces, the rows of such
a game, the spaces that are refused, and a run of MPE's simple_adversary with a policy
per team through the train and play commands (and the refusal of one shared policy)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

from alf_test_multiagent import RaceEnv  # noqa: E402
from helpers_cli import (  # noqa: E402
    REPO,
    assert_clean_user_error,
    play_cmd,
    run_cli,
    snapshot,
    train_cmd,
)

from alf.environments.agent_spaces import AgentSpaces  # noqa: E402
from alf.environments.pettingzoo_environment import pettingzoo_environment  # noqa: E402
from alf.environments.pettingzoo_games import game_info  # noqa: E402
from alf.environments.suite_gym import UnknownEnvironmentError  # noqa: E402

TESTS = Path(__file__).resolve().parent
MIXED = "pettingzoo:alf_test_mixed_race"
ADVERSARY = "pettingzoo:mpe2.simple_adversary_v3"


def _box(*shape: int, low: float = -1.0) -> gym.spaces.Box:
    return gym.spaces.Box(low, 1.0, shape, np.float32)


class MixedRaceEnv(RaceEnv):
    """The race, where ``runner_2`` sees ``[position, time, 7]`` and has a third
    action (moving two steps)."""

    def observation_space(self, agent: str) -> gym.Space:
        return _box(3 if agent == "runner_2" else 2, low=-100.0)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(3 if agent == "runner_2" else 2)

    def _obs(self, agent: str) -> np.ndarray:
        seen = super()._obs(agent)
        return np.append(seen, np.float32(7)) if agent == "runner_2" else seen


@pytest.fixture(autouse=True)
def _test_modules_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    module = types.ModuleType("alf_test_mixed_race")
    module.parallel_env = lambda **kwargs: MixedRaceEnv(**kwargs)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "alf_test_mixed_race", module)


def _spaces(observations: list[gym.Space], actions: list[gym.Space]) -> AgentSpaces:
    return AgentSpaces(
        env_name="pettingzoo:test",
        agents=[f"a_{i}" for i in range(len(observations))],
        observation_spaces=observations,
        action_spaces=actions,
    )


def test_boxes_are_zero_padded_and_discrete_actions_masked() -> None:
    same = _spaces([_box(2), _box(2)], [gym.spaces.Discrete(2)] * 2)
    assert not same.padded and same.observation_space == _box(2)
    assert same.mismatch([0, 1]) is None
    spaces = _spaces([_box(2), _box(3, low=0.5)], [gym.spaces.Discrete(2), gym.spaces.Discrete(4)])
    assert spaces.padded and spaces.action_space == gym.spaces.Discrete(4)
    observation = spaces.observation_space
    assert set(observation.spaces) == {"observation", "action_mask"}
    np.testing.assert_array_equal(observation["observation"].low, [-1.0, -1.0, 0.0])
    padded = spaces.pad(0, np.array([0.5, 0.25], np.float32))
    np.testing.assert_array_equal(padded["observation"], [0.5, 0.25, 0.0])
    np.testing.assert_array_equal(padded["action_mask"], [1, 1, 0, 0])
    np.testing.assert_array_equal(spaces.pad(1, np.ones(3))["action_mask"], [1, 1, 1, 1])
    assert spaces.action(1, np.int64(3)) == 3
    with pytest.raises(ValueError, match="a_0.*outside its Discrete"):
        spaces.action(0, np.int64(2))
    assert spaces.mismatch([0, 1]) == (
        f"different observation spaces (a_0: {_box(2)}; a_1: {_box(3, low=0.5)})"
    )
    assert spaces.mismatch([1]) is None
    # A Dict observation's entries are padded; an agent's own action mask is padded too.
    dicts = [
        gym.spaces.Dict({"obs": _box(n, 2), "action_mask": gym.spaces.Box(0, 1, (n,), np.int8)})
        for n in (2, 3)
    ]
    masked = _spaces(dicts, [gym.spaces.Discrete(2), gym.spaces.Discrete(3)])
    assert set(masked.observation_space.spaces) == {"obs", "action_mask"}
    value = masked.pad(0, {"obs": np.ones((2, 2)), "action_mask": np.array([0, 1], np.int8)})
    np.testing.assert_array_equal(value["obs"], [[1, 1], [1, 1], [0, 0]])
    np.testing.assert_array_equal(value["action_mask"], [0, 1, 0])


@pytest.mark.parametrize(
    ("observations", "actions", "what"),
    [
        ([_box(2), _box(2)], [_box(2), _box(3)], "action"),
        (
            [_box(2)] * 2,
            [gym.spaces.MultiDiscrete([2, 2]), gym.spaces.MultiDiscrete([2, 3])],
            "action",
        ),
        ([_box(2), _box(2, 2)], [gym.spaces.Discrete(2)] * 2, "observation"),
        (
            [gym.spaces.Discrete(2), gym.spaces.Discrete(3)],
            [gym.spaces.Discrete(2)] * 2,
            "observation",
        ),
        (
            [gym.spaces.Dict({"x": _box(2)}), gym.spaces.Dict({"y": _box(2)})],
            [gym.spaces.Discrete(2)] * 2,
            "observation",
        ),
    ],
    ids=["box_actions", "multi_discrete", "ranks", "discrete_observations", "dict_keys"],
)
def test_spaces_that_cannot_be_padded_are_refused(
    observations: list[gym.Space], actions: list[gym.Space], what: str
) -> None:
    with pytest.raises(UnknownEnvironmentError, match=f"different {what} spaces \\(a_0: .*; a_1"):
        _spaces(observations, actions)


def _build(env_name: str, num_envs: int) -> Any:
    return pettingzoo_environment(
        env_name=env_name,
        num_envs=num_envs,
        seed=0,
        render_mode=None,
        max_episode_steps=None,
        env_kwargs=None,
        for_evaluation=False,
        first_env_index=0,
        drop_nonfinite=False,
    )


def test_the_rows_of_a_game_with_mixed_spaces_are_padded() -> None:
    env = _build(MIXED, 6)
    spec = env.observation_spec()
    assert spec["observation"].shape == (3,) and spec["action_mask"].shape == (3,)
    assert int(env.action_spec().maximum) == 2
    first = env.reset().observation
    torch.testing.assert_close(first["observation"][2], torch.tensor([0.0, 0.0, 7.0]))
    torch.testing.assert_close(first["observation"][0], torch.zeros(3))
    assert first["action_mask"].tolist() == [[1, 1, 0], [1, 1, 0], [1, 1, 1]] * 2
    moved = env.step(torch.tensor([1, 1, 2, 0, 0, 2]))
    assert moved.reward.tolist() == [1.0, 1.0, 2.0, 0.0, 0.0, 2.0]
    torch.testing.assert_close(moved.observation["observation"][2], torch.tensor([2.0, 1.0, 7.0]))
    with pytest.raises(ValueError, match="runner_0.*outside its Discrete\\(2\\)"):
        env.step(torch.tensor([2, 1, 1, 1, 1, 1]))
    env.close()


def test_mpe_games_with_mixed_spaces() -> None:
    pytest.importorskip("mpe2")
    adversary = game_info(ADVERSARY)
    assert adversary.spaces.padded and adversary.observation_space.shape == (10,)
    assert adversary.action_space == gym.spaces.Discrete(5)
    assert "adversary_0: Box(-inf, inf, (8,), float32)" in adversary.spaces.mismatch([0, 1])
    assert adversary.spaces.mismatch([1, 2]) is None
    world = game_info("pettingzoo:mpe2.simple_world_comm_v3")
    assert world.action_space == gym.spaces.Discrete(20)
    assert world.observation_space["observation"].shape == (34,)
    assert world.observation_space["action_mask"].shape == (20,)
    with pytest.raises(UnknownEnvironmentError, match="leadadversary_0: Box.*cannot be padded"):
        game_info("pettingzoo:mpe2.simple_world_comm_v3", {"continuous_actions": True})


CONF = REPO / "alf" / "examples" / "ppo_simple_adversary.gin"
SMALL = (
    "TrainerConfig.num_iterations=2",
    "TrainerConfig.unroll_length=8",
    "PPOAlgorithm.num_epochs=1",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_environments=3",
    "TrainerConfig.num_eval_episodes=3",
)


def test_simple_adversary_trains_a_policy_per_team_and_plays(tmp_path: Path) -> None:
    pytest.importorskip("mpe2")
    root = tmp_path / "adversary"
    trained = run_cli(train_cmd(root, *SMALL, conf=CONF))
    assert trained.returncode == 0, trained.stderr[-3000:]
    records = [json.loads(line) for line in (root / "progress.jsonl").read_text().splitlines()]
    assert {"train/adversary/loss", "train/agent/loss"} <= set(records[-2])
    assert {"eval/adversary/average_return", "eval/agent/average_return"} <= set(records[-1])
    played = run_cli(play_cmd(root, "--num_episodes=2"))
    assert played.returncode == 0, played.stderr[-3000:]
    assert played.stdout.count("episode ") == 2


def test_one_policy_for_agents_whose_spaces_differ_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("mpe2")
    root = tmp_path / "shared"
    result = run_cli(train_cmd(root, *SMALL, "policy_mapping.mapping='shared'", conf=CONF))
    assert_clean_user_error(
        result, "alf.bin.train", "policy_mapping.mapping", "adversary_0", "agent_0", "(8,)"
    )
    assert result.returncode == 2
    assert not root.exists() or snapshot(root) == {}
