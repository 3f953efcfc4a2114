"""One torso, two heads: the action distribution and the value of an observation.

:class:`ActorValueNetwork` is what Sample Factory and most pixel-based actor-critic
implementations use: a single :class:`~alf.networks.EncodingNetwork` (convolutions,
fully connected layers, optionally LSTM layers) whose features feed both an action head
(built as :class:`~alf.networks.ActorDistributionNetwork` builds its own) and a linear
value head. The image is encoded once per step instead of twice, and both losses train
the torso. Give it to the actor-critic algorithms with ``actor_value_network_ctor`` (see
:class:`~alf.algorithms.ActorCriticAlgorithm`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.distributions as td
import torch.nn as nn

from alf import nest
from alf.config import configurable
from alf.networks.action_mask import ActionMask
from alf.networks.actor_distribution_network import (
    action_distribution,
    add_action_heads,
    bounded_action_specs,
    head_options,
)
from alf.networks.conv_encoder import ConvLayerParams
from alf.networks.encoding_network import EncodingNetwork, encoder_options, orthogonal_init

__all__ = ["ActorValueNetwork"]

ActorValue = tuple[td.Distribution, torch.Tensor]
"""An action distribution over ``[B]`` rows and the ``[B]`` values."""


@configurable
class ActorValueNetwork(nn.Module):
    """Observation -> (action distribution, value), from one shared encoder.

    The encoder is an :class:`EncodingNetwork` (``torso``); the action head on its
    features is that of :class:`~alf.networks.ActorDistributionNetwork` (every action
    space it supports: ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, ``Box``, nests
    of them), and the value head one linear layer. Calling it gives both outputs:
    ``net(observation) -> (dist, value)`` for a stateless network, ``net.step(observation,
    state) -> ((dist, value), state)`` and ``net.unroll(observation, state, first)`` for a
    recurrent one (``lstm_hidden_size``), as :func:`~alf.networks.step_network` and
    :func:`~alf.networks.unroll_network` expect.

    An invalid-action mask in the observation (see :mod:`alf.networks.action_mask`) is
    not encoded: it masks the action head's logits only, so the value does not see it
    either (a separate :class:`~alf.networks.ValueNetwork` would).

    Gin bindings of ``EncodingNetwork`` (e.g. ``EncodingNetwork.conv_layer_params``)
    reach the torso, as they reach the separate networks' encoders.

    Args:
        input_spec: nest of :class:`TensorSpec` of one observation.
        action_spec: nest of :class:`BoundedTensorSpec` of one action.
        fc_layer_params: sizes of the torso's hidden fully connected layers.
        activation: name of the torso's hidden activation.
        state_dependent_std: see :class:`~alf.networks.ActorDistributionNetwork`.
        init_std: initial standard deviation (continuous actions).
        min_std: lower bound of the standard deviation.
        squash: squash the Normal with ``tanh`` into the action bounds.
        std_transform: ``"softplus"`` or ``"exp"`` (see
            :class:`~alf.networks.ActorDistributionNetwork`).
        value_gain: orthogonal-init gain of the value head.
        input_preprocessors: passed to the torso when given (when None, a gin binding of
            ``EncodingNetwork`` may still set it).
        conv_layer_params: passed to the torso like ``input_preprocessors``.
        lstm_hidden_size: passed to the torso like ``input_preprocessors``. With it the
            network is recurrent: step it with :meth:`step`.

    Raises:
        UnsupportedActionSpaceError: an action leaf is not a bounded spec.
        ActionMaskError: the observation's mask does not fit the action space.
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        action_spec: Any,
        fc_layer_params: Sequence[int] = (64, 64),
        activation: str = "tanh",
        state_dependent_std: bool = False,
        init_std: float = 1.0,
        min_std: float = 1e-3,
        squash: bool = False,
        std_transform: Literal["softplus", "exp"] = "softplus",
        value_gain: float = 1.0,
        input_preprocessors: Any = None,
        conv_layer_params: ConvLayerParams | None = None,
        lstm_hidden_size: int | Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        options = head_options(
            owner=owner,
            state_dependent_std=state_dependent_std,
            init_std=init_std,
            min_std=min_std,
            squash=squash,
            std_transform=std_transform,
        )
        bounded_action_specs(owner, action_spec)  # the error before building anything
        self._mask = ActionMask(owner=owner, input_spec=input_spec, action_spec=action_spec)
        self.torso = EncodingNetwork(
            input_spec=self._mask.input_spec,
            fc_layer_params=fc_layer_params,
            activation=activation,
            **encoder_options(
                input_preprocessors=input_preprocessors,
                conv_layer_params=conv_layer_params,
                lstm_hidden_size=lstm_hidden_size,
            ),
        )
        size = self.torso.output_size
        add_action_heads(self, action_spec=action_spec, size=size, options=options)
        self.value = orthogonal_init(nn.Linear(size, 1), value_gain)

    @property
    def state_spec(self) -> Any:
        """Specs of the torso's recurrent state (``()`` when stateless)."""
        return self.torso.state_spec

    @property
    def action_mask_key(self) -> str | None:
        """The observation key of the invalid-action mask, None without one."""
        return self._mask.key

    def forward(self, observation: Any) -> ActorValue:
        """The action distribution and the ``[B]`` values of a ``[B, ...]`` observation
        nest (stateless networks)."""
        observation, mask = self._mask.split(observation)
        return self.heads_of(self.torso(observation), mask)

    def step(self, observation: Any, state: Any) -> tuple[ActorValue, Any]:
        """One time step: ``(dist, value)`` and the new state (see
        :meth:`EncodingNetwork.step`)."""
        observation, mask = self._mask.split(observation)
        hidden, state = self.torso.step(observation, state)
        return self.heads_of(hidden, mask), state

    def unroll(self, observation: Any, state: Any, first: torch.Tensor) -> tuple[ActorValue, Any]:
        """Runs along ``[T, B, ...]`` observation sequences (see
        :meth:`EncodingNetwork.unroll`): ``(dist, value)`` of batch ``[T * B]`` (row
        ``t * B + b``) and the state after the last step."""
        observation, mask = self._mask.split(observation)
        hidden, state = self.torso.unroll(observation, state, first)
        if mask is not None:
            mask = mask.reshape(-1, *mask.shape[2:])
        return self.heads_of(hidden, mask), state

    def heads_of(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> ActorValue:
        """The action distribution and the ``[B]`` values from the torso's ``[B, size]``
        features and the invalid-action mask (or None)."""
        value = self.value(hidden).squeeze(-1)
        return action_distribution(self, hidden, mask), value

    def extra_repr(self) -> str:
        leaves = len(nest.flatten(self._action_spec))
        return f"action_leaves={leaves}, masked={self.action_mask_key is not None}"
