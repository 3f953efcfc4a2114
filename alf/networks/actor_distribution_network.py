"""Policy networks that output an action distribution."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributions as td
import torch.nn as nn
import torch.nn.functional as F

from alf.config import configurable
from alf.networks.conv_encoder import ConvLayerParams
from alf.networks.encoding_network import EncodingNetwork, encoder_options, orthogonal_init
from alf.tensor_specs import BoundedTensorSpec, action_bounds
from alf.utils.distributions import Categorical, SquashedNormal, diag_normal

__all__ = ["ActorDistributionNetwork"]


@configurable
class ActorDistributionNetwork(nn.Module):
    """Observation -> action distribution.

    A scalar discrete action space gives a ``Categorical``. A continuous (Box) action
    space gives a diagonal Normal whose standard deviation is either a learned
    state-independent parameter or a state-dependent output; with ``squash=True`` the
    Normal is pushed through ``tanh`` and scaled to the action bounds.

    Args:
        input_spec: nest of :class:`TensorSpec` of one observation.
        action_spec: :class:`BoundedTensorSpec` of one action.
        fc_layer_params: sizes of the hidden layers.
        activation: name of the hidden activation.
        state_dependent_std: whether the standard deviation is an output of the network.
        init_std: initial standard deviation (continuous actions).
        min_std: lower bound of the standard deviation.
        squash: squash the Normal with ``tanh`` into the action bounds.
        input_preprocessors, conv_layer_params, lstm_hidden_size: passed to the
            :class:`EncodingNetwork` encoder when given (when None, a gin binding of
            ``EncodingNetwork`` may still set them). With ``lstm_hidden_size`` the
            network is recurrent: step it with :meth:`step`.
    """

    def __init__(
        self,
        *,
        input_spec: Any,
        action_spec: BoundedTensorSpec,
        fc_layer_params: Sequence[int] = (64, 64),
        activation: str = "tanh",
        state_dependent_std: bool = False,
        init_std: float = 1.0,
        min_std: float = 1e-3,
        squash: bool = False,
        input_preprocessors: Any = None,
        conv_layer_params: ConvLayerParams | None = None,
        lstm_hidden_size: int | Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(action_spec, BoundedTensorSpec):
            raise TypeError(
                "ActorDistributionNetwork needs a single BoundedTensorSpec action, "
                f"got {action_spec}"
            )
        self.encoder = EncodingNetwork(
            input_spec=input_spec,
            fc_layer_params=fc_layer_params,
            activation=activation,
            **encoder_options(
                input_preprocessors=input_preprocessors,
                conv_layer_params=conv_layer_params,
                lstm_hidden_size=lstm_hidden_size,
            ),
        )
        self._discrete = action_spec.is_discrete
        size = self.encoder.output_size
        if self._discrete:
            if action_spec.shape != ():
                raise ValueError(f"Only scalar discrete actions are supported, got {action_spec}")
            if int(action_spec.minimum) != 0:
                raise ValueError(
                    f"Discrete actions must start at 0 (Gymnasium Discrete(n, start=0)), "
                    f"got {action_spec}"
                )
            self.logits = orthogonal_init(nn.Linear(size, action_spec.num_actions), 0.01)
            return
        self._action_shape = action_spec.shape
        dim = int(math.prod(action_spec.shape))
        self.mean = orthogonal_init(nn.Linear(size, dim), 0.01)
        self._state_dependent_std = state_dependent_std
        self._min_std = min_std
        # softplus(x) = init_std at x = log(exp(init_std) - 1)
        std_bias = math.log(math.expm1(init_std))
        if state_dependent_std:
            self.std = orthogonal_init(nn.Linear(size, dim), 0.01)
            nn.init.constant_(self.std.bias, std_bias)
        else:
            self.std_param = nn.Parameter(torch.full((dim,), std_bias))
        self._squash = squash
        low, high = action_bounds(action_spec)
        self.register_buffer("_low", low)
        self.register_buffer("_high", high)

    @property
    def state_spec(self) -> Any:
        """Specs of the recurrent state (``()`` when stateless)."""
        return self.encoder.state_spec

    def forward(self, observation: Any) -> td.Distribution:
        """A distribution over ``[B, *action_shape]`` actions (stateless networks)."""
        return self._distribution(self.encoder(observation))

    def step(self, observation: Any, state: Any) -> tuple[td.Distribution, Any]:
        """One time step: the action distribution and the new state (see
        :meth:`EncodingNetwork.step`)."""
        hidden, state = self.encoder.step(observation, state)
        return self._distribution(hidden), state

    def unroll(
        self, observation: Any, state: Any, first: torch.Tensor
    ) -> tuple[td.Distribution, Any]:
        """Runs along ``[T, B, ...]`` observation sequences (see
        :meth:`EncodingNetwork.unroll`): a distribution of batch ``[T * B]`` (row
        ``t * B + b``) and the state after the last step."""
        hidden, state = self.encoder.unroll(observation, state, first)
        return self._distribution(hidden), state

    def _distribution(self, hidden: torch.Tensor) -> td.Distribution:
        if self._discrete:
            return Categorical(self.logits(hidden))
        mean = self.mean(hidden)
        raw_std = self.std(hidden) if self._state_dependent_std else self.std_param.expand_as(mean)
        std = F.softplus(raw_std) + self._min_std
        shape = (mean.shape[0], *self._action_shape)
        mean, std = mean.reshape(shape), std.reshape(shape)
        event_dims = len(self._action_shape)
        if self._squash:
            return SquashedNormal(mean, std, self._low, self._high, event_dims)
        return diag_normal(mean, std, event_dims)
