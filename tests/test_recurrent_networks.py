"""Tests of LSTM encoders: state specs, stepping against torch's LSTM, state resets, and
the clear errors of algorithms that do not support recurrent networks."""

import functools

import numpy as np
import pytest
import torch
import torch.nn as nn

from alf import nest
from alf.algorithms import (
    AppoAlgorithm,
    DdpgAlgorithm,
    DqnAlgorithm,
    SacAlgorithm,
    Td3Algorithm,
)
from alf.config import load_config
from alf.networks import (
    ActorDistributionNetwork,
    EncodingNetwork,
    QNetwork,
    ValueNetwork,
    is_recurrent,
    require_stateless,
    step_network,
)
from alf.tensor_specs import BoundedTensorSpec, TensorSpec

OBS = TensorSpec((5,))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
BOX = BoundedTensorSpec((2,), torch.float32, -np.ones(2), np.ones(2))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _zeros(spec, batch):
    return nest.map_structure(lambda s: s.zeros((batch,)), spec)


def _run(net, inputs, state):
    """Steps ``net`` along ``[T, B, ...]`` inputs; returns ``[T, B, out]`` and the state."""
    outputs = []
    for x in inputs:
        out, state = net.step(x, state)
        outputs.append(out)
    return torch.stack(outputs), state


def test_state_spec_of_one_and_stacked_lstm_layers():
    net = EncodingNetwork(input_spec=OBS, fc_layer_params=(8,), lstm_hidden_size=6)
    h = TensorSpec((6,), torch.float32)
    assert net.state_spec == ((h, h),)
    assert net.output_size == 6
    stacked = EncodingNetwork(input_spec=OBS, fc_layer_params=(8,), lstm_hidden_size=(6, 4))
    assert stacked.state_spec == ((h, h), (TensorSpec((4,)), TensorSpec((4,))))
    assert stacked.output_size == 4
    assert EncodingNetwork(input_spec=OBS).state_spec == ()
    assert is_recurrent(net) and not is_recurrent(EncodingNetwork(input_spec=OBS))


def test_step_matches_torch_lstm_on_a_sequence():
    net = EncodingNetwork(input_spec=OBS, fc_layer_params=(), lstm_hidden_size=(6, 6))
    reference = nn.LSTM(input_size=5, hidden_size=6, num_layers=2)
    with torch.no_grad():
        for k, cell in enumerate(net.lstm.cells):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(reference, f"{name}_l{k}").copy_(getattr(cell, name))
    inputs = torch.randn(7, 3, 5)
    outputs, (last_layer1, last_layer2) = _run(net, inputs, _zeros(net.state_spec, 3))
    expected, (h_n, c_n) = reference(inputs)
    torch.testing.assert_close(outputs, expected)
    torch.testing.assert_close(torch.stack([last_layer1[0], last_layer2[0]]), h_n)
    torch.testing.assert_close(torch.stack([last_layer1[1], last_layer2[1]]), c_n)
    with torch.no_grad():  # the inference path gives the same values
        torch.testing.assert_close(_run(net, inputs, _zeros(net.state_spec, 3))[0], expected)


def test_fc_layers_before_and_last_layer_after_the_lstm():
    net = EncodingNetwork(
        input_spec=OBS, fc_layer_params=(8,), lstm_hidden_size=6, last_layer_size=2
    )
    assert net.output_size == 2
    x = torch.randn(4, 5)
    state = _zeros(net.state_spec, 4)
    out, new_state = net.step(x, state)
    h, c = net.lstm.cells[0](net.mlp(x), state[0])
    torch.testing.assert_close(out, net.post(h))
    torch.testing.assert_close(new_state[0][1], c)


def test_zero_state_restarts_the_sequence():
    net = EncodingNetwork(input_spec=OBS, fc_layer_params=(8,), lstm_hidden_size=6)
    first, second = torch.randn(4, 3, 5), torch.randn(3, 3, 5)
    fresh, _ = _run(net, second, _zeros(net.state_spec, 3))
    _, state = _run(net, first, _zeros(net.state_spec, 3))
    continued, _ = _run(net, second, state)
    assert not torch.allclose(continued[0], fresh[0])
    # Reset the rows of environments 0 and 2 (as an unroller does at FIRST steps).
    keep = torch.tensor([False, True, False])
    state = nest.zero_rows(state, keep)
    mixed, _ = _run(net, second, state)
    torch.testing.assert_close(mixed[:, [0, 2]], fresh[:, [0, 2]])
    torch.testing.assert_close(mixed[:, 1], continued[:, 1])


def test_recurrent_network_must_be_stepped():
    net = EncodingNetwork(input_spec=OBS, lstm_hidden_size=4)
    with pytest.raises(TypeError, match="step"):
        net(torch.randn(2, 5))


def test_stateless_networks_step_with_an_empty_state():
    for net in (
        EncodingNetwork(input_spec=OBS),
        ValueNetwork(input_spec=OBS),
        ActorDistributionNetwork(input_spec=OBS, action_spec=DISCRETE),
    ):
        x = torch.randn(3, 5)
        out, state = net.step(x, ())
        assert state == () and net.state_spec == ()
        expected = net(x)
        if isinstance(expected, torch.distributions.Distribution):
            out, expected = out.logits, expected.logits
        torch.testing.assert_close(out, expected)
        assert step_network(net, x, ())[1] == ()


def test_recurrent_actor_and_value_networks():
    actor = ActorDistributionNetwork(
        input_spec=OBS, action_spec=BOX, fc_layer_params=(8,), lstm_hidden_size=6
    )
    value = ValueNetwork(input_spec=OBS, fc_layer_params=(8,), lstm_hidden_size=(6, 3))
    assert actor.state_spec == ((TensorSpec((6,)), TensorSpec((6,))),)
    assert len(value.state_spec) == 2
    x = torch.randn(4, 5)
    dist, actor_state = actor.step(x, _zeros(actor.state_spec, 4))
    assert dist.batch_shape == (4,) and dist.event_shape == (2,)
    values, value_state = value.step(x, _zeros(value.state_spec, 4))
    assert values.shape == (4,) and value_state[1][0].shape == (4, 3)
    (dist.log_prob(dist.sample()).sum() + values.sum()).backward()
    for net in (actor, value):
        assert all(cell.weight_hh.grad is not None for cell in net.encoder.lstm.cells)


def test_gin_lstm_binding_reaches_the_actor_and_value_networks():
    load_config(None, ["EncodingNetwork.lstm_hidden_size = 16"])
    actor = ActorDistributionNetwork(input_spec=OBS, action_spec=DISCRETE)
    value = ValueNetwork(input_spec=OBS)
    assert actor.state_spec == value.state_spec == ((TensorSpec((16,)), TensorSpec((16,))),)


# ---------------------------------------------------------------------- clear refusals

RECURRENT_ACTOR = functools.partial(ActorDistributionNetwork, lstm_hidden_size=4)


def test_require_stateless_names_the_network():
    with pytest.raises(ValueError, match="MyAlgorithm.*actor_network.*on-policy actor-critic"):
        require_stateless(
            "MyAlgorithm", actor_network=RECURRENT_ACTOR(input_spec=OBS, action_spec=DISCRETE)
        )
    require_stateless(
        "MyAlgorithm", actor_network=ActorDistributionNetwork(input_spec=OBS, action_spec=DISCRETE)
    )


def test_appo_accepts_recurrent_networks():
    for kwargs in (
        {"actor_network_ctor": RECURRENT_ACTOR},
        {"value_network_ctor": functools.partial(ValueNetwork, lstm_hidden_size=4)},
    ):
        algorithm = AppoAlgorithm(observation_spec=OBS, action_spec=DISCRETE, **kwargs)
        assert algorithm.is_recurrent


def test_sac_refuses_a_recurrent_actor():
    with pytest.raises(ValueError, match="SacAlgorithm does not support recurrent"):
        SacAlgorithm(observation_spec=OBS, action_spec=BOX, actor_network_ctor=RECURRENT_ACTOR)


@pytest.mark.parametrize(
    "cls, action_spec",
    [
        (DqnAlgorithm, DISCRETE),
        (SacAlgorithm, DISCRETE),
        (SacAlgorithm, BOX),
        (DdpgAlgorithm, BOX),
        (Td3Algorithm, BOX),
    ],
)
def test_off_policy_algorithms_refuse_a_gin_bound_lstm(cls, action_spec):
    load_config(None, ["EncodingNetwork.lstm_hidden_size = 8"])
    with pytest.raises(ValueError, match="on-policy actor-critic algorithms"):
        cls(observation_spec=OBS, action_spec=action_spec)


def test_q_network_refuses_a_recurrent_encoder():
    load_config(None, ["EncodingNetwork.lstm_hidden_size = 8"])
    with pytest.raises(ValueError, match="QNetwork does not support recurrent"):
        QNetwork(input_spec=OBS, action_spec=DISCRETE)
