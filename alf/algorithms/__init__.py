"""Algorithms: the ``Algorithm``/``RLAlgorithm`` hierarchy and concrete methods."""

from alf.algorithms.actor_critic import ActorCriticAlgorithm
from alf.algorithms.algorithm import Algorithm
from alf.algorithms.appo import AppoAlgorithm
from alf.algorithms.bc import BcAlgorithm
from alf.algorithms.cql import CqlAlgorithm, DiscreteCqlAlgorithm
from alf.algorithms.ddpg import DdpgAlgorithm
from alf.algorithms.dqn import DqnAlgorithm
from alf.algorithms.iql import IqlAlgorithm
from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf.algorithms.on_policy_algorithm import OnPolicyAlgorithm
from alf.algorithms.ppo import PPOAlgorithm
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.algorithms.sac import SacAlgorithm
from alf.algorithms.td3 import Td3Algorithm
from alf.algorithms.td3bc import Td3BcAlgorithm

__all__ = [
    "ActorCriticAlgorithm",
    "Algorithm",
    "AppoAlgorithm",
    "BcAlgorithm",
    "CqlAlgorithm",
    "DdpgAlgorithm",
    "DiscreteCqlAlgorithm",
    "DqnAlgorithm",
    "IqlAlgorithm",
    "OffPolicyAlgorithm",
    "OnPolicyAlgorithm",
    "PPOAlgorithm",
    "RLAlgorithm",
    "SacAlgorithm",
    "Td3Algorithm",
    "Td3BcAlgorithm",
]
