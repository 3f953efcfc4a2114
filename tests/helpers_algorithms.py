"""Small algorithms for fast tests."""

import functools

import torch

from alf.algorithms import PPOAlgorithm
from alf.environments import AlfEnvironment
from alf.networks import ActorDistributionNetwork, ValueNetwork


def small_ppo(env: AlfEnvironment) -> PPOAlgorithm:
    """A seeded PPO with one hidden layer of 8 units for ``env``'s specs."""
    torch.manual_seed(0)
    return PPOAlgorithm(
        observation_spec=env.observation_spec(),
        action_spec=env.action_spec(),
        actor_network_ctor=functools.partial(ActorDistributionNetwork, fc_layer_params=(8,)),
        value_network_ctor=functools.partial(ValueNetwork, fc_layer_params=(8,)),
    )
