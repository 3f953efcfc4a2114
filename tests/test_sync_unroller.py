"""Tests of alf.unrollers.SyncUnroller."""

import pytest
import torch
from helpers_algorithms import small_ppo

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import AlgStep, Experience, StepType
from alf.environments import create_environment
from alf.tensor_specs import TensorSpec
from alf.unrollers import SyncUnroller
from alf.unrollers.sync_unroller import reset_state_on_first


@pytest.fixture
def unroller():
    env = create_environment("CartPole-v1", 3, seed=0, max_episode_steps=6)
    unroller = SyncUnroller(env=env, algorithm=small_ppo(env), unroll_length=4)
    yield unroller
    unroller.close()


def test_unroll_returns_t_plus_one_rows(unroller):
    assert unroller.steps_per_unroll == 12
    exp = unroller.unroll()
    assert isinstance(exp, Experience)
    assert exp.step_type.shape == (5, 3)
    assert exp.observation.shape == (5, 3, 4)
    assert exp.action.shape == (5, 3)
    assert exp.rollout_info.log_prob.shape == (5, 3)
    assert exp.rollout_info.value.shape == (5, 3)
    assert exp.step_type[0].tolist() == [StepType.FIRST] * 3
    assert exp.step_type[1:].eq(StepType.MID).all()
    assert torch.equal(exp.env_id, torch.arange(3).expand(5, 3))


def test_consecutive_unrolls_overlap_by_one_row(unroller):
    first = unroller.unroll()
    second = unroller.unroll()
    third = unroller.unroll()
    for a, b in ((first, second), (second, third)):
        for leaf_a, leaf_b in zip(nest.flatten(a), nest.flatten(b), strict=True):
            assert torch.equal(leaf_a[-1], leaf_b[0])
    # The rows after the overlap are new steps, not copies.
    assert not torch.equal(first.observation[1:], second.observation[1:])


def test_rows_chain_actions_into_prev_actions(unroller):
    rows = [unroller.unroll() for _ in range(3)]
    exp = nest.map_structure(lambda *xs: torch.cat([xs[0]] + [x[1:] for x in xs[1:]]), *rows)
    assert exp.step_type.shape == (13, 3)
    first = exp.step_type[1:] == StepType.FIRST
    assert first.any()  # 6-step episodes end inside 12 steps
    assert torch.equal(exp.prev_action[1:][~first], exp.action[:-1][~first])
    assert (exp.prev_action[1:][first] == 0).all()
    assert (exp.reward[1:][first] == 0).all()
    last_before = exp.step_type[:-1] == StepType.LAST
    assert torch.equal(first, last_before)


def test_episodes_are_tracked(unroller):
    for _ in range(4):  # 16 steps: two complete 6-step episodes per environment
        unroller.unroll()
    returns, lengths = unroller.episodes.pop_completed()
    assert len(returns) == 6
    assert lengths == [6] * 6
    assert returns == [6.0] * 6
    assert unroller.episodes.pop_completed() == ([], [])


def test_unroll_length_must_be_positive():
    env = create_environment("CartPole-v1", 1, seed=0)
    try:
        with pytest.raises(ValueError):
            SyncUnroller(env=env, algorithm=small_ppo(env), unroll_length=0)
    finally:
        env.close()


def test_reset_state_on_first():
    state = {"h": torch.ones(3, 2), "c": torch.full((3,), 5)}
    step_type = torch.tensor([StepType.FIRST, StepType.MID, StepType.LAST], dtype=torch.int32)
    reset = reset_state_on_first(state, step_type)
    assert reset["h"].tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
    assert reset["c"].tolist() == [0, 5, 5]


class _CountingAlgorithm(RLAlgorithm):
    """Always pushes left; its recurrent state counts the steps since FIRST."""

    @property
    def predict_state_spec(self):
        return TensorSpec((1,))

    def rollout_step(self, time_step, state):
        n = time_step.step_type.shape[0]
        return AlgStep(output=torch.zeros(n, dtype=torch.int64), state=state + 1)


def test_recurrent_state_is_reset_on_first():
    env = create_environment("CartPole-v1", 2, seed=0, max_episode_steps=3)
    algorithm = _CountingAlgorithm(
        observation_spec=env.observation_spec(), action_spec=env.action_spec()
    )
    unroller = SyncUnroller(env=env, algorithm=algorithm, unroll_length=9)
    try:
        exp = unroller.unroll()
    finally:
        unroller.close()
    # Rows: FIRST MID MID LAST FIRST ...; the state given at row t counts the rows since FIRST.
    assert exp.step_type[:, 0].tolist() == [0, 1, 1, 2] * 2 + [0, 1]
    assert exp.state[:, :, 0].t().tolist() == [[0.0, 1.0, 2.0, 3.0] * 2 + [0.0, 1.0]] * 2
