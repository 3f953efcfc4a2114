"""Networks: encoders, actor distributions and value functions."""

from alf.networks.actor_distribution_network import ActorDistributionNetwork
from alf.networks.encoding_network import EncodingNetwork
from alf.networks.value_network import ValueNetwork

__all__ = ["ActorDistributionNetwork", "EncodingNetwork", "ValueNetwork"]
