"""State-value networks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from alf.config import configurable
from alf.networks.conv_encoder import ConvLayerParams
from alf.networks.encoding_network import EncodingNetwork, encoder_options

__all__ = ["ValueNetwork"]


@configurable
class ValueNetwork(nn.Module):
    """Maps an observation to a scalar value ``V(s)``.

    Args:
        input_spec: nest of :class:`TensorSpec` of one observation.
        fc_layer_params: sizes of the hidden layers.
        activation: name of the hidden activation.
        input_preprocessors: passed to the :class:`EncodingNetwork` encoder when given
            (when None, a gin binding of ``EncodingNetwork`` may still set it).
        conv_layer_params: passed to the encoder like ``input_preprocessors``.
        lstm_hidden_size: passed to the encoder like ``input_preprocessors``. With it the
            network is recurrent: step it with :meth:`step`.
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        fc_layer_params: Sequence[int] = (64, 64),
        activation: str = "tanh",
        input_preprocessors: Any = None,
        conv_layer_params: ConvLayerParams | None = None,
        lstm_hidden_size: int | Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.encoder = EncodingNetwork(
            input_spec=input_spec,
            fc_layer_params=fc_layer_params,
            activation=activation,
            last_layer_size=1,
            last_layer_gain=1.0,
            **encoder_options(
                input_preprocessors=input_preprocessors,
                conv_layer_params=conv_layer_params,
                lstm_hidden_size=lstm_hidden_size,
            ),
        )

    @property
    def state_spec(self) -> Any:
        """Specs of the recurrent state (``()`` when stateless)."""
        return self.encoder.state_spec

    def forward(self, observation: Any) -> torch.Tensor:
        """``[B, ...] -> [B]`` values (stateless networks)."""
        return self.encoder(observation).squeeze(-1)

    def step(self, observation: Any, state: Any) -> tuple[torch.Tensor, Any]:
        """One time step: ``[B]`` values and the new state (see
        :meth:`EncodingNetwork.step`)."""
        value, state = self.encoder.step(observation, state)
        return value.squeeze(-1), state

    def unroll(self, observation: Any, state: Any, first: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Runs along ``[T, B, ...]`` observation sequences (see
        :meth:`EncodingNetwork.unroll`): ``[T * B]`` values (row ``t * B + b``) and the
        state after the last step."""
        value, state = self.encoder.unroll(observation, state, first)
        return value.squeeze(-1), state
