"""Random network distillation (Burda et al., 2018, "Exploration by Random Network
Distillation").

A fixed, randomly initialised *target* network maps each (normalised) observation to a
feature vector; a *predictor* network is trained to reproduce it on the observations the
agent visits. The prediction error is large on observations unlike those seen before
and falls as they are revisited: it is the bonus, ``||predictor(s') - target(s')||^2 /
k`` (``k`` features), for arriving at ``s'``.

As in the paper: observations are normalised by their running mean and std, element by
element, and clipped to ``[-5, 5]`` (the statistics are updated from every trajectory
before its bonus is computed, so the first iteration is normalised by its own
statistics rather than by those of a separate random-agent phase); the bonus is divided
by the running std of the intrinsic returns (:class:`~alf.algorithms.intrinsic.
normalizers.ReturnNormalizer`); the predictor is trained on a random ``update_proportion``
of the rows of every mini-batch; the actor-critic algorithms give the intrinsic return
its own value head and discount and treat it as non-episodic (see
:mod:`alf.algorithms.intrinsic.actor_critic`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from alf import nest
from alf.algorithms.intrinsic.base import IntrinsicReward, IntrinsicRewardError
from alf.algorithms.intrinsic.normalizers import RunningMeanStd
from alf.config import configurable
from alf.networks import EncodingNetwork
from alf.networks.conv_encoder import ConvLayerParams
from alf.tensor_specs import TensorSpec
from alf.utils.schedules import Schedule

__all__ = ["RNDReward"]

OBSERVATION_CLIP = 5.0
"""Normalised observations are clipped to ``[-OBSERVATION_CLIP, OBSERVATION_CLIP]``."""


def _rnd_network(
    input_spec: TensorSpec,
    conv_layer_params: ConvLayerParams,
    fc_layer_params: Sequence[int],
    output_size: int,
) -> EncodingNetwork:
    # Every option is passed, so gin bindings of EncodingNetwork (e.g. a config's
    # conv_layer_params for the policy) do not reach RND's networks.
    return EncodingNetwork(
        input_spec=input_spec,
        input_preprocessors=None,
        conv_layer_params=tuple(conv_layer_params) or None,
        fc_layer_params=tuple(fc_layer_params),
        activation="leaky_relu",
        lstm_hidden_size=None,
        last_layer_size=output_size,
        last_layer_gain=2**0.5,
    )


@configurable
class RNDReward(IntrinsicReward):
    """The RND bonus: the predictor's error on the target's features of ``s'``.

    Defaults (chosen for MiniGrid-sized observations on a CPU, see
    ``docs/exploration.md``): an MLP of two 128-unit layers to 64 features for the
    target, one more 128-unit layer for the predictor (the paper's predictor is also
    deeper than its target); with ``conv_layer_params`` both first run convolutions on a
    ``[C, H, W]`` image (the paper's Atari networks: ``((32, 8, 4), (64, 4, 2), (64, 3,
    1))``). The networks see the observation (or its ``observation_key`` entry)
    normalised and clipped to ``[-5, 5]``. Coefficients as in the paper: ``int_coef``
    1, ``ext_coef`` 2, intrinsic discount 0.99.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: spec of one action (unused: RND scores states).
        observation_key: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        fc_layer_params: the target's hidden layers (the predictor adds one more of the
            last width).
        output_size: the number of features.
        conv_layer_params: convolutions before the fully connected layers (a ``[C, H,
            W]`` image only); ``()``: none, the observation is flattened.
        update_proportion: the share of each mini-batch's rows the predictor is trained
            on (the paper: 0.25 with 128 environments; 1.0 suits a few environments).
        int_coef: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        ext_coef: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        gamma: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        normalize_reward: see :class:`~alf.algorithms.intrinsic.IntrinsicReward`.
        loss_weight: the weight of the predictor's loss in the algorithm's loss.

    Raises:
        IntrinsicRewardError: an observation it cannot encode, convolutions on an
            observation that is not a ``[C, H, W]`` image, or ``update_proportion`` not
            in ``(0, 1]``.
    """

    name = "rnd"

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        observation_key: str | None = None,
        fc_layer_params: Sequence[int] = (128, 128),
        output_size: int = 64,
        conv_layer_params: ConvLayerParams = (),
        update_proportion: float = 1.0,
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
        if not 0.0 < update_proportion <= 1.0:
            raise IntrinsicRewardError(
                f"{owner}.update_proportion={update_proportion}: must be in (0, 1]"
            )
        net_spec = self.network_input_spec
        self.observation_normalizer = RunningMeanStd(shape=net_spec.shape)
        hidden = tuple(fc_layer_params)
        self.target_network = _rnd_network(net_spec, conv_layer_params, hidden, output_size)
        self.predictor_network = _rnd_network(
            net_spec, conv_layer_params, hidden + hidden[-1:], output_size
        )
        for parameter in self.target_network.parameters():
            parameter.requires_grad_(False)
        self.update_proportion = update_proportion
        self.loss_weights = {"rnd_loss": loss_weight}

    def _normalized(self, observation: Any) -> torch.Tensor:
        x = self.network_input(self.select(observation))
        return self.observation_normalizer.normalize(x, OBSERVATION_CLIP)

    def observe(self, observation: Any) -> None:
        """Adds the ``[N, ...]`` observations to the normalisation statistics."""
        self.observation_normalizer.update(self.network_input(self.select(observation)))

    def _error(self, observation: Any) -> torch.Tensor:
        x = self._normalized(observation)
        with torch.no_grad():
            target = self.target_network(x)
        return (self.predictor_network(x) - target).square().mean(-1)

    @torch.no_grad()
    def bonus(self, observation: Any, action: Any, next_observation: Any) -> torch.Tensor:
        """The predictor's mean squared error on the target's features of
        ``next_observation`` (``[N]``)."""
        return self._error(next_observation)

    def losses(self, observation: Any, action: Any, inputs: Any) -> dict[str, torch.Tensor]:
        """``rnd_loss``: the predictor's ``[N]`` errors on ``observation`` (every state
        the agent visits is some transition's ``s'``). With ``update_proportion = p <
        1``, computed on a random ``ceil(p * N)`` rows only (the others cost nothing and
        are 0; the kept ones are divided by ``p``, so the mean keeps its scale)."""
        if self.update_proportion >= 1.0:
            return {"rnd_loss": self._error(observation)}
        first = nest.flatten(observation)[0]
        rows = first.shape[0]
        keep = max(1, math.ceil(self.update_proportion * rows))
        index = torch.randperm(rows, device=first.device)[:keep]
        error = self._error(nest.map_structure(lambda x: x[index], observation))
        full = torch.zeros(rows, device=error.device, dtype=error.dtype)
        return {"rnd_loss": full.index_put((index,), error * (rows / keep))}
