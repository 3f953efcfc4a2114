"""The intrinsic curiosity module (Pathak et al., 2017, "Curiosity-driven Exploration by
Self-supervised Prediction").

A feature encoder ``phi`` is trained, together with an *inverse model* that predicts the
action ``a`` from ``(phi(s), phi(s'))``, so that the features keep what the agent's
actions affect and drop what they do not (noise the agent cannot control). A *forward
model* predicts ``phi(s')`` from ``(phi(s), a)``; its error is the bonus,
``eta * 0.5 * ||f(phi(s), a) - phi(s')||^2 / k`` (``k`` features). The two models'
losses are weighted ``(1 - beta)`` (inverse) and ``beta`` (forward), ``beta = 0.2`` as in
the paper. The forward loss's target ``phi(s')`` is detached: only the inverse loss shapes
the features (a common choice since the paper; it keeps the forward model from making
the features trivial).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from alf.algorithms.intrinsic.base import IntrinsicReward, IntrinsicRewardError
from alf.config import configurable
from alf.data_structures import Experience
from alf.networks import EncodingNetwork
from alf.networks.conv_encoder import ConvLayerParams
from alf.networks.layers import make_activation, orthogonal_init
from alf.tensor_specs import BoundedTensorSpec, describe_spec
from alf.utils.schedules import Schedule

__all__ = ["ICMReward"]


def _mlp(input_size: int, hidden: Sequence[int], output_size: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [orthogonal_init(nn.Linear(input_size, width), 2**0.5), make_activation("elu")]
        input_size = width
    layers.append(orthogonal_init(nn.Linear(input_size, output_size), 1.0))
    return nn.Sequential(*layers)


@configurable
class ICMReward(IntrinsicReward):
    """The ICM bonus: the forward model's error in feature space.

    Actions: a ``Discrete`` action is one-hot for the forward model and predicted by the
    inverse model with a cross-entropy loss; a 1-D ``Box`` action is used as it is and
    predicted with a squared error. Other action spaces are refused.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: spec of one action.
        observation_key: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        feature_size: the size of ``phi(s)``.
        fc_layer_params: the encoder's hidden layers (ELU).
        conv_layer_params: convolutions first (a ``[C, H, W]`` image only); ``()``:
            none, the observation is flattened (the paper's Doom encoder is four
            ``(32, 3, 2, 1)`` convolutions).
        model_fc_layer_params: the hidden layers of the forward and inverse models.
        eta: the scale of the bonus (the paper's 0.01; with ``normalize_reward`` the scale
            cancels out).
        beta: the forward model's share of the loss (the inverse model's is ``1 - beta``).
        int_coef: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        ext_coef: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        gamma: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        normalize_reward: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        loss_weight: the weight of the two models' loss in the algorithm's loss.

    Raises:
        IntrinsicRewardError: an observation it cannot encode, an action space other
            than ``Discrete`` or a 1-D ``Box``, or ``beta`` not in ``[0, 1]``.
    """

    name = "icm"

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        observation_key: str | None = None,
        feature_size: int = 64,
        fc_layer_params: Sequence[int] = (256,),
        conv_layer_params: ConvLayerParams = (),
        model_fc_layer_params: Sequence[int] = (256,),
        eta: float = 0.01,
        beta: float = 0.2,
        int_coef: float | Schedule = 1.0,
        ext_coef: float = 2.0,
        gamma: float = 0.99,
        normalize_reward: bool = True,
        loss_weight: float = 1.0,
    ) -> None:
        super().__init__(
            observation_spec=observation_spec,
            action_spec=action_spec,
            observation_key=observation_key,
            int_coef=int_coef,
            ext_coef=ext_coef,
            gamma=gamma,
            normalize_reward=normalize_reward,
            conv_layer_params=conv_layer_params,
        )
        owner = type(self).__name__
        if not 0.0 <= beta <= 1.0:
            raise IntrinsicRewardError(f"{owner}.beta={beta}: must be in [0, 1]")
        self._discrete, action_size = self._action_kind(owner, action_spec)
        self.encoder = EncodingNetwork(
            input_spec=self.network_input_spec,
            input_preprocessors=None,
            conv_layer_params=tuple(conv_layer_params) or None,
            fc_layer_params=tuple(fc_layer_params),
            activation="elu",
            lstm_hidden_size=None,
            last_layer_size=feature_size,
        )
        hidden = tuple(model_fc_layer_params)
        self.forward_model = _mlp(feature_size + action_size, hidden, feature_size)
        self.inverse_model = _mlp(2 * feature_size, hidden, action_size)
        self._action_size = action_size
        self._offset = int(np.asarray(action_spec.minimum)) if self._discrete else 0
        self.eta = eta
        self.loss_weights = {
            "icm_forward_loss": loss_weight * beta,
            "icm_inverse_loss": loss_weight * (1.0 - beta),
        }

    @staticmethod
    def _action_kind(owner: str, action_spec: Any) -> tuple[bool, int]:
        if isinstance(action_spec, BoundedTensorSpec):
            if action_spec.is_discrete and action_spec.shape == ():
                return True, action_spec.num_actions
            if not action_spec.is_discrete and len(action_spec.shape) == 1:
                return False, int(action_spec.shape[0])
        raise IntrinsicRewardError(
            f"{owner}'s inverse model predicts a Discrete or a 1-D Box action, got "
            f"{describe_spec(action_spec)}; use RNDReward, which needs no action"
        )

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.network_input(x))

    def _action_input(self, action: torch.Tensor) -> torch.Tensor:
        if self._discrete:
            return F.one_hot(action.long() - self._offset, self._action_size).to(torch.float32)
        return action.to(torch.float32).reshape(action.shape[0], -1)

    def _forward_error(
        self, features: torch.Tensor, action: torch.Tensor, next_features: torch.Tensor
    ) -> torch.Tensor:
        predicted = self.forward_model(torch.cat([features, self._action_input(action)], -1))
        return 0.5 * (predicted - next_features.detach()).square().mean(-1)

    @torch.no_grad()
    def bonus(self, observation: Any, action: Any, next_observation: Any) -> torch.Tensor:
        """``eta`` times the forward model's error on the ``[N]`` transitions."""
        features = self._features(self.select(observation))
        next_features = self._features(self.select(next_observation))
        return self.eta * self._forward_error(features, action, next_features)

    def training_inputs(self, exp: Experience) -> torch.Tensor:
        """The next observations (the encoded entry only) of the first ``T`` rows."""
        return self.select(exp.observation)[1:]

    def losses(self, observation: Any, action: Any, inputs: Any) -> dict[str, torch.Tensor]:
        """``icm_forward_loss`` and ``icm_inverse_loss`` of the ``[N]`` transitions
        (``inputs``: their next observations, from :meth:`training_inputs`)."""
        features = self._features(self.select(observation))
        next_features = self._features(inputs)
        forward = self._forward_error(features, action, next_features)
        predicted = self.inverse_model(torch.cat([features, next_features], -1))
        if self._discrete:
            inverse = F.cross_entropy(predicted, action.long() - self._offset, reduction="none")
        else:
            target = action.to(torch.float32).reshape(action.shape[0], -1)
            inverse = (predicted - target).square().mean(-1)
        return {"icm_forward_loss": forward, "icm_inverse_loss": inverse}
