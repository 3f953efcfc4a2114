"""State-value networks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from alf.config import configurable
from alf.networks.encoding_network import EncodingNetwork

__all__ = ["ValueNetwork"]


@configurable
class ValueNetwork(nn.Module):
    """Maps an observation to a scalar value ``V(s)``.

    Args:
        input_spec: nest of :class:`TensorSpec` of one observation.
        fc_layer_params: sizes of the hidden layers.
        activation: name of the hidden activation.
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        fc_layer_params: Sequence[int] = (64, 64),
        activation: str = "tanh",
    ) -> None:
        super().__init__()
        self.encoder = EncodingNetwork(
            input_spec=input_spec,
            fc_layer_params=fc_layer_params,
            activation=activation,
            last_layer_size=1,
            last_layer_gain=1.0,
        )

    def forward(self, observation: Any) -> torch.Tensor:
        """``[B, ...] -> [B]`` values."""
        return self.encoder(observation).squeeze(-1)
