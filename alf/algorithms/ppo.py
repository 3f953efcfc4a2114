"""Proximal policy optimisation (clipped objective) on top of actor-critic."""

from __future__ import annotations

from typing import Any

import torch

from alf.algorithms.actor_critic import ActorCriticAlgorithm, ActorCriticTrainInfo
from alf.config import configurable
from alf.data_structures import LossInfo
from alf.utils.schedules import Schedule, as_schedule

__all__ = ["PPOAlgorithm"]


@configurable
class PPOAlgorithm(ActorCriticAlgorithm):
    """PPO: actor-critic with a clipped importance ratio, trained for several epochs.

    Args:
        clip: the ratio clip epsilon, a number or a :class:`Schedule`.
        value_clip: if given, clip the new value to ``old_value +- value_clip`` and take
            the larger of the clipped and unclipped errors.
        normalize_advantages: normalise advantages per mini-batch (default True).
        num_epochs: passes over each trajectory (default 10).
        mini_batch_size: steps per update (default 64).
        **kwargs: see :class:`ActorCriticAlgorithm`.
    """

    def __init__(
        self,
        *,
        clip: float | Schedule = 0.2,
        value_clip: float | None = None,
        normalize_advantages: bool = True,
        num_epochs: int = 10,
        mini_batch_size: int | None = 64,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            normalize_advantages=normalize_advantages,
            num_epochs=num_epochs,
            mini_batch_size=mini_batch_size,
            **kwargs,
        )
        self._clip_schedule = as_schedule(clip)
        self.clip = self._clip_schedule(0.0)
        self.value_clip = value_clip

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        self.clip = self._clip_schedule(progress)

    def policy_loss(self, info: ActorCriticTrainInfo, advantages: torch.Tensor) -> torch.Tensor:
        ratio = torch.exp(info.log_prob - info.rollout.log_prob)
        clipped = ratio.clamp(1.0 - self.clip, 1.0 + self.clip)
        return -torch.minimum(ratio * advantages, clipped * advantages)

    def value_loss(self, info: ActorCriticTrainInfo) -> torch.Tensor:
        error = (info.value - info.rollout.returns) ** 2
        if self.value_clip is None:
            return error
        old = info.rollout.value
        clipped_value = old + (info.value - old).clamp(-self.value_clip, self.value_clip)
        return torch.maximum(error, (clipped_value - info.rollout.returns) ** 2)

    def calc_loss(self, info: ActorCriticTrainInfo) -> LossInfo:
        loss_info = super().calc_loss(info)
        ratio = torch.exp(info.log_prob.detach() - info.rollout.log_prob)
        clip_fraction = ((ratio - 1.0).abs() > self.clip).float().mean()
        return loss_info._replace(extra={**loss_info.extra, "clip_fraction": clip_fraction})
