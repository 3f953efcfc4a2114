"""How a data-parallel run divides ``mini_batch_size`` over its ranks: an on-policy
algorithm takes its share itself (``OnPolicyAlgorithm.share_mini_batch``), an off-policy
one gets its share from the trainer, and the error names the setting as before."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from alf.algorithms import (
    ActorCriticAlgorithm,
    AppoAlgorithm,
    DqnAlgorithm,
    OnPolicyAlgorithm,
    PPOAlgorithm,
)
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.networks import ActorDistributionNetwork, QNetwork, ValueNetwork
from alf.tensor_specs import BoundedTensorSpec
from alf.trainers.data_parallel import divide_mini_batch
from alf.utils.distributed import DistributedContext

OBS = BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 1)


def _context(world_size: int) -> DistributedContext:
    return DistributedContext(rank=0, world_size=world_size, local_rank=0, backend="gloo")


def _on_policy(cls: type = PPOAlgorithm, **kwargs: object) -> OnPolicyAlgorithm:
    return cls(
        observation_spec=OBS,
        action_spec=DISCRETE,
        actor_network_ctor=functools.partial(ActorDistributionNetwork, fc_layer_params=(8,)),
        value_network_ctor=functools.partial(ValueNetwork, fc_layer_params=(8,)),
        **kwargs,
    )


def _dqn(mini_batch_size: int) -> DqnAlgorithm:
    return DqnAlgorithm(
        observation_spec=OBS,
        action_spec=DISCRETE,
        q_network_ctor=functools.partial(QNetwork, fc_layer_params=(8,)),
        mini_batch_size=mini_batch_size,
    )


@pytest.mark.parametrize("cls", [PPOAlgorithm, AppoAlgorithm, ActorCriticAlgorithm])
def test_an_on_policy_algorithm_takes_its_share(cls: type) -> None:
    algorithm = _on_policy(cls, mini_batch_size=64)
    algorithm.share_mini_batch(4)
    assert algorithm.mini_batch_size == 16
    whole = _on_policy(cls, mini_batch_size=None)
    whole.share_mini_batch(4)  # one update on the whole trajectory, on every rank
    assert whole.mini_batch_size is None


def test_an_indivisible_share_names_the_setting_as_the_context_does() -> None:
    algorithm = _on_policy(mini_batch_size=10)
    with pytest.raises(ValueError) as err:
        algorithm.share_mini_batch(4)
    with pytest.raises(ValueError) as expected:
        _context(4).share(10, "PPOAlgorithm.mini_batch_size")
    assert str(err.value) == str(expected.value)
    assert algorithm.mini_batch_size == 10  # unchanged


def test_divide_mini_batch_gives_each_family_its_share() -> None:
    ppo = _on_policy(mini_batch_size=64)
    divide_mini_batch(ppo, _context(2))
    assert ppo.mini_batch_size == 32
    dqn = _dqn(mini_batch_size=64)
    divide_mini_batch(dqn, _context(4))
    assert dqn.mini_batch_size == 16
    with pytest.raises(ValueError, match=r"DqnAlgorithm.mini_batch_size=6 .* by the 4 ranks"):
        divide_mini_batch(_dqn(mini_batch_size=6), _context(4))
    with pytest.raises(ValueError, match=r"PPOAlgorithm.mini_batch_size=6 .* by the 4 ranks"):
        divide_mini_batch(_on_policy(mini_batch_size=6), _context(4))


def test_an_algorithm_of_neither_family_has_no_mini_batch_to_divide() -> None:
    class _Other(RLAlgorithm):
        mini_batch_size = 10  # not a setting the trainer knows about

    algorithm = _Other(observation_spec=OBS, action_spec=DISCRETE)
    divide_mini_batch(algorithm, _context(4))
    assert algorithm.mini_batch_size == 10
