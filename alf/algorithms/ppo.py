"""Proximal policy optimisation (clipped objective) on top of actor-critic.

:class:`PPOAlgorithm` is :class:`~alf.algorithms.actor_critic.ActorCriticAlgorithm`'s
networks, rollout and GAE targets with the clipped objective of a
:class:`~alf.algorithms.clipped_surrogate.ClippedSurrogate` (its ``objective``), trained
for several epochs of mini-batches, optionally stopped early by ``target_kl``. Its whole
loss is :meth:`PPOAlgorithm.calc_loss`.
"""

from __future__ import annotations

from typing import Any

import torch

from alf.algorithms.actor_critic import ActorCriticAlgorithm, ActorCriticTrainInfo
from alf.algorithms.clipped_surrogate import (
    ClippedSurrogate,
    ClipSchedule,
    clip_fraction,
    clipped_surrogate_loss,
    clipped_value_loss,
)
from alf.algorithms.rl_algorithm import LearningSetup
from alf.config import configurable, invalid_value
from alf.data_structures import Experience, LossInfo
from alf.utils.schedules import Schedule

__all__ = [
    "ClipSchedule",
    "ClippedSurrogate",
    "PPOAlgorithm",
    "clip_fraction",
    "clipped_surrogate_loss",
    "clipped_value_loss",
]


@configurable
class PPOAlgorithm(ActorCriticAlgorithm):
    """PPO: actor-critic with a clipped importance ratio, trained for several epochs.

    Summaries (``train/...`` in TensorBoard and ``progress.jsonl``), besides the loss
    terms: ``clip_fraction`` (the share of steps with ``|ratio - 1| > clip``) and
    ``approx_kl`` (``mean((ratio - 1) - log ratio)``, the KL of the behaviour policy to
    the one being trained, measured before each update), both averaged over the
    iteration's updates; ``explained_variance`` (``1 - Var[returns - values] /
    Var[returns]`` over the trajectory's steps, with the values predicted during
    collection); and ``epochs_run``, the epochs the iteration started (``num_epochs``
    unless ``target_kl`` stopped it). They are computed without gradients or random
    numbers, on the iterations whose summary is written (``approx_kl`` on every update
    when ``target_kl`` is set).

    Args:
        clip: the ratio clip epsilon, a number or a :class:`Schedule`.
        value_clip: if given, clip the new value to ``old_value +- value_clip`` and take
            the larger of the clipped and unclipped errors.
        normalize_advantages: normalise advantages per mini-batch (default True).
        num_epochs: passes over each trajectory (default 10).
        mini_batch_size: steps per update: an int >= 1 (default 64), or None for one
            update on the whole trajectory.
        target_kl: None (the default) trains every epoch. A number > 0: after an update
            whose mini-batch's ``approx_kl`` (measured before that update) exceeds it,
            the iteration's remaining mini-batches and epochs are skipped (that update
            is kept). Stable-Baselines3 stops at ``1.5 * target_kl`` and skips that
            update; for the same threshold, bind 1.5 times its value. Not supported in
            data-parallel runs (the ranks would have to agree on every update).
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
        target_kl: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            normalize_advantages=normalize_advantages,
            num_epochs=num_epochs,
            mini_batch_size=mini_batch_size,
            **kwargs,
        )
        owner = type(self).__name__
        self.objective = ClippedSurrogate(clip=clip, value_clip=value_clip, owner=owner)
        if target_kl is not None and not (
            isinstance(target_kl, int | float) and not isinstance(target_kl, bool) and target_kl > 0
        ):
            raise invalid_value(f"{owner}.target_kl", target_kl, "a number > 0, or None")
        self.target_kl = target_kl

    @property
    def clip(self) -> float:
        """The current ratio clip epsilon."""
        return self.objective.clip

    @property
    def value_clip(self) -> float | None:
        """The value clip (None: the value loss is not clipped)."""
        return self.objective.value_clip

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        self.objective.set_progress(progress)

    def calc_loss(self, info: ActorCriticTrainInfo) -> LossInfo:
        """PPO's loss: the clipped surrogate, plus ``value_loss_coef`` times the
        (optionally clipped) squared error to the GAE returns, minus ``entropy_coef``
        times the entropy (means over the mini-batch); ``clip_fraction`` in ``extra``
        when :attr:`record_statistics` is set."""
        rollout = info.rollout
        objective = self.objective
        advantages = self.advantages(info)
        pg_loss = objective.policy_loss(info.log_prob, rollout.log_prob, advantages).mean()
        value_loss = objective.value_loss(info.value, rollout.returns, rollout.value).mean()
        loss = pg_loss + self.value_loss_coef * value_loss
        entropy = self.mean_entropy(info)
        if entropy is not None:
            loss = loss - self.entropy_coef * entropy
        extra = self.loss_terms(info, pg_loss=pg_loss, value_loss=value_loss, entropy=entropy)
        loss = self.add_intrinsic_loss(info, loss, extra, objective.value_loss)
        if self.record_statistics:
            extra["clip_fraction"] = objective.clip_fraction(info.log_prob, rollout.log_prob)
        return LossInfo(loss=loss, extra=extra)

    def update_statistics(self, info: ActorCriticTrainInfo) -> dict[str, torch.Tensor]:
        """``approx_kl`` of the mini-batch, when summarised or needed by ``target_kl``."""
        if not self.record_statistics and self.target_kl is None:
            return {}
        return self.objective.update_statistics(info.log_prob, info.rollout.log_prob)

    def trajectory_statistics(self, exp: Experience, valid: torch.Tensor) -> dict[str, Any]:
        """``explained_variance`` of the values predicted during collection."""
        info = exp.rollout_info
        stats = super().trajectory_statistics(exp, valid)
        return {**stats, **self.objective.trajectory_statistics(info.value, info.returns, valid)}

    def stop_epochs(self, loss_info: LossInfo) -> bool:
        """Whether the mini-batch's ``approx_kl`` exceeds ``target_kl`` (never when it
        is None). Reads the value on the host: with ``target_kl``, every update waits
        for the device."""
        if self.target_kl is None:
            return False
        return float(loss_info.extra["approx_kl"]) > self.target_kl

    def prepare_learning(self, setup: LearningSetup) -> None:
        super().prepare_learning(setup)
        if setup.data_parallel and self.target_kl is not None:
            raise ValueError(
                f"{type(self).__name__}.target_kl={self.target_kl}: early stopping is not "
                "supported in data-parallel runs; leave it None"
            )

    def train_from_unroll(self, exp: Experience) -> dict[str, Any]:
        stats = super().train_from_unroll(exp)
        stats["epochs_run"] = self.epochs_run
        return stats
