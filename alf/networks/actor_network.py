"""Deterministic policies for DDPG and TD3."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from alf.config import configurable
from alf.networks.conv_encoder import ConvLayerParams
from alf.networks.critic_network import flatten_batch, observation_torsos
from alf.networks.ensemble import EnsembleMLP
from alf.tensor_specs import BoundedTensorSpec, action_bounds

__all__ = ["ActorNetwork"]


@configurable
class ActorNetwork(nn.Module):
    """``observation -> action``: an MLP whose output is squashed by ``tanh`` into the
    bounds of a continuous action space.

    The observation may first go through an encoder (convolutions or per-part
    preprocessors, see :func:`~alf.networks.critic_network.observation_torsos`).

    Args:
        input_spec: nest of specs of one observation.
        action_spec: continuous :class:`BoundedTensorSpec` with finite bounds.
        fc_layer_params: hidden layer sizes.
        activation: name of the hidden activation.
        input_preprocessors: the observation encoder's, see :class:`EncodingNetwork`
            (None: as bound in gin, by default none).
        conv_layer_params: the observation encoder's, see :class:`EncodingNetwork`
            (None: as bound in gin, by default none).
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        action_spec: BoundedTensorSpec,
        fc_layer_params: Sequence[int] = (256, 256),
        activation: str = "relu",
        input_preprocessors: Any = None,
        conv_layer_params: ConvLayerParams | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(action_spec, BoundedTensorSpec) or action_spec.is_discrete:
            raise ValueError(f"ActorNetwork needs a continuous action space, got {action_spec}")
        low, high = action_bounds(action_spec)
        if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise ValueError(f"ActorNetwork needs finite action bounds, got {action_spec}")
        self._action_shape = tuple(action_spec.shape)
        self.register_buffer("_mid", (high + low) / 2)
        self.register_buffer("_half", (high - low) / 2)
        self.register_buffer("_low", low)
        self.register_buffer("_high", high)
        self.torsos, size = observation_torsos(
            owner="ActorNetwork",
            input_spec=input_spec,
            num_replicas=1,
            activation=activation,
            input_preprocessors=input_preprocessors,
            conv_layer_params=conv_layer_params,
        )
        self.mlp = EnsembleMLP(
            input_size=size,
            fc_layer_params=fc_layer_params,
            output_size=action_spec.numel,
            activation=activation,
        )

    @property
    def state_spec(self) -> Any:
        """``()``: deterministic actors are stateless."""
        return ()

    def forward(self, observation: Any) -> torch.Tensor:
        """``[B, ...]`` observations -> ``[B, *action_shape]`` actions within bounds."""
        x = flatten_batch(observation) if self.torsos is None else self.torsos[0](observation)
        out = torch.tanh(self.mlp(x)[0])
        action = self._mid + self._half * out.reshape(out.shape[0], *self._action_shape)
        # mid + half can round one ulp past a bound when tanh saturates.
        return torch.maximum(torch.minimum(action, self._high), self._low)
