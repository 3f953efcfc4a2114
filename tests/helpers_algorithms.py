"""Small algorithms for fast tests."""

import functools
from typing import Any

import torch

from alf.algorithms import PPOAlgorithm
from alf.data_structures import StepType, TimeStep
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


def mid_time_step(observation: Any, batch: int) -> TimeStep:
    """A batch of ``batch`` MID time steps with ``observation``, zero rewards and
    actions, discount 1."""
    return TimeStep(
        step_type=torch.full((batch,), StepType.MID, dtype=torch.int32),
        reward=torch.zeros(batch),
        discount=torch.ones(batch),
        observation=observation,
        prev_action=torch.zeros(batch, dtype=torch.int64),
        env_id=torch.arange(batch),
    )
