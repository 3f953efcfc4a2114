"""Algorithms: the ``Algorithm``/``RLAlgorithm`` hierarchy and concrete methods."""

from alf.algorithms.actor_critic import ActorCriticAlgorithm
from alf.algorithms.algorithm import Algorithm
from alf.algorithms.on_policy_algorithm import OnPolicyAlgorithm
from alf.algorithms.ppo import PPOAlgorithm
from alf.algorithms.rl_algorithm import RLAlgorithm

__all__ = [
    "ActorCriticAlgorithm",
    "Algorithm",
    "OnPolicyAlgorithm",
    "PPOAlgorithm",
    "RLAlgorithm",
]
