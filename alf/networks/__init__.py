"""Networks: encoders (MLP, CNN, LSTM), actor distributions, value functions, critics and
Q networks."""

from alf.networks.actor_distribution_network import ActorDistributionNetwork
from alf.networks.actor_network import ActorNetwork
from alf.networks.actor_value_network import ActorValueNetwork
from alf.networks.conv_encoder import NATURE_CONV_LAYERS, ConvEncoder
from alf.networks.critic_network import CriticNetwork, QNetwork
from alf.networks.encoding_network import ConcatEncoder, EncodingNetwork
from alf.networks.ensemble import EnsembleMLP
from alf.networks.recurrent import (
    LSTMStack,
    is_recurrent,
    require_stateless,
    state_spec_of,
    step_network,
    unroll_network,
)
from alf.networks.value_network import ValueNetwork

__all__ = [
    "NATURE_CONV_LAYERS",
    "ActorDistributionNetwork",
    "ActorNetwork",
    "ActorValueNetwork",
    "ConcatEncoder",
    "ConvEncoder",
    "CriticNetwork",
    "EncodingNetwork",
    "EnsembleMLP",
    "LSTMStack",
    "QNetwork",
    "ValueNetwork",
    "is_recurrent",
    "require_stateless",
    "state_spec_of",
    "step_network",
    "unroll_network",
]
