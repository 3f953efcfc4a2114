"""PPO's clipped objective as a component, and the diagnostics PPO users read.

:class:`ClippedSurrogate` is held by the algorithms that train with PPO's clipped
objective (:class:`~alf.algorithms.PPOAlgorithm`,
:class:`~alf.algorithms.AppoAlgorithm`) as their ``objective`` attribute: the scheduled
clip epsilon, the clipped policy and value losses, and the statistics of a mini-batch
(``clip_fraction``, ``approx_kl``) and of a trajectory (``explained_variance``). It is a
plain object, not a module: it holds no parameters and adds no checkpoint keys.

The per-step pieces are module-level functions, so that other code can use them
without the component.
"""

from __future__ import annotations

import math

import torch

from alf.config import invalid_value
from alf.utils.schedules import Schedule, as_schedule

__all__ = [
    "ClipSchedule",
    "ClippedSurrogate",
    "approx_kl",
    "clip_fraction",
    "clipped_surrogate_loss",
    "clipped_value_loss",
    "explained_variance",
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
    outside ``[1 - clip, 1 + clip]``, i.e. ``|ratio - 1| > clip`` (a 0-d tensor, without
    gradient)."""
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


def approx_kl(log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor) -> torch.Tensor:
    """The low-variance estimate of ``KL(behaviour || current)`` over a mini-batch.

    ``mean((r - 1) - log r)`` with ``log r = log_prob - behaviour_log_prob`` (the
    estimator CleanRL and Stable-Baselines3 log as ``approx_kl``): unbiased, and every
    term is ``>= 0``.

    Args:
        log_prob: log-probabilities of the actions under the policy being trained
            (its gradient is not followed).
        behaviour_log_prob: their log-probabilities under the policy that collected them.

    Returns:
        A 0-d tensor without gradient.
    """
    log_ratio = log_prob.detach() - behaviour_log_prob
    return ((torch.exp(log_ratio) - 1.0) - log_ratio).mean()


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """How much of the returns' variance the value predictions explain.

    ``1 - Var[returns - values] / Var[returns]`` (population variances): 1 for perfect
    predictions, 0 for a constant one, negative when the predictions are worse than a
    constant; NaN when the returns do not vary (as in Stable-Baselines3).

    Args:
        values: the value predictions, any shape.
        returns: the targets, shaped like ``values``.

    Returns:
        A 0-d tensor without gradient.
    """
    values, returns = values.detach(), returns.detach()
    var_returns = returns.var(unbiased=False)
    ratio = (returns - values).var(unbiased=False) / var_returns
    return torch.where(var_returns > 0, 1.0 - ratio, math.nan)


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


class ClippedSurrogate:
    """PPO's clipped objective: what an algorithm that trains with it holds.

    The algorithm writes its own ``calc_loss`` with :meth:`policy_loss` and
    :meth:`value_loss` (per step; it takes the means and adds its entropy bonus), calls
    :meth:`set_progress` from its own ``set_progress``, and reports
    :meth:`clip_fraction`, :meth:`update_statistics` and
    :meth:`trajectory_statistics` (see
    :meth:`~alf.algorithms.OnPolicyAlgorithm.update_statistics`).

    Args:
        clip: the ratio clip epsilon, a number or a :class:`Schedule` of training
            progress (>= 0).
        value_clip: if given, :meth:`value_loss` also clips the new value to ``old_value
            +- value_clip`` and takes the larger of the clipped and unclipped errors.
        owner: the configurable that holds it, for error messages (e.g.
            ``"PPOAlgorithm"``).
    """

    def __init__(
        self, *, clip: float | Schedule, value_clip: float | None, owner: str = "PPOAlgorithm"
    ) -> None:
        self._clip = ClipSchedule(clip, name=f"{owner}.clip")
        self.value_clip = value_clip

    @property
    def clip(self) -> float:
        """The current ratio clip epsilon."""
        return self._clip.value

    def set_progress(self, progress: float) -> None:
        """Moves the clip epsilon to its schedule's value at ``progress`` (``0..1``)."""
        self._clip.set_progress(progress)

    def policy_loss(
        self,
        log_prob: torch.Tensor,
        behaviour_log_prob: torch.Tensor,
        advantages: torch.Tensor,
    ) -> torch.Tensor:
        """The per-step clipped surrogate loss (:func:`clipped_surrogate_loss`)."""
        return clipped_surrogate_loss(log_prob, behaviour_log_prob, advantages, self.clip)

    def value_loss(
        self, value: torch.Tensor, returns: torch.Tensor, old_value: torch.Tensor
    ) -> torch.Tensor:
        """The per-step (optionally clipped) squared error (:func:`clipped_value_loss`)."""
        return clipped_value_loss(value, returns, old_value, self.value_clip)

    def clip_fraction(
        self, log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor
    ) -> torch.Tensor:
        """The fraction of steps clipped at the current epsilon (:func:`clip_fraction`)."""
        return clip_fraction(log_prob, behaviour_log_prob, self.clip)

    @staticmethod
    def update_statistics(
        log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """A mini-batch's ``approx_kl`` (:func:`approx_kl`), computed from the
        log-probabilities of the loss without gradients or random numbers."""
        return {"approx_kl": approx_kl(log_prob, behaviour_log_prob)}

    @staticmethod
    def trajectory_statistics(
        values: torch.Tensor, returns: torch.Tensor, valid: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """A trajectory's ``explained_variance`` (:func:`explained_variance`) of the
        value predictions stored with its steps, over the steps where ``valid``."""
        return {"explained_variance": explained_variance(values[valid], returns[valid])}
