"""Tests of EnsembleMLP and the networks built on it (critics, Q networks, deterministic
actors), and of SquashedNormal.rsample_with_log_prob."""

import math

import numpy as np
import pytest
import torch
import torch.distributions as td
import torch.nn as nn

from alf.networks.actor_network import ActorNetwork
from alf.networks.critic_network import CriticNetwork, QNetwork, flatten_batch
from alf.networks.ensemble import EnsembleMLP
from alf.tensor_specs import BoundedTensorSpec, TensorSpec, UnsupportedActionSpaceError
from alf.utils.distributions import SquashedNormal

OBS = TensorSpec((4,))
BOX = BoundedTensorSpec((2,), torch.float32, np.array([-2.0, 0.0]), np.array([2.0, 1.0]))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _replica_as_sequential(mlp: EnsembleMLP, r: int) -> nn.Sequential:
    """Replica ``r`` of ``mlp`` rebuilt as an ``nn.Linear``/``nn.ReLU`` stack."""
    layers = []
    for i, (weight, bias) in enumerate(zip(mlp.weights, mlp.biases, strict=True)):
        fan_in, fan_out = weight.shape[1:]
        linear = nn.Linear(fan_in, fan_out)
        with torch.no_grad():
            linear.weight.copy_(weight[r].T)
            linear.bias.copy_(bias[r, 0])
        layers.append(linear)
        if i < len(mlp.weights) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _mlp(num_replicas=3):
    return EnsembleMLP(
        input_size=5, fc_layer_params=(8, 6), output_size=2, num_replicas=num_replicas
    )


# ----------------------------------------------------------------------------- EnsembleMLP


def test_ensemble_mlp_output_shape_and_parameter_shapes():
    """A shared ``[B, in]`` input gives ``[R, B, out]``; layer weights are ``[R, in, out]``."""
    mlp = _mlp()
    assert mlp(torch.randn(7, 5)).shape == (3, 7, 2)
    assert [tuple(w.shape) for w in mlp.weights] == [(3, 5, 8), (3, 8, 6), (3, 6, 2)]
    assert [tuple(b.shape) for b in mlp.biases] == [(3, 1, 8), (3, 1, 6), (3, 1, 2)]


def test_ensemble_mlp_each_replica_equals_a_linear_relu_stack():
    """Every replica computes exactly what an nn.Linear/ReLU stack with its weights does."""
    mlp = _mlp()
    x = torch.randn(7, 5) * 3
    out = mlp(x)
    for r in range(3):
        assert torch.allclose(out[r], _replica_as_sequential(mlp, r)(x), atol=1e-5)


def test_ensemble_mlp_replicas_are_initialised_independently():
    """Replicas start with different weights, within nn.Linear's ``±1/sqrt(fan_in)``."""
    mlp = _mlp()
    for w, b in zip(mlp.weights, mlp.biases, strict=True):
        bound = 1 / math.sqrt(w.shape[1])
        assert w.abs().max() <= bound and b.abs().max() <= bound
        assert not torch.equal(w[0], w[1]) and not torch.equal(w[1], w[2])


def test_ensemble_mlp_perturbing_one_replica_changes_only_its_output():
    """Changing replica 0's weights changes replica 0's output and no other."""
    mlp = _mlp()
    x = torch.randn(7, 5)
    before = mlp(x).detach()
    with torch.no_grad():
        mlp.weights[0][0] += 0.5
        mlp.biases[-1][0] += 1.0
    after = mlp(x).detach()
    assert not torch.allclose(before[0], after[0])
    assert torch.allclose(before[1:], after[1:], atol=0, rtol=0)


def test_ensemble_mlp_gradients_reach_every_replica_and_only_their_own():
    """A loss on all outputs gives every replica's parameters a gradient; a loss on
    replica 1's output alone gives the other replicas none."""
    mlp = _mlp()
    x = torch.randn(7, 5)
    mlp(x).square().sum().backward()
    for p in [*mlp.weights, *mlp.biases]:
        assert p.grad is not None
        for r in range(3):
            assert p.grad[r].abs().sum() > 0
    mlp.zero_grad()
    mlp(x)[1].square().sum().backward()
    for p in [*mlp.weights, *mlp.biases]:
        assert p.grad[1].abs().sum() > 0
        assert (p.grad[0] == 0).all() and (p.grad[2] == 0).all()


def test_ensemble_mlp_per_replica_inputs():
    """A ``[R, B, in]`` input feeds slice ``r`` to replica ``r``."""
    mlp = _mlp()
    x = torch.randn(3, 7, 5)
    out = mlp(x)
    assert out.shape == (3, 7, 2)
    for r in range(3):
        assert torch.allclose(out[r], _replica_as_sequential(mlp, r)(x[r]), atol=1e-5)
    shared = mlp(x[0])
    assert torch.allclose(out[0], shared[0], atol=1e-6)
    assert not torch.allclose(out[1], shared[1])


def test_ensemble_mlp_no_hidden_layers_and_bad_replicas():
    """With no hidden layer it is one affine map per replica; 0 replicas is an error."""
    mlp = EnsembleMLP(input_size=3, fc_layer_params=(), output_size=2, num_replicas=2)
    x = torch.randn(4, 3)
    expected = torch.stack([x @ mlp.weights[0][r] + mlp.biases[0][r] for r in range(2)])
    assert torch.allclose(mlp(x), expected, atol=1e-6)
    with pytest.raises(ValueError):
        EnsembleMLP(input_size=3, fc_layer_params=(4,), output_size=1, num_replicas=0)


# ------------------------------------------------------------------------- CriticNetwork


def test_critic_network_output_is_batch_by_replicas():
    """``[B, obs]``, ``[B, act]`` -> ``[B, R]``, column r being replica r on the
    concatenated ``(observation, action)``."""
    critic = CriticNetwork(input_spec=(OBS, BOX), fc_layer_params=(16,), num_replicas=2)
    obs, action = torch.randn(5, 4), torch.rand(5, 2)
    q = critic(obs, action)
    assert q.shape == (5, 2)
    x = torch.cat([obs, action], dim=-1)
    for r in range(2):
        assert torch.allclose(q[:, r], _replica_as_sequential(critic.mlp, r)(x)[:, 0], atol=1e-5)


def test_critic_network_nested_dict_observation():
    """A dict observation with a uint8 image leaf is flattened (keys in sorted order),
    converted to float and concatenated with the action."""
    obs_spec = {"vec": TensorSpec((3,)), "image": TensorSpec((2, 2), torch.uint8)}
    critic = CriticNetwork(input_spec=(obs_spec, BOX), fc_layer_params=(8, 8), num_replicas=3)
    assert critic.mlp.weights[0].shape == (3, 3 + 4 + 2, 8)
    obs = {
        "vec": torch.randn(6, 3),
        "image": torch.randint(0, 255, (6, 2, 2), dtype=torch.uint8),
    }
    action = torch.rand(6, 2)
    q = critic(obs, action)
    assert q.shape == (6, 3) and q.dtype == torch.float32
    x = torch.cat([obs["image"].reshape(6, 4).float(), obs["vec"], action], dim=-1)
    assert torch.equal(flatten_batch((obs, action)), x)
    for r in range(3):
        assert torch.allclose(q[:, r], _replica_as_sequential(critic.mlp, r)(x)[:, 0], atol=1e-4)


def test_q_network_output_shape_and_values():
    """``[B, obs]`` -> ``[B, R, num_actions]``; entry ``[:, r]`` is replica r's output."""
    spec = BoundedTensorSpec((), torch.int64, 0, 4)
    qnet = QNetwork(input_spec=OBS, action_spec=spec, fc_layer_params=(8,), num_replicas=2)
    obs = torch.randn(3, 4)
    q = qnet(obs)
    assert q.shape == (3, 2, 5)
    for r in range(2):
        assert torch.allclose(q[:, r], _replica_as_sequential(qnet.mlp, r)(obs), atol=1e-5)


@pytest.mark.parametrize(
    "action_spec",
    [
        BOX,
        BoundedTensorSpec((), torch.float32, 0.0, 3.0),
        BoundedTensorSpec((2,), torch.int64, 0, 3),
    ],
    ids=["box", "scalar-float", "multi-discrete"],
)
def test_q_network_rejects_unsupported_action_specs(action_spec):
    """Continuous or non-scalar action specs raise UnsupportedActionSpaceError."""
    with pytest.raises(UnsupportedActionSpaceError, match="QNetwork needs a scalar Discrete"):
        QNetwork(input_spec=OBS, action_spec=action_spec, fc_layer_params=(4,))


@pytest.mark.parametrize("start", [1, -1])
def test_q_network_takes_a_discrete_with_a_start(start):
    """Output index ``i`` is the action ``start + i``."""
    spec = BoundedTensorSpec((), torch.int64, start, start + 3)
    qnet = QNetwork(input_spec=OBS, action_spec=spec, fc_layer_params=(4,))
    assert qnet.offset == start and qnet.num_actions == 4


# -------------------------------------------------------------------------- ActorNetwork


def test_actor_network_actions_stay_within_asymmetric_bounds():
    """Random huge observations saturate tanh, yet every action stays in
    ``[low, high]`` per dimension, and both bounds are reached."""
    actor = ActorNetwork(input_spec=OBS, action_spec=BOX, fc_layer_params=(16, 16))
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actions = actor(torch.randn(2000, 4) * 1e6)
    assert actions.shape == (2000, 2)
    assert torch.isfinite(actions).all()
    assert (actions >= low).all() and (actions <= high).all()
    assert torch.equal(actions.min(0).values, low) and torch.equal(actions.max(0).values, high)
    moderate = actor(torch.randn(100, 4))
    assert (moderate > low).all() and (moderate < high).all()


def test_actor_network_matrix_action_shape_and_centre():
    """A ``(2, 3)`` action space gives ``[B, 2, 3]`` actions; a zero MLP output maps to
    the middle of the bounds."""
    spec = BoundedTensorSpec((2, 3), torch.float32, -1.0, np.arange(6.0).reshape(2, 3))
    actor = ActorNetwork(input_spec=OBS, action_spec=spec, fc_layer_params=(8,))
    assert actor(torch.randn(5, 4)).shape == (5, 2, 3)
    with torch.no_grad():
        for p in actor.mlp.parameters():
            p.zero_()
    expected = (torch.arange(6.0).reshape(2, 3) - 1) / 2
    assert torch.allclose(actor(torch.randn(5, 4)), expected.expand(5, 2, 3))


def test_actor_network_saturated_actions_never_leave_unround_bounds():
    """With bounds that are not exactly representable, saturated actions still stay in
    ``[low, high]``."""
    spec = BoundedTensorSpec((2,), torch.float32, np.array([-0.7, 0.3]), np.array([0.1, 1.0]))
    actor = ActorNetwork(input_spec=OBS, action_spec=spec, fc_layer_params=(4,))
    low, high = torch.tensor([-0.7, 0.3]), torch.tensor([0.1, 1.0])
    with torch.no_grad():
        for p in actor.mlp.parameters():
            p.zero_()
    for sign in (1.0, -1.0):
        with torch.no_grad():
            actor.mlp.biases[-1].fill_(sign * 100.0)
        actions = actor(torch.randn(3, 4))
        assert (actions >= low).all() and (actions <= high).all()


@pytest.mark.parametrize(
    "action_spec",
    [
        BoundedTensorSpec((), torch.int64, 0, 3),
        BoundedTensorSpec((2,), torch.int64, 0, 1),
        TensorSpec((2,)),
        BoundedTensorSpec((2,), torch.float32, np.array([-np.inf, 0.0]), np.array([1.0, 1.0])),
        BoundedTensorSpec((2,), torch.float32, -1.0, np.inf),
    ],
    ids=["discrete", "multi-discrete", "unbounded-spec", "inf-low", "inf-high"],
)
def test_actor_network_rejects_discrete_and_unbounded_specs(action_spec):
    """Discrete action specs and infinite (or missing) bounds raise ValueError."""
    with pytest.raises(ValueError):
        ActorNetwork(input_spec=OBS, action_spec=action_spec, fc_layer_params=(4,))


# ----------------------------------------------------------- SquashedNormal.rsample_with_log_prob

LOW = torch.tensor([-2.0, 0.0, -1.0])
HIGH = torch.tensor([2.0, 1.0, 3.0])


def _reference_log_prob(loc, scale, pre_image):
    """float64 log-density of ``mid + half * tanh(x)``, ``x ~ N(loc, scale)``, at the
    action of ``pre_image``: ``log N(x) - sum(log(half) - 2 log cosh(x))``."""
    loc, scale, x = (t.double() for t in (loc, scale, pre_image))
    half = ((HIGH - LOW) / 2).double()
    normal = td.Independent(td.Normal(loc, scale), 1).log_prob(x)
    return normal - (torch.log(half) - 2 * torch.log(torch.cosh(x))).sum(-1)


def test_squashed_normal_rsample_log_prob_matches_log_prob_away_from_bounds():
    """Away from the bounds the log-probability from the pre-image agrees with
    ``log_prob(action)`` (which inverts tanh) and with a float64 reference."""
    loc = torch.randn(512, 3) * 0.5
    scale = torch.rand(512, 3) * 0.5 + 0.1
    dist = SquashedNormal(loc, scale, LOW, HIGH)
    torch.manual_seed(1)
    action, log_prob = dist.rsample_with_log_prob()
    torch.manual_seed(1)
    pre_image = dist.base_normal.rsample()
    assert action.shape == (512, 3) and log_prob.shape == (512,)
    assert torch.allclose(action, (HIGH + LOW) / 2 + (HIGH - LOW) / 2 * torch.tanh(pre_image))
    inside = (torch.tanh(pre_image).abs() < 0.99).all(-1)
    assert inside.sum() > 400
    assert torch.allclose(log_prob[inside], dist.log_prob(action)[inside], atol=1e-4, rtol=0)
    reference = _reference_log_prob(loc, scale, pre_image)
    assert torch.allclose(log_prob.double(), reference, atol=1e-4, rtol=1e-6)


def test_squashed_normal_rsample_log_prob_finite_when_tanh_saturates():
    """With a pre-image so large that tanh rounds to +-1, the action sits exactly on a
    bound and the log-probability stays finite and correct."""
    loc = torch.tensor([[30.0, -30.0, 25.0]]).expand(64, 3)
    scale = torch.full((64, 3), 0.5)
    dist = SquashedNormal(loc, scale, LOW, HIGH)
    torch.manual_seed(2)
    action, log_prob = dist.rsample_with_log_prob()
    torch.manual_seed(2)
    pre_image = dist.base_normal.rsample()
    assert torch.equal(action, torch.stack([HIGH[0], LOW[1], HIGH[2]]).expand(64, 3))
    assert torch.isfinite(log_prob).all()
    reference = _reference_log_prob(loc, scale, pre_image)
    assert torch.allclose(log_prob.double(), reference, rtol=1e-5)
    assert torch.isfinite(dist.log_prob(action)).all()


@pytest.mark.parametrize("loc_scale", [0.5, 40.0], ids=["moderate", "saturated"])
def test_squashed_normal_rsample_log_prob_gradients_reach_loc_and_scale(loc_scale):
    """Both the action and its log-probability are differentiable in ``loc`` and
    ``scale``, with finite non-zero gradients even when tanh saturates."""
    loc = (torch.randn(16, 3) * loc_scale).requires_grad_()
    raw_scale = torch.full((16, 3), -1.0, requires_grad=True)
    dist = SquashedNormal(loc, raw_scale.exp(), LOW, HIGH)
    action, log_prob = dist.rsample_with_log_prob()
    log_prob.sum().backward(retain_graph=True)
    for t in (loc, raw_scale):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    if loc_scale < 1:
        loc.grad, raw_scale.grad = None, None
        action.sum().backward()
        assert loc.grad.abs().min() > 0 and raw_scale.grad.abs().sum() > 0
