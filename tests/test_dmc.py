"""Tests of DeepMind Control environments through shimmy (the ``[dmc]`` extra)."""

import warnings

import gin
import pytest
import torch

from alf.data_structures import StepType
from alf.environments import UnknownEnvironmentError, create_environment

with warnings.catch_warnings():  # glfw warns when there is no display
    warnings.simplefilter("ignore")
    pytest.importorskip("shimmy")
    pytest.importorskip("dm_control.suite")

CHEETAH = "dm_control/cheetah-run-v0"


def test_cheetah_run_steps_with_dict_observations():
    env = create_environment(CHEETAH, 2, seed=0)
    try:
        spec = env.observation_spec()
        assert set(spec) == {"position", "velocity"}
        assert spec["position"].shape == (8,) and spec["velocity"].shape == (9,)
        assert all(s.dtype == torch.float32 for s in spec.values())  # float64 in dm_control
        action_spec = env.action_spec()
        assert action_spec.shape == (6,) and action_spec.dtype == torch.float32
        ts = env.reset()
        assert ts.observation["velocity"].shape == (2, 9)
        assert ts.observation["velocity"].dtype == torch.float32
        for _ in range(5):
            ts = env.step(torch.rand(2, 6) * 2 - 1)
        assert (ts.step_type == StepType.MID).all() and ts.reward.dtype == torch.float32
    finally:
        env.close()


def test_seeded_resets_repeat():
    def first(seed):
        env = create_environment(CHEETAH, 2, seed=seed)
        try:
            return env.reset().observation["position"]
        finally:
            env.close()

    a = first(3)
    assert torch.equal(a, first(3))
    assert not torch.equal(a, first(4))


def test_time_limit_truncates_with_discount_one():
    env = create_environment(CHEETAH, 1, seed=0, env_kwargs={"task_kwargs": {"time_limit": 0.1}})
    try:
        env.reset()
        steps = [env.step(torch.zeros(1, 6)) for _ in range(12)]
        types = [int(ts.step_type) for ts in steps]
        end = types.index(StepType.LAST)
        assert set(types[:end]) == {StepType.MID} and types[end + 1] == StepType.FIRST
        assert float(steps[end].discount) == 1.0  # the time limit: values bootstrap
    finally:
        env.close()


def test_flattened_observations():
    gin.parse_config("suite_gym.load.wrappers = [@FlattenObservation]")
    env = create_environment(CHEETAH, 1, seed=0)
    try:
        assert env.observation_spec().shape == (17,)
        assert env.reset().observation.shape == (1, 17)
    finally:
        env.close()


def test_unknown_dm_control_id_lists_close_matches():
    with pytest.raises(UnknownEnvironmentError, match="cheetah-run"):
        create_environment("dm_control/cheetah-runn-v0", 1)
