"""Tests of alf.networks: encoders, value networks and actor distribution networks."""

import numpy as np
import pytest
import torch
import torch.distributions as td
import torch.nn as nn

from alf.networks import ActorDistributionNetwork, EncodingNetwork, ValueNetwork
from alf.networks.encoding_network import Tanh, make_activation
from alf.tensor_specs import BoundedTensorSpec, TensorSpec, UnsupportedActionSpaceError
from alf.utils.distributions import SquashedNormal, distribution_mode, sample

OBS = TensorSpec((4,))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
BOX = BoundedTensorSpec((2,), torch.float32, np.array([-1.0, 0.0]), np.array([1.0, 10.0]))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_encoding_network_mlp_shapes():
    net = EncodingNetwork(input_spec=OBS, fc_layer_params=(8, 6), activation="relu")
    assert net.output_size == 6
    out = net(torch.randn(5, 4))
    assert out.shape == (5, 6)
    assert (out >= 0).all()  # ends with the ReLU
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(4, 8), (8, 6)]


def test_encoding_network_last_layer_and_no_hidden_layers():
    net = EncodingNetwork(input_spec=OBS, fc_layer_params=(), last_layer_size=3)
    assert net.output_size == 3
    assert net(torch.randn(2, 4)).shape == (2, 3)
    identity = EncodingNetwork(input_spec=OBS, fc_layer_params=())
    x = torch.randn(2, 4)
    assert identity.output_size == 4 and torch.equal(identity(x), x)


def test_encoding_network_flattens_and_concatenates_nested_inputs():
    spec = {"image": TensorSpec((2, 3), torch.uint8), "vec": TensorSpec((5,))}
    net = EncodingNetwork(input_spec=spec, fc_layer_params=(7,))
    obs = {"image": torch.randint(0, 255, (4, 2, 3), dtype=torch.uint8), "vec": torch.randn(4, 5)}
    assert net(obs).shape == (4, 7)
    first = [m for m in net.modules() if isinstance(m, nn.Linear)][0]
    assert first.in_features == 11


def test_encoding_network_single_leaf_in_a_nest_and_integer_input():
    net = EncodingNetwork(input_spec={"x": TensorSpec((2, 2), torch.int64)}, fc_layer_params=(3,))
    assert net({"x": torch.ones(6, 2, 2, dtype=torch.int64)}).shape == (6, 3)


def test_tanh_matches_torch_values_and_gradients():
    x = torch.randn(64, 16) * 3
    assert torch.allclose(Tanh()(x), torch.tanh(x), atol=1e-6)
    a = x.clone().requires_grad_()
    b = x.clone().requires_grad_()
    weight = torch.randn(64, 16)
    (Tanh()(a) * weight).sum().backward()
    (torch.tanh(b) * weight).sum().backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-6)
    # Non-contiguous and float64 inputs fall back to torch.tanh.
    assert torch.allclose(Tanh()(x.t()), torch.tanh(x.t()), atol=1e-6)
    assert Tanh()(x.double()).dtype == torch.float64
    assert isinstance(make_activation("tanh"), Tanh)


def test_value_network_outputs_one_value_per_batch_element():
    net = ValueNetwork(input_spec=OBS, fc_layer_params=(8,))
    values = net(torch.randn(7, 4))
    assert values.shape == (7,)
    values.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_discrete_actor_gives_categorical():
    net = ActorDistributionNetwork(input_spec=OBS, action_spec=DISCRETE, fc_layer_params=(8,))
    dist = net(torch.randn(5, 4))
    assert isinstance(dist, td.Categorical)
    assert dist.logits.shape == (5, 3)
    action = dist.sample()
    assert action.shape == (5,) and action.dtype == torch.int64
    assert ((action >= 0) & (action <= 2)).all()
    assert dist.log_prob(action).shape == (5,)
    assert dist.entropy().shape == (5,)
    mode = distribution_mode(dist)
    assert torch.equal(mode, dist.logits.argmax(-1))
    # Small initial logits: close to uniform.
    assert torch.allclose(dist.probs, torch.full((5, 3), 1 / 3), atol=0.05)


def test_sample_of_categorical_follows_its_probabilities():
    dist = td.Categorical(
        logits=torch.log(torch.tensor([[0.25, 0.75], [0.9, 0.1]])).expand(20000, 2, 2)
    )
    draws = sample(dist)
    assert draws.shape == (20000, 2) and draws.dtype == torch.int64
    freq_of_one = draws.float().mean(0)
    assert freq_of_one[0].item() == pytest.approx(0.75, abs=0.02)
    assert freq_of_one[1].item() == pytest.approx(0.1, abs=0.02)


@pytest.mark.parametrize("state_dependent_std", [False, True])
def test_continuous_actor_gives_diagonal_normal(state_dependent_std):
    net = ActorDistributionNetwork(
        input_spec=OBS,
        action_spec=BOX,
        fc_layer_params=(8,),
        state_dependent_std=state_dependent_std,
        init_std=0.5,
    )
    obs = torch.randn(6, 4)
    dist = net(obs)
    assert dist.batch_shape == (6,) and dist.event_shape == (2,)
    action = dist.sample()
    assert action.shape == (6, 2)
    assert dist.log_prob(action).shape == (6,)
    assert dist.entropy().shape == (6,)
    assert distribution_mode(dist).shape == (6, 2)
    std = dist.base_dist.stddev
    # Initial std is init_std (+ min_std); state-dependent std varies only slightly.
    assert torch.allclose(std, torch.full((6, 2), 0.5 + 1e-3), atol=0.05)
    names = {name for name, _ in net.named_parameters()}
    if state_dependent_std:
        assert "std.weight" in names and "std_param" not in names
    else:
        assert "std_param" in names and not any(n.startswith("std.") for n in names)
        assert torch.equal(std[0], std[1])


@pytest.mark.parametrize("std_transform", ["softplus", "exp"])
def test_std_transform_starts_at_init_std_and_sets_the_gradient_scale(std_transform):
    net = ActorDistributionNetwork(
        input_spec=OBS, action_spec=BOX, fc_layer_params=(8,), init_std=1.0,
        std_transform=std_transform,
    )
    std = net(torch.randn(3, 4)).base_dist.stddev
    assert torch.allclose(std, torch.full((3, 2), 1.0 + 1e-3))
    std.sum().backward()
    # d std / d parameter at std 1: exp' = 1, softplus' = sigmoid(log(e - 1)) = 1 - 1/e
    expected = 1.0 if std_transform == "exp" else 1.0 - np.exp(-1.0)
    assert torch.allclose(net.std_param.grad, torch.full((2,), 3 * expected))


def test_exp_std_of_a_network_output_starts_at_init_std_and_is_bounded():
    net = ActorDistributionNetwork(
        input_spec=OBS, action_spec=BOX, fc_layer_params=(8,), init_std=0.5,
        state_dependent_std=True, std_transform="exp",
    )
    std = net(torch.randn(3, 4)).base_dist.stddev
    assert torch.allclose(std, torch.full((3, 2), 0.5 + 1e-3), atol=0.05)
    with torch.no_grad():
        net.std.bias.fill_(100.0)  # exp(100) would be inf
    assert torch.isfinite(net(torch.randn(3, 4)).base_dist.stddev).all()


def test_unknown_std_transform_is_a_clear_error():
    with pytest.raises(ValueError, match="std_transform = 'log' must be 'softplus' or 'exp'"):
        ActorDistributionNetwork(input_spec=OBS, action_spec=BOX, std_transform="log")


def test_squashed_actor_samples_inside_bounds():
    net = ActorDistributionNetwork(
        input_spec=OBS, action_spec=BOX, fc_layer_params=(8,), squash=True, init_std=3.0
    )
    dist = net(torch.randn(2000, 4))
    assert isinstance(dist, SquashedNormal)
    action = dist.sample()
    assert action.shape == (2000, 2)
    # Right after sampling, log_prob uses the cached pre-tanh value and stays finite.
    assert torch.isfinite(dist.log_prob(action)).all()
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 10.0])
    assert ((action >= low) & (action <= high)).all()
    # Wide std: samples cover most of each interval.
    assert (action.max(0).values - action.min(0).values > 0.9 * (high - low)).all()
    mode = dist.mode
    assert ((mode >= low) & (mode <= high)).all()
    # The mode of a near-zero mean is the middle of the bounds.
    assert torch.allclose(mode, torch.tensor([0.0, 5.0]).expand(2000, 2), atol=0.1)
    assert dist.entropy().shape == (2000,)


def test_squashed_log_prob_of_stored_actions_is_finite():
    net = ActorDistributionNetwork(
        input_spec=OBS, action_spec=BOX, fc_layer_params=(8,), squash=True, init_std=3.0
    )
    obs = torch.randn(2000, 4)
    with torch.no_grad():
        action = net(obs).sample()
        log_prob = net(obs).log_prob(action.clone())
    assert torch.isfinite(log_prob).all()


@pytest.mark.parametrize("shape", [(2, 2), ()])
def test_continuous_actor_samples_have_the_action_shape(shape):
    spec = BoundedTensorSpec(shape, torch.float32, -1.0, 1.0)
    net = ActorDistributionNetwork(input_spec=OBS, action_spec=spec, fc_layer_params=(8,))
    assert net(torch.randn(3, 4)).sample().shape == (3, *shape)


def test_actor_rejects_unbounded_action_specs():
    with pytest.raises(UnsupportedActionSpaceError, match=r"bounded action specs.*TensorSpec"):
        ActorDistributionNetwork(input_spec=OBS, action_spec=TensorSpec((2,)))
    with pytest.raises(UnsupportedActionSpaceError):
        ActorDistributionNetwork(input_spec=OBS, action_spec={"a": TensorSpec((2,))})


def test_unknown_activation_raises():
    with pytest.raises(ValueError, match="swishy"):
        make_activation("swishy")
    with pytest.raises(ValueError, match="Unknown activation"):
        EncodingNetwork(input_spec=OBS, activation="swishy")
    with pytest.raises(ValueError, match="Unknown activation"):
        ValueNetwork(input_spec=OBS, activation="swishy")
