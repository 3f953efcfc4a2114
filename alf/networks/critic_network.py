"""Action-value networks: ``Q(s, a)`` for continuous actions, ``Q(s, .)`` for discrete."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from alf import nest
from alf.config import configurable
from alf.networks.action_mask import ActionMask
from alf.networks.conv_encoder import ConvLayerParams
from alf.networks.encoding_network import EncodingNetwork, encoder_options
from alf.networks.ensemble import EnsembleMLP
from alf.networks.layers import flat_input_size
from alf.tensor_specs import BoundedTensorSpec, UnsupportedActionSpaceError, describe_spec

__all__ = ["CriticNetwork", "QNetwork", "flatten_batch", "observation_torsos", "torso_features"]


def flatten_batch(inputs: Any) -> torch.Tensor:
    """Flattens every ``[B, ...]`` leaf of ``inputs`` and concatenates them to
    ``[B, N]`` float32."""
    leaves = [x.reshape(x.shape[0], -1) for x in nest.flatten(inputs)]
    x = leaves[0] if len(leaves) == 1 else torch.cat(leaves, dim=-1)
    return x if x.dtype == torch.float32 else x.float()


def observation_torsos(
    *,
    owner: str,
    input_spec: Any,
    num_replicas: int,
    activation: str,
    input_preprocessors: Any = None,
    conv_layer_params: ConvLayerParams | None = None,
) -> tuple[nn.ModuleList | None, int]:
    """The observation encoders (one per replica) in front of an :class:`EnsembleMLP`.

    Each is an :class:`EncodingNetwork` without fully connected layers (the ensemble
    has them), so it is only an input encoding: a ``ConvEncoder`` with
    ``conv_layer_params`` or a ``ConcatEncoder`` with ``input_preprocessors`` (given here
    or bound in gin on ``EncodingNetwork``). When it would only flatten the observation,
    no torso is built and the caller flattens.

    Args:
        owner: the network's name, for error messages.
        input_spec: nest of specs of one observation.
        num_replicas: number of independent torsos.
        activation: activation of the conv layers.
        input_preprocessors: see :class:`EncodingNetwork`.
        conv_layer_params: see :class:`EncodingNetwork`.

    Returns:
        The torsos (None when they would only flatten) and their output size.

    Raises:
        ValueError: a torso is recurrent (e.g. ``EncodingNetwork.lstm_hidden_size`` is
            bound in gin).
    """

    def build() -> EncodingNetwork:
        return EncodingNetwork(
            input_spec=input_spec,
            fc_layer_params=(),
            activation=activation,
            last_layer_size=None,
            **encoder_options(
                input_preprocessors=input_preprocessors, conv_layer_params=conv_layer_params
            ),
        )

    first = build()
    if first.state_spec != ():
        raise ValueError(
            f"{owner} does not support recurrent encoders (lstm_hidden_size is set, e.g. "
            "by a gin binding of EncodingNetwork.lstm_hidden_size). Recurrent networks are "
            "supported by the on-policy actor-critic algorithms (ActorCriticAlgorithm, "
            "PPOAlgorithm) only."
        )
    if first.flattens_only:
        return None, flat_input_size(input_spec)
    return nn.ModuleList([first, *(build() for _ in range(num_replicas - 1))]), first.output_size


def torso_features(torsos: nn.ModuleList, observation: Any) -> torch.Tensor:
    """``[R, B, F]`` features of ``observation`` from each of the ``R`` torsos."""
    if len(torsos) == 1:
        return torsos[0](observation).unsqueeze(0)
    return torch.stack([torso(observation) for torso in torsos])


@configurable
class CriticNetwork(nn.Module):
    """``(observation, action) -> Q``, for ``num_replicas`` critics at once.

    The observation may first go through an encoder (convolutions or per-part
    preprocessors, one independent copy per replica, see :func:`observation_torsos`);
    its features and the flattened action feed the MLP.

    Args:
        input_spec: ``(observation_spec, action_spec)``.
        fc_layer_params: hidden layer sizes.
        activation: name of the hidden activation.
        num_replicas: number of independent critics (2 for SAC's and TD3's twins).
        input_preprocessors: the observation encoder's, see :class:`EncodingNetwork`
            (None: as bound in gin, by default none).
        conv_layer_params: the observation encoder's, see :class:`EncodingNetwork`
            (None: as bound in gin, by default none).
    """

    def __init__(
        self,
        *,
        input_spec: tuple[Any, Any],
        fc_layer_params: Sequence[int] = (256, 256),
        activation: str = "relu",
        num_replicas: int = 1,
        input_preprocessors: Any = None,
        conv_layer_params: ConvLayerParams | None = None,
    ) -> None:
        super().__init__()
        self.num_replicas = num_replicas
        observation_spec, action_spec = input_spec
        self.torsos, size = observation_torsos(
            owner="CriticNetwork",
            input_spec=observation_spec,
            num_replicas=num_replicas,
            activation=activation,
            input_preprocessors=input_preprocessors,
            conv_layer_params=conv_layer_params,
        )
        self.mlp = EnsembleMLP(
            input_size=size + flat_input_size(action_spec),
            fc_layer_params=fc_layer_params,
            output_size=1,
            num_replicas=num_replicas,
            activation=activation,
        )

    @property
    def state_spec(self) -> Any:
        """``()``: critics are stateless."""
        return ()

    def forward(self, observation: Any, action: torch.Tensor) -> torch.Tensor:
        """``[B, ...]`` observations and actions -> ``[B, num_replicas]`` Q values."""
        if self.torsos is None:
            x = flatten_batch((observation, action))
        else:
            features = torso_features(self.torsos, observation)
            action = flatten_batch(action).expand(features.shape[0], -1, -1)
            x = torch.cat([features, action], dim=-1)
        return self.mlp(x).squeeze(-1).transpose(0, 1)


@configurable
class QNetwork(nn.Module):
    """``observation -> Q(s, a)`` for every action of a scalar discrete action space.

    The observation may first go through an encoder (convolutions or per-part
    preprocessors, one independent copy per replica, see :func:`observation_torsos`),
    e.g. for Atari ``EncodingNetwork.conv_layer_params = %NATURE_CONV_LAYERS`` with
    ``QNetwork.fc_layer_params = (512,)``.

    Args:
        input_spec: nest of specs of one observation.
        action_spec: scalar discrete :class:`BoundedTensorSpec` (a ``Discrete(n, start)``).
        fc_layer_params: hidden layer sizes.
        activation: name of the hidden activation.
        num_replicas: number of independent Q networks (2 for discrete SAC).
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
        num_replicas: int = 1,
        input_preprocessors: Any = None,
        conv_layer_params: ConvLayerParams | None = None,
    ) -> None:
        super().__init__()
        if not (
            isinstance(action_spec, BoundedTensorSpec)
            and action_spec.is_discrete
            and action_spec.shape == ()
        ):
            raise UnsupportedActionSpaceError(
                f"QNetwork needs a scalar Discrete action space, got {describe_spec(action_spec)}"
            )
        self.num_actions = action_spec.num_actions
        self.offset = int(np.asarray(action_spec.minimum))
        """The action of output index 0 (the ``start`` of a ``Discrete(n, start)``)."""
        self.num_replicas = num_replicas
        self._mask = ActionMask(owner="QNetwork", input_spec=input_spec, action_spec=action_spec)
        input_spec = self._mask.input_spec
        self.torsos, size = observation_torsos(
            owner="QNetwork",
            input_spec=input_spec,
            num_replicas=num_replicas,
            activation=activation,
            input_preprocessors=input_preprocessors,
            conv_layer_params=conv_layer_params,
        )
        self.mlp = EnsembleMLP(
            input_size=size,
            fc_layer_params=fc_layer_params,
            output_size=self.num_actions,
            num_replicas=num_replicas,
            activation=activation,
        )

    @property
    def state_spec(self) -> Any:
        """``()``: Q networks are stateless."""
        return ()

    def action_mask(self, observation: Any) -> torch.Tensor | None:
        """The observation's ``[B, num_actions]`` invalid-action mask (true: allowed), or
        None (see :mod:`alf.networks.action_mask`)."""
        return self._mask.split(observation)[1]

    def forward(self, observation: Any) -> torch.Tensor:
        """``[B, ...]`` observations -> ``[B, num_replicas, num_actions]`` Q values (of
        every action, valid or not: the mask, if any, is not an input; see
        :meth:`action_mask`). Output index ``i`` is the action ``offset + i``."""
        observation = self._mask.split(observation)[0]
        if self.torsos is None:
            x = flatten_batch(observation)
        else:
            x = torso_features(self.torsos, observation)
        return self.mlp(x).transpose(0, 1)
