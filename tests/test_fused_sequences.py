"""Fused whole-sequence training of LSTM networks and algorithms gives what stepping one
time step at a time gives, across episode resets: outputs, final states and gradients."""

import functools

import numpy as np
import pytest
import torch

from alf import nest
from alf.algorithms import ActorCriticAlgorithm, PPOAlgorithm
from alf.data_structures import StepType
from alf.networks import (
    ActorDistributionNetwork,
    EncodingNetwork,
    ValueNetwork,
    unroll_network,
)
from alf.tensor_specs import BoundedTensorSpec, TensorSpec

OBS = TensorSpec((5,))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
BOX = BoundedTensorSpec((2,), torch.float32, -np.ones(2), np.ones(2))
TOL = {"atol": 1e-6, "rtol": 1e-5}


def _random_state(spec, batch):
    return nest.map_structure(lambda s: torch.randn(batch, *s.shape), spec)


def _step_along(net, inputs, state, first):
    """The reference: ``net.step`` row by row, zeroing the state where ``first``."""
    outputs = []
    for x, reset in zip(inputs, first, strict=True):
        state = nest.zero_rows(state, ~reset)
        out, state = net.step(x, state)
        outputs.append(out)
    return torch.cat(outputs), state


def _firsts(length, batch, pattern, generator):
    if pattern == "none":
        return torch.zeros(length, batch, dtype=torch.bool)
    if pattern == "row0":  # some sequences start an episode at row 0, none later
        first = torch.zeros(length, batch, dtype=torch.bool)
        first[0, ::2] = True
        return first
    if pattern == "every_step":
        return torch.ones(length, batch, dtype=torch.bool)
    return torch.rand(length, batch, generator=generator) < 0.3


@pytest.mark.parametrize("pattern", ["none", "row0", "random", "every_step"])
@pytest.mark.parametrize("hidden", [6, (6, 4)])
def test_unroll_matches_stepping_outputs_states_and_gradients(pattern, hidden):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    net = EncodingNetwork(
        input_spec=OBS, fc_layer_params=(8,), lstm_hidden_size=hidden, last_layer_size=3
    )
    length, batch = 11, 5
    inputs = torch.randn(length, batch, 5)
    first = _firsts(length, batch, pattern, generator)
    state = _random_state(net.state_spec, batch)

    expected, expected_state = _step_along(net, inputs, state, first)
    expected_grads = torch.autograd.grad(expected.square().sum(), list(net.parameters()))
    out, final_state = net.unroll(inputs, state, first)
    grads = torch.autograd.grad(out.square().sum(), list(net.parameters()))

    assert out.shape == (length * batch, 3)
    torch.testing.assert_close(out, expected, **TOL)
    for got, want in zip(nest.flatten(final_state), nest.flatten(expected_state), strict=True):
        torch.testing.assert_close(got, want, **TOL)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_unroll_of_one_step_and_of_one_sequence():
    torch.manual_seed(0)
    net = EncodingNetwork(input_spec=OBS, fc_layer_params=(), lstm_hidden_size=4)
    state = _random_state(net.state_spec, 1)
    for length in (1, 6):
        inputs = torch.randn(length, 1, 5)
        first = torch.zeros(length, 1, dtype=torch.bool)
        first[length // 2, 0] = True
        expected, _ = _step_along(net, inputs, state, first)
        torch.testing.assert_close(net.unroll(inputs, state, first)[0], expected, **TOL)


def test_unroll_network_of_stateless_and_recurrent_networks():
    torch.manual_seed(0)
    first = torch.zeros(4, 3, dtype=torch.bool)
    inputs = torch.randn(4, 3, 5)
    mlp = ValueNetwork(input_spec=OBS)
    values, state = unroll_network(mlp, inputs, (), first)
    assert state == ()
    torch.testing.assert_close(values, mlp(inputs.reshape(12, 5)))
    actor = ActorDistributionNetwork(input_spec=OBS, action_spec=DISCRETE, lstm_hidden_size=4)
    dist, state = unroll_network(actor, inputs, _random_state(actor.state_spec, 3), first)
    assert dist.logits.shape == (12, 3) and state[0][0].shape == (3, 4)


LSTM_ACTOR = functools.partial(ActorDistributionNetwork, fc_layer_params=(8,), lstm_hidden_size=6)
LSTM_VALUE = functools.partial(ValueNetwork, fc_layer_params=(8,), lstm_hidden_size=5)
MLP_VALUE = functools.partial(ValueNetwork, fc_layer_params=(8,))


@pytest.mark.parametrize("cls", [ActorCriticAlgorithm, PPOAlgorithm])
@pytest.mark.parametrize("value", [LSTM_VALUE, MLP_VALUE])
@pytest.mark.parametrize("action_spec", [DISCRETE, BOX])
def test_train_sequence_matches_step_through_sequence(cls, value, action_spec):
    """On a collected trajectory with episode ends inside it (every environment's
    episodes are 3 + b steps long), from the stored states and from random ones."""
    from test_actor_critic_recurrent import _unroll

    torch.manual_seed(0)
    algorithm = cls(
        observation_spec=BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4)),
        action_spec=action_spec,
        actor_network_ctor=LSTM_ACTOR,
        value_network_ctor=value,
    )
    exp = _unroll(algorithm, length=13, batch=3)
    assert (exp.step_type[1:] == StepType.FIRST).any()
    for start in (
        nest.map_structure(lambda x: x[0], exp.state),
        _random_state(algorithm.train_state_spec, 3),
    ):
        fused = algorithm.train_sequence(exp, start)
        stepped = algorithm.step_through_sequence(exp, start)
        for name in ("log_prob", "entropy", "value"):
            got, want = getattr(fused.info, name), getattr(stepped.info, name)
            assert got.shape == want.shape == (13, 3)
            torch.testing.assert_close(got, want, **TOL)
        for got, want in zip(nest.flatten(fused.state), nest.flatten(stepped.state), strict=True):
            torch.testing.assert_close(got, want, **TOL)
    # The stored states reproduce the rollout's log-probabilities and values.
    torch.testing.assert_close(fused.info.log_prob, stepped.info.log_prob, **TOL)
    start = nest.map_structure(lambda x: x[0], exp.state)
    info = algorithm.train_sequence(exp, start).info
    torch.testing.assert_close(info.log_prob, exp.rollout_info.log_prob, **TOL)
    torch.testing.assert_close(info.value, exp.rollout_info.value, **TOL)


def test_fused_and_stepped_training_make_the_same_update():
    """``fused_sequences`` switches the path of ``train_from_unroll``; both make the same
    updates (a few epochs of mini-batches of shuffled sequences)."""
    from test_actor_critic_recurrent import _unroll

    params = {}
    for fused in (True, False):
        torch.manual_seed(0)
        algorithm = PPOAlgorithm(
            observation_spec=BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4)),
            action_spec=DISCRETE,
            actor_network_ctor=LSTM_ACTOR,
            value_network_ctor=LSTM_VALUE,
            num_epochs=2,
            mini_batch_size=12,
            mini_batch_length=4,
            fused_sequences=fused,
        )
        exp = _unroll(algorithm, length=13, batch=3)  # [T + 1, B] with T = 12
        torch.manual_seed(2)
        stats = algorithm.train_from_unroll(exp)
        assert stats["skipped"] == 0.0
        params[fused] = [p.detach().clone() for p in algorithm.parameters()]
    for got, want in zip(params[True], params[False], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
