"""An intrinsic reward inside an actor-critic algorithm (PPO, APPO, A2C).

:class:`IntrinsicCritic` is what :class:`~alf.algorithms.ActorCriticAlgorithm` holds (as
``intrinsic``) when it is given an ``intrinsic_reward_ctor``: the
:class:`~alf.algorithms.intrinsic.IntrinsicReward` and a second value network, the
*intrinsic value head*, with its own discount (the reward's ``gamma``). On the learner,
for each ``[T+1, B]`` trajectory (:meth:`IntrinsicCritic.targets`, without autograd):

1. the bonus of every transition (normalised, 0 after a LAST row);
2. the intrinsic values of all ``T + 1`` rows, in one batched call (collection does not
   compute them: the actors' work and the stored experience stay those of the algorithm
   without a bonus);
3. the intrinsic advantages and returns, *non-episodic* as in Burda et al. (2018): the
   chain of intrinsic returns runs on across episode ends (every step MID, every
   discount 1), so that the agent is not taught that ending an episode ends its
   curiosity; computed by the algorithm's own estimator (GAE for PPO and A2C, V-trace
   for APPO);
4. the advantage the policy is trained on: ``ext_coef * A_ext + int_coef * A_int``.

In each update, :meth:`IntrinsicCritic.train_info` recomputes the intrinsic value with
gradient and the reward's losses (the predictor's, or ICM's models'), and
:meth:`IntrinsicCritic.loss` adds ``value_loss_coef`` times the intrinsic value loss
and the reward's weighted losses to the algorithm's loss: one optimizer step trains all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn as nn

from alf import nest
from alf.algorithms.intrinsic.base import IntrinsicReward, IntrinsicRewardError
from alf.data_structures import Experience, StepType
from alf.networks import state_spec_of

__all__ = ["Estimator", "IntrinsicCritic", "IntrinsicTargets", "IntrinsicTrainInfo"]

Estimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]
"""``estimator(rewards=, values=, step_types=, discounts=, gamma=)`` of ``[T+1, B]``
tensors -> ``(advantages, returns)``, both ``[T, B]`` (e.g. GAE with the algorithm's
lambda)."""


class IntrinsicTargets(NamedTuple):
    """Kept in ``rollout_info.intrinsic`` for the ``T`` rows of a preprocessed trajectory."""

    value: torch.Tensor
    returns: torch.Tensor
    inputs: Any = ()


class IntrinsicTrainInfo(NamedTuple):
    """What an update recomputes with gradient: the intrinsic values and the reward's
    per-row losses."""

    value: torch.Tensor
    losses: dict[str, torch.Tensor]


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, *x.shape[2:])


class IntrinsicCritic(nn.Module):
    """An intrinsic reward and its value head (see the module docstring).

    Args:
        reward: the intrinsic reward.
        value_network: a stateless network ``observation -> [B]`` values.
        owner: the algorithm's name, for error messages.

    Raises:
        IntrinsicRewardError: the value network is recurrent.
    """

    def __init__(self, *, reward: IntrinsicReward, value_network: nn.Module, owner: str) -> None:
        super().__init__()
        if nest.flatten(state_spec_of(value_network)):
            raise IntrinsicRewardError(
                f"{owner}.intrinsic_value_network_ctor built a recurrent network; the "
                "intrinsic value head must be stateless (e.g. ValueNetwork without "
                "lstm_hidden_size)"
            )
        self.reward = reward
        self.value_network = value_network
        self.statistics: dict[str, torch.Tensor] = {}

    def values(self, observation: Any) -> torch.Tensor:
        """The intrinsic values of a ``[T, B, ...]`` observation nest (``[T, B]``)."""
        outer = nest.flatten(observation)[0].shape[:2]
        return self.value_network(nest.map_structure(_flat, observation)).reshape(outer)

    @torch.no_grad()
    def targets(
        self, exp: Experience, ext_advantage: torch.Tensor, estimator: Estimator
    ) -> tuple[torch.Tensor, IntrinsicTargets]:
        """The combined ``[T, B]`` advantage of a ``[T+1, B]`` trajectory and its
        intrinsic targets (see the module docstring); keeps the bonus's statistics in
        :attr:`statistics`."""
        reward = self.reward
        bonus, stats = reward.trajectory_bonus(exp)
        values = self.values(exp.observation)
        rewards = torch.cat([torch.zeros_like(bonus[:1]), bonus])
        advantage, returns = estimator(
            rewards=rewards,
            values=values,
            step_types=torch.full_like(exp.step_type, StepType.MID),
            discounts=torch.ones_like(exp.discount),
            gamma=reward.gamma,
        )
        stats["intrinsic/value_mean"] = values.mean()
        self.statistics = stats
        combined = reward.ext_coef * ext_advantage + reward.int_coef * advantage
        targets = IntrinsicTargets(
            value=values[:-1], returns=returns, inputs=reward.training_inputs(exp)
        )
        return combined, targets

    def train_info(self, observation: Any, action: Any, targets: Any) -> Any:
        """The :class:`IntrinsicTrainInfo` of a mini-batch of ``[N]`` steps, or ``()``
        when ``targets`` is not an :class:`IntrinsicTargets` (outside training on a
        preprocessed trajectory, e.g. APPO's recomputation of its own values)."""
        if not isinstance(targets, IntrinsicTargets):
            return ()
        return IntrinsicTrainInfo(
            value=self.value_network(observation),
            losses=self.reward.losses(observation, action, targets.inputs),
        )

    def train_sequence_info(self, observation: Any, action: Any, targets: Any) -> Any:
        """:meth:`train_info` of ``[L, B]`` sequences, as ``[L, B]`` tensors."""
        if not isinstance(targets, IntrinsicTargets):
            return ()
        outer = nest.flatten(observation)[0].shape[:2]
        info = self.train_info(
            nest.map_structure(_flat, observation),
            nest.map_structure(_flat, action),
            nest.map_structure(_flat, targets),
        )
        return nest.map_structure(lambda x: x.reshape(*outer, *x.shape[1:]), info)

    def loss(
        self,
        info: IntrinsicTrainInfo,
        targets: IntrinsicTargets,
        *,
        value_loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        value_loss_coef: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """What the intrinsic parts add to the algorithm's loss: ``value_loss_coef``
        times the mean of ``value_loss(value, returns, old_value)`` (the algorithm's own,
        e.g. PPO's clipped one) for the intrinsic head, plus the reward's weighted
        losses; and their terms for the summaries (``intrinsic/value_loss``,
        ``intrinsic/<loss>``)."""
        int_value_loss = value_loss(info.value, targets.returns, targets.value).mean()
        reward_loss, extra = self.reward.weighted_loss(info.losses)
        extra["intrinsic/value_loss"] = int_value_loss.detach()
        return value_loss_coef * int_value_loss + reward_loss, extra
