"""Tests of alf.environments: create_environment and the Gymnasium backend's TimeSteps."""

import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.data_structures import StepType
from alf.environments import (
    AlfEnvironment,
    GymnasiumEnvironment,
    UnknownEnvironmentError,
    create_environment,
    resolve_env_id,
)
from alf.tensor_specs import BoundedTensorSpec

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST


@pytest.fixture
def cart_pole():
    env = create_environment("CartPole-v1", 4, seed=0)
    yield env
    env.close()


def test_specs_and_reset(cart_pole):
    env = cart_pole
    assert isinstance(env, AlfEnvironment) and isinstance(env, GymnasiumEnvironment)
    assert env.batch_size == 4
    assert env.observation_spec().shape == (4,)
    assert env.observation_spec().dtype == torch.float32
    action_spec = env.action_spec()
    assert isinstance(action_spec, BoundedTensorSpec) and action_spec.num_actions == 2
    ts = env.reset()
    assert ts.step_type.dtype == torch.int32
    assert ts.step_type.tolist() == [FIRST] * 4
    assert ts.reward.tolist() == [0.0] * 4
    assert ts.discount.tolist() == [1.0] * 4
    assert ts.observation.shape == (4, 4) and ts.observation.dtype == torch.float32
    assert ts.prev_action.shape == (4,) and ts.prev_action.dtype == torch.int64
    assert not ts.prev_action.any()
    assert ts.env_id.tolist() == [0, 1, 2, 3]
    spec = env.time_step_spec()
    assert spec.observation == env.observation_spec()
    assert spec.prev_action == action_spec


def test_mid_steps_carry_reward_and_prev_action(cart_pole):
    env = cart_pole
    env.reset()
    action = torch.tensor([0, 1, 0, 1])
    ts = env.step(action)
    assert ts.step_type.tolist() == [MID] * 4
    assert ts.reward.tolist() == [1.0] * 4
    assert ts.discount.tolist() == [1.0] * 4
    assert torch.equal(ts.prev_action, action)


def test_every_step_has_fresh_tensors_of_the_spec_dtypes(cart_pole):
    """Mid-episode steps (a shortcut without per-environment masks) and boundary steps
    give the same dtypes, and no tensor shares memory with an earlier step's."""
    env = cart_pole
    steps = [env.reset()]
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        steps.append(env.step(torch.randint(0, 2, (4,), generator=generator)))
    kinds = {tuple(ts.step_type.tolist()) == (MID,) * 4 for ts in steps[1:]}
    assert kinds == {True, False}  # both kinds of step were taken
    for ts in steps:
        assert ts.step_type.dtype == torch.int32 and ts.reward.dtype == torch.float32
        assert ts.discount.dtype == torch.float32 and ts.observation.dtype == torch.float32
    for field in ("step_type", "reward", "discount", "observation"):
        pointers = [getattr(ts, field).data_ptr() for ts in steps[-20:]]
        assert len(set(pointers)) == len(pointers), field


def test_termination_gives_discount_zero_then_first(cart_pole):
    env = cart_pole
    env.reset()
    push = torch.ones(4, dtype=torch.int64)
    for _ in range(200):
        ts = env.step(push)
        if ts.is_last().any():
            break
    else:
        pytest.fail("pushing right never terminated CartPole")
    last = ts.is_last()
    assert ts.discount[last].tolist() == [0.0] * int(last.sum())
    assert ts.discount[~last].tolist() == [1.0] * int((~last).sum())
    assert ts.reward[last].tolist() == [1.0] * int(last.sum())
    assert (ts.step_type[~last] == MID).all()

    nxt = env.step(push)
    assert (nxt.step_type[last] == FIRST).all()
    assert (nxt.step_type[~last] != FIRST).all()
    assert (nxt.reward[last] == 0).all()
    assert (nxt.discount[last] == 1).all()
    assert (nxt.prev_action[last] == 0).all()
    assert (nxt.prev_action[~last] == 1).all()
    # The FIRST step carries a fresh reset observation (CartPole resets near 0).
    assert nxt.observation[last].abs().max() <= 0.05
    after = env.step(push)
    assert (after.step_type[last] == MID).all()
    assert (after.reward[last] == 1).all()


def test_truncation_gives_last_with_discount_one():
    env = create_environment("Pendulum-v1", 2, seed=0, max_episode_steps=5)
    try:
        ts = env.reset()
        action = torch.full((2, 1), 0.5)
        types, discounts = [], []
        for _ in range(7):
            ts = env.step(action)
            types.append(ts.step_type.tolist())
            discounts.append(ts.discount.tolist())
            if ts.is_first().all():
                assert not ts.prev_action.any()
                assert ts.reward.tolist() == [0.0, 0.0]
        assert types == [[MID] * 2] * 4 + [[LAST] * 2, [FIRST] * 2, [MID] * 2]
        assert discounts == [[1.0, 1.0]] * 7
    finally:
        env.close()


def test_truncated_cart_pole_also_bootstraps():
    env = create_environment("CartPole-v1", 3, seed=1, max_episode_steps=5)
    try:
        env.reset()
        for i in range(5):
            ts = env.step(torch.full((3,), i % 2, dtype=torch.int64))
        assert ts.step_type.tolist() == [LAST] * 3
        assert ts.discount.tolist() == [1.0] * 3
    finally:
        env.close()


def _run(seed, num_envs=2, steps=5):
    env = create_environment("CartPole-v1", num_envs, seed=seed)
    try:
        observations = [env.reset().observation]
        for i in range(steps):
            action = torch.tensor([(i + j) % 2 for j in range(num_envs)])
            observations.append(env.step(action).observation)
        return torch.stack(observations)
    finally:
        env.close()


def test_same_seed_same_observations_different_seed_differs():
    a, b, c = _run(5), _run(5), _run(6)
    assert torch.equal(a, b)
    assert not torch.allclose(a[0], c[0])
    # Environment i is seeded with seed + i.
    assert torch.equal(_run(5)[0, 1], _run(6)[0, 0])


def test_unknown_id_lists_close_matches():
    with pytest.raises(UnknownEnvironmentError) as info:
        create_environment("CartPole-v9", 1)
    assert isinstance(info.value, ValueError)
    assert "CartPole-v9" in str(info.value)
    assert "CartPole-v1" in str(info.value)


def test_unknown_module_raises_unknown_environment_error():
    with pytest.raises(UnknownEnvironmentError, match="alf_no_such_module_xyz"):
        resolve_env_id("alf_no_such_module_xyz:Foo-v0")


def test_module_prefixed_id_imports_and_registers(tmp_path, monkeypatch):
    module = tmp_path / "alf_test_user_envs.py"
    module.write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            import numpy as np


            class CountEnv(gym.Env):
                observation_space = gym.spaces.Box(0.0, 10.0, (1,), dtype=np.float32)
                action_space = gym.spaces.Discrete(2)

                def reset(self, *, seed=None, options=None):
                    super().reset(seed=seed)
                    self.t = 0
                    return np.zeros(1, dtype=np.float32), {}

                def step(self, action):
                    self.t += 1
                    obs = np.full(1, self.t, dtype=np.float32)
                    return obs, float(action) + 0.5, self.t >= 3, False, {}


            gym.register(id="AlfTestCount-v0", entry_point=CountEnv)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "alf_test_user_envs", raising=False)
    assert resolve_env_id("alf_test_user_envs:AlfTestCount-v0") == "AlfTestCount-v0"
    env = create_environment("alf_test_user_envs:AlfTestCount-v0", 2, seed=0)
    try:
        assert env.reset().observation.tolist() == [[0.0], [0.0]]
        rewards, types = [], []
        for _ in range(4):
            ts = env.step(torch.tensor([0, 1]))
            rewards.append(ts.reward.tolist())
            types.append(ts.step_type.tolist())
        assert types == [[MID] * 2, [MID] * 2, [LAST] * 2, [FIRST] * 2]
        assert rewards == [[0.5, 1.5]] * 3 + [[0.0, 0.0]]
        assert ts.observation.tolist() == [[0.0], [0.0]]
    finally:
        env.close()
        gym.registry.pop("AlfTestCount-v0", None)


def test_continuous_actions_are_clipped_and_counted():
    clipped_env = create_environment("Pendulum-v1", 2, seed=7)
    exact_env = create_environment("Pendulum-v1", 2, seed=7)
    try:
        assert torch.equal(clipped_env.reset().observation, exact_env.reset().observation)
        assert clipped_env.num_clipped_actions == 0
        a = clipped_env.step(torch.tensor([[5.0], [-0.5]]))
        b = exact_env.step(torch.tensor([[2.0], [-0.5]]))
        assert torch.allclose(a.observation, b.observation)
        assert torch.allclose(a.reward, b.reward)
        assert clipped_env.num_clipped_actions == 1
        clipped_env.step(torch.tensor([[-3.0], [3.0]]))
        assert clipped_env.num_clipped_actions == 3
        clipped_env.step(torch.tensor([[1.0], [-2.0]]))  # on the bounds: not clipped
        assert clipped_env.num_clipped_actions == 3
    finally:
        clipped_env.close()
        exact_env.close()


def test_prev_action_is_the_clipped_action():
    env = create_environment("Pendulum-v1", 1, seed=0)
    try:
        env.reset()
        ts = env.step(torch.tensor([[5.0]]))
        assert ts.prev_action.tolist() == [[2.0]]
    finally:
        env.close()


@pytest.mark.parametrize("bad", [2, -1])
def test_discrete_action_out_of_range_raises(cart_pole, bad):
    cart_pole.reset()
    with pytest.raises(ValueError, match="outside"):
        cart_pole.step(torch.tensor([0, bad, 1, 0]))
    # The environment is still usable after the rejected action.
    assert cart_pole.step(torch.tensor([0, 1, 1, 0])).step_type.tolist() == [MID] * 4


class _MultiDiscreteEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 4])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(2, dtype=np.float32), float(np.sum(action)), False, False, {}


def test_multi_discrete_actions_can_be_stepped():
    vector_env = gym.vector.SyncVectorEnv([_MultiDiscreteEnv, _MultiDiscreteEnv])
    env = GymnasiumEnvironment(vector_env=vector_env, seed=0)
    try:
        env.reset()
        ts = env.step(torch.tensor([[2, 3], [0, 1]]))
        assert ts.reward.tolist() == [5.0, 1.0]
    finally:
        env.close()


def test_num_parallel_environments_must_be_positive():
    with pytest.raises(ValueError):
        create_environment("CartPole-v1", 0)
