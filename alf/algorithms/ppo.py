"""Proximal policy optimisation (clipped objective) on top of actor-critic.

The pieces of PPO's objective are module-level functions (and :class:`ClipSchedule`
holds the scheduled clip epsilon), so that other actor-critic methods, e.g.
:class:`~alf.algorithms.appo.AppoAlgorithm`, use the same code without subclassing PPO.
"""

from __future__ import annotations

from typing import Any

import torch

from alf.algorithms.actor_critic import ActorCriticAlgorithm, ActorCriticTrainInfo
from alf.config import configurable, invalid_value
from alf.data_structures import LossInfo
from alf.utils.schedules import Schedule, as_schedule

__all__ = [
    "ClipSchedule",
    "ClippedObjective",
    "PPOAlgorithm",
    "clip_fraction",
    "clipped_surrogate_loss",
    "clipped_value_loss",
]


def clipped_surrogate_loss(
    log_prob: torch.Tensor,
    behaviour_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
) -> torch.Tensor:
    """PPO's per-step clipped surrogate loss (to minimise).

    ``-min(r A, clip(r, 1 - clip, 1 + clip) A)`` with ``r = exp(log_prob -
    behaviour_log_prob)``, the ratio of the policy being trained to the one that
    chose the actions.

    Args:
        log_prob: log-probabilities of the actions under the policy being trained
            (with gradients).
        behaviour_log_prob: their log-probabilities under the policy that collected them.
        advantages: the advantages of the actions (no gradient).
        clip: the clip epsilon.

    Returns:
        The per-step loss, shaped like ``log_prob``.
    """
    ratio = torch.exp(log_prob - behaviour_log_prob)
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip)
    return -torch.minimum(ratio * advantages, clipped * advantages)


def clip_fraction(
    log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor, clip: float
) -> torch.Tensor:
    """The fraction of steps whose ratio ``exp(log_prob - behaviour_log_prob)`` lies
    outside ``[1 - clip, 1 + clip]`` (a 0-d tensor, without gradient)."""
    ratio = torch.exp(log_prob.detach() - behaviour_log_prob)
    return ((ratio - 1.0).abs() > clip).float().mean()


def clipped_value_loss(
    value: torch.Tensor,
    returns: torch.Tensor,
    old_value: torch.Tensor,
    value_clip: float | None,
) -> torch.Tensor:
    """Per-step squared error of ``value`` to ``returns``.

    With ``value_clip``, the new value is also clipped to ``old_value +- value_clip``
    and the larger of the clipped and unclipped errors is taken (PPO's value clipping).
    """
    error = (value - returns) ** 2
    if value_clip is None:
        return error
    clipped_value = old_value + (value - old_value).clamp(-value_clip, value_clip)
    return torch.maximum(error, (clipped_value - returns) ** 2)


class ClipSchedule:
    """A clip epsilon that follows a :class:`Schedule` of training progress.

    Args:
        clip: a number or a :class:`Schedule`; its value at progress 0 must be >= 0.
        name: the setting, for the error message (e.g. ``"PPOAlgorithm.clip"``).
    """

    def __init__(self, clip: float | Schedule, name: str = "clip") -> None:
        self._schedule = as_schedule(clip)
        self.value = self._schedule(0.0)
        if self.value < 0:
            raise invalid_value(name, self.value, ">= 0")

    def set_progress(self, progress: float) -> None:
        """Sets :attr:`value` to the schedule's value at ``progress``."""
        self.value = self._schedule(progress)


class ClippedObjective:
    """PPO's clipped policy and value losses for an :class:`ActorCriticAlgorithm`
    subclass (list it first among the bases): the scheduled ``clip``, ``policy_loss``,
    ``value_loss``, and ``clip_fraction`` in ``calc_loss``'s statistics (on the
    iterations that record them, see ``RLAlgorithm.record_statistics``). The subclass
    calls :meth:`_set_clip` in its constructor."""

    def _set_clip(self, clip: float | Schedule, value_clip: float | None) -> None:
        self._clip = ClipSchedule(clip, name=f"{type(self).__name__}.clip")
        self.value_clip = value_clip

    @property
    def clip(self) -> float:
        """The current ratio clip epsilon."""
        return self._clip.value

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        self._clip.set_progress(progress)

    def policy_loss(self, info: ActorCriticTrainInfo, advantages: torch.Tensor) -> torch.Tensor:
        return clipped_surrogate_loss(info.log_prob, info.rollout.log_prob, advantages, self.clip)

    def value_loss(self, info: ActorCriticTrainInfo) -> torch.Tensor:
        rollout = info.rollout
        return clipped_value_loss(info.value, rollout.returns, rollout.value, self.value_clip)

    def calc_loss(self, info: ActorCriticTrainInfo) -> LossInfo:
        loss_info = super().calc_loss(info)
        if not self.record_statistics:
            return loss_info
        fraction = clip_fraction(info.log_prob, info.rollout.log_prob, self.clip)
        return loss_info._replace(extra={**loss_info.extra, "clip_fraction": fraction})


@configurable
class PPOAlgorithm(ClippedObjective, ActorCriticAlgorithm):
    """PPO: actor-critic with a clipped importance ratio, trained for several epochs.

    Args:
        clip: the ratio clip epsilon, a number or a :class:`Schedule`.
        value_clip: if given, clip the new value to ``old_value +- value_clip`` and take
            the larger of the clipped and unclipped errors.
        normalize_advantages: normalise advantages per mini-batch (default True).
        num_epochs: passes over each trajectory (default 10).
        mini_batch_size: steps per update: an int >= 1 (default 64), or None for one
            update on the whole trajectory.
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
        self._set_clip(clip, value_clip)
