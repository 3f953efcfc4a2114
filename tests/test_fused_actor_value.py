"""The fused actor + value evaluation of ``ActorCriticAlgorithm.rollout_step``: the same
parameters, checkpoints and results (to float tolerance) as the two networks called one
after the other, and the unfused path wherever fusing does not apply."""

from __future__ import annotations

import copy
import functools
import pickle

import numpy as np
import pytest
import torch
from helpers_algorithms import mid_time_step

from alf import nest
from alf.algorithms.policy import Policy
from alf.algorithms.ppo import PPOAlgorithm
from alf.data_structures import TimeStep
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.networks.fused_actor_value import FusedActorValue, fuse_actor_value, why_not_fusable
from alf.tensor_specs import BoundedTensorSpec, TensorSpec
from alf.utils.distributions import _gumbel_argmax

OBS = TensorSpec((5,), torch.float32)
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
CONTINUOUS = BoundedTensorSpec((2,), torch.float32, -1.0, 1.0)


def _ppo(
    *,
    fused: bool,
    numpy: bool = True,
    action_spec=DISCRETE,
    observation_spec=OBS,
    actor_layers=(16, 16),
    value_layers=(16, 16),
    activation="tanh",
    **actor_kwargs,
) -> PPOAlgorithm:
    torch.manual_seed(0)
    return PPOAlgorithm(
        observation_spec=observation_spec,
        action_spec=action_spec,
        fused_rollout=fused,
        numpy_rollout=numpy,
        actor_network_ctor=functools.partial(
            ActorDistributionNetwork,
            fc_layer_params=actor_layers,
            activation=activation,
            **actor_kwargs,
        ),
        value_network_ctor=functools.partial(
            ValueNetwork, fc_layer_params=value_layers, activation=activation
        ),
    )


def _time_step(batch: int = 7, observation=None) -> TimeStep:
    if observation is None:
        observation = torch.randn(batch, *OBS.shape)
    return mid_time_step(observation, batch)


def _rollout(algorithm: PPOAlgorithm, time_step: TimeStep, seed: int = 1):
    """``rollout_step`` as a collector calls it: in a session, without autograd."""
    torch.manual_seed(seed)
    with torch.no_grad(), algorithm.rollout_session():
        return algorithm.rollout_step(time_step, ())


def _assert_same_rollout(fused: PPOAlgorithm, plain: PPOAlgorithm, time_step: TimeStep) -> None:
    a, b = _rollout(fused, time_step), _rollout(plain, time_step)
    for x, y in zip(nest.flatten(a.output), nest.flatten(b.output), strict=True):
        if x.dtype.is_floating_point:  # a continuous sample: loc + scale * noise
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(x, y)
    torch.testing.assert_close(a.info.value, b.info.value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.info.log_prob, b.info.log_prob, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"actor_layers": (8,), "value_layers": (8,)},
        {"actor_layers": (8, 16, 4), "value_layers": (8, 16, 4), "activation": "relu"},
        {"action_spec": CONTINUOUS},
        {"action_spec": CONTINUOUS, "state_dependent_std": True, "squash": True},
        {"action_spec": BoundedTensorSpec((3,), torch.int64, 0, 4)},  # MultiDiscrete
    ],
)
@pytest.mark.parametrize("numpy", [True, False])
def test_fused_rollout_matches_the_two_networks(options, numpy):
    fused, plain = _ppo(fused=True, numpy=numpy, **options), _ppo(fused=False, **options)
    assert fused.fused_rollout and not plain.fused_rollout
    for batch in (1, 7):
        _assert_same_rollout(fused, plain, _time_step(batch))


SCALAR_BOX = BoundedTensorSpec((), torch.float32, -2.0, 2.0)
MATRIX_BOX = BoundedTensorSpec((2, 3), torch.float32, -1.0, 1.0)


@pytest.mark.parametrize(
    ("options", "in_numpy"),
    [
        ({}, True),
        ({"action_spec": BoundedTensorSpec((), torch.int64, -1, 3)}, True),  # start -1
        ({"activation": "relu", "actor_layers": (8, 16, 4), "value_layers": (8, 16, 4)}, True),
        ({"action_spec": CONTINUOUS}, True),
        ({"action_spec": CONTINUOUS, "std_transform": "exp", "min_std": 0.1}, True),
        ({"action_spec": SCALAR_BOX}, True),
        ({"action_spec": MATRIX_BOX}, True),
        ({"activation": "elu"}, False),
        ({"action_spec": CONTINUOUS, "squash": True}, False),
        ({"action_spec": CONTINUOUS, "state_dependent_std": True}, False),
        ({"action_spec": BoundedTensorSpec((3,), torch.int64, 0, 4)}, False),
        ({"action_spec": {"a": DISCRETE, "b": CONTINUOUS}}, False),
    ],
)
def test_numpy_rollout_where_it_applies(options, in_numpy):
    """The numpy path is taken exactly where it can be, and gives the torch path's
    actions, log-probabilities and values."""
    fused, plain = _ppo(fused=True, **options), _ppo(fused=False, **options)
    for batch in (1, 7, 16):
        _assert_same_rollout(fused, plain, _time_step(batch))
    with torch.no_grad(), fused.rollout_session():
        fused.rollout_step(_time_step(), ())
        assert bool(fused._fused._numpy_eval) == in_numpy
    assert fused._fused._numpy_eval is None  # dropped with the session


def test_numpy_rollout_off_and_float64_use_torch():
    algorithm = _ppo(fused=True, numpy=False)
    with torch.no_grad(), algorithm.rollout_session():
        algorithm.rollout_step(_time_step(), ())
        assert algorithm._fused._numpy_eval is False
    double, plain = _ppo(fused=True).double(), _ppo(fused=False).double()
    time_step = _time_step()._replace(observation=torch.randn(7, *OBS.shape).double())
    _assert_same_rollout(double, plain, time_step)
    assert _rollout(double, time_step).info.value.dtype == torch.float64
    with torch.no_grad(), double.rollout_session():
        double.rollout_step(time_step, ())
        assert double._fused._numpy_eval is False


def test_numpy_rollout_dtypes_and_shapes():
    for spec, action_shape, action_dtype in (
        (DISCRETE, (7,), torch.int64),
        (CONTINUOUS, (7, 2), torch.float32),
        (SCALAR_BOX, (7,), torch.float32),
        (MATRIX_BOX, (7, 2, 3), torch.float32),
    ):
        step = _rollout(_ppo(fused=True, action_spec=spec), _time_step())
        assert step.output.shape == action_shape and step.output.dtype == action_dtype
        for x in (step.info.log_prob, step.info.value):
            assert x.shape == (7,) and x.dtype == torch.float32


def test_numpy_normal_draw_statistics():
    """Many draws from one state: the sample mean and spread are the distribution's,
    and each log-probability is the torch distribution's of the drawn action."""
    algorithm = _ppo(fused=True, action_spec=CONTINUOUS, init_std=0.5)
    observation = torch.randn(1, *OBS.shape).expand(20000, -1).contiguous()
    step = _rollout(algorithm, _time_step(20000, observation))
    assert algorithm._fused.numpy
    with torch.no_grad():
        dist = algorithm.actor_network(observation[:1])
    torch.testing.assert_close(step.output.mean(0), dist.mean[0], atol=0.01, rtol=0)
    torch.testing.assert_close(step.output.std(0), dist.stddev[0], atol=0.01, rtol=0)
    with torch.no_grad():
        reference = algorithm.actor_network(observation).log_prob(step.output)
    torch.testing.assert_close(step.info.log_prob, reference, rtol=1e-5, atol=1e-5)


def test_same_parameters_and_checkpoint_keys():
    fused, plain = _ppo(fused=True), _ppo(fused=False)
    assert list(fused.state_dict()) == list(plain.state_dict())
    assert [n for n, _ in fused.named_parameters()] == [n for n, _ in plain.named_parameters()]
    for x, y in zip(fused.parameters(), plain.parameters(), strict=True):
        assert torch.equal(x, y)
    plain.load_state_dict(fused.state_dict())  # interchangeable checkpoints


@pytest.mark.parametrize("action_spec", [DISCRETE, CONTINUOUS])
def test_each_session_sees_the_current_parameters(action_spec):
    fused, plain = (
        _ppo(fused=True, action_spec=action_spec),
        _ppo(fused=False, action_spec=action_spec),
    )
    time_step = _time_step()
    _assert_same_rollout(fused, plain, time_step)
    # Torch's fused Adam changes parameters in place without bumping their version
    # counters: only a new session can notice.
    for algorithm in (fused, plain):
        optimizer = torch.optim.Adam(algorithm.parameters(), lr=0.1, fused=True)
        versions = [p._version for p in algorithm.parameters()]
        for p in algorithm.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()
    assert [p._version for p in fused.parameters()] == versions
    _assert_same_rollout(fused, plain, time_step)
    other = _ppo(fused=False, action_spec=action_spec)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-0.5)
    fused.load_state_dict(other.state_dict())
    _assert_same_rollout(fused, other, time_step)


def test_fused_weights_are_built_once_per_session():
    algorithm = _ppo(fused=True)
    fused = algorithm._fused
    with torch.no_grad(), algorithm.rollout_session():
        with algorithm.rollout_session():  # nested (a double-buffered unroller's groups)
            algorithm.rollout_step(_time_step(), ())
            built, in_numpy = fused._weights, fused._numpy_eval
            assert built is not None and in_numpy
            algorithm.rollout_step(_time_step(), ())
            assert fused._weights is built and fused._numpy_eval is in_numpy
        assert fused._weights is built  # the outer session is still open
    assert fused._weights is None and fused._numpy_eval is None


def test_sync_unroller_collects_in_a_session():
    from alf.environments import create_environment
    from alf.unrollers import SyncUnroller

    results = []
    for flag in (True, False):
        with create_environment("CartPole-v1", 3, seed=0) as env:
            torch.manual_seed(0)
            algorithm = PPOAlgorithm(
                observation_spec=env.observation_spec(),
                action_spec=env.action_spec(),
                fused_rollout=flag,
            )
            unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=4)
            in_session = []
            unroller.on_step = lambda a=algorithm, seen=in_session: seen.append(
                a.fused_rollout and a._fused.applies()
            )
            torch.manual_seed(1)
            results.append(unroller.unroll())
        assert in_session == [flag] * 4  # every step of a fused unroll takes the fused path
    got, want = results
    assert torch.equal(got.action, want.action)
    torch.testing.assert_close(got.rollout_info.value, want.rollout_info.value)
    torch.testing.assert_close(got.rollout_info.log_prob, want.rollout_info.log_prob)


@pytest.mark.parametrize("action_spec", [DISCRETE, CONTINUOUS])
def test_copies_fuse_their_own_networks(action_spec):
    fused = _ppo(fused=True, action_spec=action_spec)
    time_step = _time_step()
    _rollout(fused, time_step)  # builds the fused weights
    for copied in (copy.deepcopy(fused), pickle.loads(pickle.dumps(fused))):
        assert copied.fused_rollout
        with torch.no_grad():
            for p in copied.parameters():
                p.mul_(0.5)
        reference = _ppo(fused=False, action_spec=action_spec)
        reference.load_state_dict(copied.state_dict())
        _assert_same_rollout(copied, reference, time_step)


def test_replaced_network_is_not_fused():
    algorithm = _ppo(fused=True)
    algorithm.value_network = ValueNetwork(input_spec=OBS, fc_layer_params=(16, 16))
    assert not algorithm.fused_rollout
    _rollout(algorithm, _time_step())


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"actor_layers": (16, 16), "value_layers": (16, 8)}, "sizes differ"),
        ({"actor_layers": (16,), "value_layers": (16, 16)}, "sizes differ"),
        ({"actor_layers": (), "value_layers": ()}, "not hidden layers"),
        ({"lstm_hidden_size": 8}, "LSTM"),
    ],
)
def test_networks_that_are_not_fused(options, reason):
    algorithm = _ppo(fused=True, **options)
    assert not algorithm.fused_rollout
    assert reason in why_not_fusable(algorithm.actor_network, algorithm.value_network)
    assert fuse_actor_value(algorithm.actor_network, algorithm.value_network) is None
    with pytest.raises(ValueError, match="cannot fuse the actor and value networks"):
        FusedActorValue(actor=algorithm.actor_network, value=algorithm.value_network)


def test_action_mask_is_not_fused():
    spec = {"obs": OBS, "action_mask": TensorSpec((3,), torch.bool)}
    algorithm = _ppo(fused=True, observation_spec=spec)
    assert not algorithm.fused_rollout
    assert "mask" in why_not_fusable(algorithm.actor_network, algorithm.value_network)


def test_fused_only_in_a_session_without_autograd():
    algorithm = _ppo(fused=True)
    fused = algorithm._fused
    with algorithm.rollout_session():
        assert not fused.applies()  # (tests run with autograd on)
        step = algorithm.rollout_step(_time_step(), ())  # the unfused path
        assert step.info.value.requires_grad
        with torch.no_grad():
            assert fused.applies()
    with torch.no_grad():
        assert not fused.applies()  # no session: e.g. experience_spec()'s call
        with pytest.raises(RuntimeError, match="only inside its session"):
            fused(_time_step().observation)  # its weights would outlive the parameters
    assert not _ppo(fused=False).rollout_session().__enter__()  # a null context


def test_gumbel_argmax_numpy_path_matches_torch_formula():
    logits = torch.log_softmax(torch.randn(64, 5), dim=-1)
    torch.manual_seed(3)
    fast = _gumbel_argmax(logits)
    torch.manual_seed(3)
    uniform = torch.rand_like(logits).clamp_(min=torch.finfo(torch.float32).tiny)
    reference = (logits - torch.log(-torch.log(uniform))).argmax(-1)
    assert fast.dtype == torch.int64 and torch.equal(fast, reference)


def test_gumbel_argmax_frequencies():
    probs = torch.tensor([0.1, 0.6, 0.3])
    logits = probs.log().expand(20000, 3)
    torch.manual_seed(0)
    counts = np.bincount(_gumbel_argmax(logits).numpy(), minlength=3) / 20000
    np.testing.assert_allclose(counts, probs.numpy(), atol=0.015)
