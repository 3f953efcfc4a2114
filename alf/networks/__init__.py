"""Networks: encoders, actor distributions, value functions, critics and Q networks."""

from alf.networks.actor_distribution_network import ActorDistributionNetwork
from alf.networks.actor_network import ActorNetwork
from alf.networks.critic_network import CriticNetwork, QNetwork
from alf.networks.encoding_network import EncodingNetwork
from alf.networks.ensemble import EnsembleMLP
from alf.networks.value_network import ValueNetwork

__all__ = [
    "ActorDistributionNetwork",
    "ActorNetwork",
    "CriticNetwork",
    "EncodingNetwork",
    "EnsembleMLP",
    "QNetwork",
    "ValueNetwork",
]
