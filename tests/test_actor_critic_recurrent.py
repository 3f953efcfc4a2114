"""Tests of the actor-critic family (A2C, PPO) with recurrent (LSTM) networks: state
specs, state threading through the step hooks, and train_step reproducing rollout_step."""

import functools

import numpy as np
import pytest
import torch

from alf import nest
from alf.algorithms import ActorCriticAlgorithm, PPOAlgorithm
from alf.algorithms.actor_critic import ActorCriticState
from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import reset_state_on_first
from alf.data_structures import Experience, StepType, TimeStep
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.tensor_specs import BoundedTensorSpec, TensorSpec

OBS = BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
BOX = BoundedTensorSpec((2,), torch.float32, -np.ones(2), np.ones(2))

LSTM_ACTOR = functools.partial(ActorDistributionNetwork, fc_layer_params=(8,), lstm_hidden_size=6)
LSTM_VALUE = functools.partial(ValueNetwork, fc_layer_params=(8,), lstm_hidden_size=5)
MLP_VALUE = functools.partial(ValueNetwork, fc_layer_params=(8,))
PAIR6 = ((TensorSpec((6,)), TensorSpec((6,))),)
PAIR5 = ((TensorSpec((5,)), TensorSpec((5,))),)


def _make(cls=PPOAlgorithm, value=LSTM_VALUE, action_spec=DISCRETE, **kwargs):
    torch.manual_seed(0)
    return cls(
        observation_spec=OBS,
        action_spec=action_spec,
        actor_network_ctor=LSTM_ACTOR,
        value_network_ctor=value,
        **kwargs,
    )


def _time_step(step_type, batch=3):
    return TimeStep(
        step_type=step_type.to(torch.int32),
        reward=torch.rand(batch),
        discount=torch.ones(batch),
        observation=torch.rand(batch, 4) * 2 - 1,
        prev_action=torch.zeros(batch, dtype=torch.int64),
        env_id=torch.arange(batch),
    )


def _step_types(length, batch):
    """FIRST at t = 0; environment b's episodes last 3 + b steps (then LAST, FIRST...)."""
    types = torch.full((length, batch), StepType.MID)
    for b in range(batch):
        period = 3 + b
        for t in range(length):
            phase = t % (period + 1)
            types[t, b] = (
                StepType.FIRST if phase == 0 else StepType.LAST if phase == period else StepType.MID
            )
    return types


@torch.no_grad()
def _unroll(algorithm, length=12, batch=3):
    """Collects a ``[length, batch]`` trajectory as an unroller does: the state is reset
    on FIRST steps, and each row stores the state given to ``rollout_step``."""
    torch.manual_seed(1)
    state = algorithm.zero_state(algorithm.rollout_state_spec, batch)
    rows = []
    for step_type in _step_types(length, batch):
        time_step = _time_step(step_type, batch)
        state = reset_state_on_first(state, time_step.step_type)
        step = algorithm.rollout_step(time_step, state)
        rows.append(Experience.from_time_step(time_step, step.output, step.info, state))
        state = step.state
    return nest.stack(rows)


def _replay(algorithm, exp, start=0):
    """``train_step`` along ``exp`` from row ``start``, starting from the stored rollout
    state and resetting it on FIRST steps (as the on-policy trainer does)."""
    state = nest.map_structure(lambda x: x[start], exp.state)
    infos = []
    for t in range(start, exp.step_type.shape[0]):
        row = nest.map_structure(lambda x, t=t: x[t], exp)
        state = reset_state_on_first(state, row.step_type)
        step = algorithm.train_step(row, state, row.rollout_info)
        state = step.state
        infos.append(step.info)
    return nest.stack(infos)


def test_state_specs():
    algorithm = _make()
    assert algorithm.rollout_state_spec == ActorCriticState(actor=PAIR6, value=PAIR5)
    assert algorithm.train_state_spec == algorithm.rollout_state_spec
    assert algorithm.predict_state_spec == PAIR6
    actor_only = _make(value=MLP_VALUE)
    assert actor_only.rollout_state_spec == ActorCriticState(actor=PAIR6, value=())
    assert actor_only.predict_state_spec == PAIR6


@pytest.mark.parametrize("value", [LSTM_VALUE, MLP_VALUE])
@pytest.mark.parametrize("action_spec", [DISCRETE, BOX])
def test_rollout_and_predict_steps_return_states_of_the_declared_specs(value, action_spec):
    algorithm = _make(value=value, action_spec=action_spec)
    time_step = _time_step(torch.full((3,), StepType.FIRST))

    def spec_of(state):
        return nest.map_structure(lambda x: TensorSpec(tuple(x.shape[1:]), x.dtype), state)

    state = algorithm.zero_state(algorithm.rollout_state_spec, 3)
    step = algorithm.rollout_step(time_step, state)
    assert isinstance(step.state, ActorCriticState)
    assert spec_of(step.state) == algorithm.rollout_state_spec
    assert step.info.log_prob.shape == (3,) and step.info.value.shape == (3,)
    # The state moved on: the next step from it differs from one from zeros.
    again = algorithm.predict_step(time_step, step.state.actor)
    fresh = algorithm.predict_step(time_step, algorithm.zero_state(algorithm.predict_state_spec, 3))
    assert spec_of(fresh.state) == algorithm.predict_state_spec
    assert not torch.equal(again.state[0][0], fresh.state[0][0])


def test_experience_spec_holds_the_rollout_state():
    algorithm = _make()
    spec = algorithm.experience_spec()
    assert spec.state == ActorCriticState(actor=PAIR6, value=PAIR5)


@pytest.mark.parametrize("cls", [ActorCriticAlgorithm, PPOAlgorithm])
@pytest.mark.parametrize("value", [LSTM_VALUE, MLP_VALUE])
@pytest.mark.parametrize("action_spec", [DISCRETE, BOX])
def test_train_step_from_stored_states_reproduces_rollout_step(cls, value, action_spec):
    algorithm = _make(cls, value=value, action_spec=action_spec)
    exp = _unroll(algorithm)
    info = _replay(algorithm, exp)
    # Bit for bit: same parameters, same inputs, same states.
    assert torch.equal(info.log_prob, exp.rollout_info.log_prob)
    assert torch.equal(info.value, exp.rollout_info.value)
    # A sequence may start anywhere: its first stored state carries the history.
    tail = _replay(algorithm, exp, start=5)
    assert torch.equal(tail.log_prob, exp.rollout_info.log_prob[5:])
    assert torch.equal(tail.value, exp.rollout_info.value[5:])
    # Starting from zeros instead is wrong where no episode started at that row.
    zeros = exp._replace(state=nest.map_structure(torch.zeros_like, exp.state))
    wrong = _replay(algorithm, zeros, start=5)
    assert not torch.allclose(wrong.log_prob, exp.rollout_info.log_prob[5:])


def test_gradient_flows_into_the_lstm_weights():
    algorithm = _make()
    exp = algorithm.preprocess_experience(_unroll(algorithm, length=9))
    info = _replay(algorithm, exp)
    loss_info = algorithm.calc_loss(nest.map_structure(lambda x: x.reshape(-1), info))
    assert torch.isfinite(loss_info.loss)
    algorithm.optimizer.zero_grad()
    loss_info.loss.backward()
    for network in (algorithm.actor_network, algorithm.value_network):
        for cell in network.encoder.lstm.cells:
            assert cell.weight_hh.grad is not None and cell.weight_hh.grad.abs().sum() > 0
            assert cell.weight_ih.grad.abs().sum() > 0


def test_stateless_algorithm_keeps_empty_states():
    torch.manual_seed(0)
    algorithm = PPOAlgorithm(observation_spec=OBS, action_spec=DISCRETE)
    assert algorithm.rollout_state_spec == () and algorithm.predict_state_spec == ()
    step = algorithm.rollout_step(_time_step(torch.full((3,), StepType.FIRST)), ())
    assert step.state == ()


@pytest.mark.parametrize("use_rollout_state", [True, False])
def test_ppo_trains_on_unrolled_sequences(use_rollout_state):
    """Through the on-policy trainer: the first update recomputes the rollout's
    log-probabilities exactly (all ratios 1, so nothing is clipped even with a tiny clip)
    when sequences start from the stored rollout states, not when they start from zeros."""
    from test_algorithms import _RandomEnv

    from alf.unrollers import SyncUnroller

    algorithm = _make(clip=1e-6, num_epochs=1, use_rollout_state=use_rollout_state)
    unroller = SyncUnroller(
        env=_RandomEnv(3, episode_length=6), policy=Policy(algorithm=algorithm), unroll_length=5
    )
    # No update in between: the overlapping row 0 of the second unroll was computed with
    # the same parameters as the rest.
    unroller.unroll()
    exp = unroller.unroll()  # its first row continues the episodes of the first unroll
    assert nest.flatten(nest.map_structure(lambda x: x[0].abs().sum(), exp.state))[0] > 0
    before = [p.detach().clone() for p in algorithm.parameters()]
    stats = algorithm.train_from_unroll(exp)
    assert stats["skipped"] == 0.0
    assert (float(stats["clip_fraction"]) == 0.0) == use_rollout_state
    lstm = algorithm.actor_network.encoder.lstm.cells[0].weight_hh
    assert not torch.equal(lstm, before[[p is lstm for p in algorithm.parameters()].index(True)])
