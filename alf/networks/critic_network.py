"""Action-value networks: ``Q(s, a)`` for continuous actions, ``Q(s, .)`` for discrete."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from alf import nest
from alf.config import configurable
from alf.networks.encoding_network import flat_input_size
from alf.networks.ensemble import EnsembleMLP
from alf.tensor_specs import BoundedTensorSpec

__all__ = ["CriticNetwork", "QNetwork", "flatten_batch"]


def flatten_batch(inputs: Any) -> torch.Tensor:
    """Flattens every ``[B, ...]`` leaf of ``inputs`` and concatenates them to
    ``[B, N]`` float32."""
    leaves = [x.reshape(x.shape[0], -1) for x in nest.flatten(inputs)]
    x = leaves[0] if len(leaves) == 1 else torch.cat(leaves, dim=-1)
    return x if x.dtype == torch.float32 else x.float()


@configurable
class CriticNetwork(nn.Module):
    """``(observation, action) -> Q``, for ``num_replicas`` critics at once.

    Args:
        input_spec: ``(observation_spec, action_spec)``.
        fc_layer_params: hidden layer sizes.
        activation: name of the hidden activation.
        num_replicas: number of independent critics (2 for SAC's and TD3's twins).
    """

    def __init__(
        self,
        *,
        input_spec: tuple[Any, Any],
        fc_layer_params: Sequence[int] = (256, 256),
        activation: str = "relu",
        num_replicas: int = 1,
    ) -> None:
        super().__init__()
        self.num_replicas = num_replicas
        self.mlp = EnsembleMLP(
            input_size=flat_input_size(input_spec),
            fc_layer_params=fc_layer_params,
            output_size=1,
            num_replicas=num_replicas,
            activation=activation,
        )

    def forward(self, observation: Any, action: torch.Tensor) -> torch.Tensor:
        """``[B, ...]`` observations and actions -> ``[B, num_replicas]`` Q values."""
        x = flatten_batch((observation, action))
        return self.mlp(x).squeeze(-1).transpose(0, 1)


@configurable
class QNetwork(nn.Module):
    """``observation -> Q(s, a)`` for every action of a scalar discrete action space.

    Args:
        input_spec: nest of specs of one observation.
        action_spec: scalar discrete :class:`BoundedTensorSpec` starting at 0.
        fc_layer_params: hidden layer sizes.
        activation: name of the hidden activation.
        num_replicas: number of independent Q networks (2 for discrete SAC).
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        action_spec: BoundedTensorSpec,
        fc_layer_params: Sequence[int] = (256, 256),
        activation: str = "relu",
        num_replicas: int = 1,
    ) -> None:
        super().__init__()
        if not action_spec.is_discrete or action_spec.shape != () or action_spec.minimum != 0:
            raise ValueError(
                f"QNetwork needs a scalar discrete action space starting at 0, got {action_spec}"
            )
        self.num_actions = action_spec.num_actions
        self.num_replicas = num_replicas
        self.mlp = EnsembleMLP(
            input_size=flat_input_size(input_spec),
            fc_layer_params=fc_layer_params,
            output_size=self.num_actions,
            num_replicas=num_replicas,
            activation=activation,
        )

    def forward(self, observation: Any) -> torch.Tensor:
        """``[B, ...]`` observations -> ``[B, num_replicas, num_actions]`` Q values."""
        return self.mlp(flatten_batch(observation)).transpose(0, 1)
