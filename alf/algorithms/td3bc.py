"""TD3+BC: TD3 whose actor is also pulled towards the data's actions."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from alf.algorithms.ddpg import DdpgInfo
from alf.algorithms.off_policy_algorithm import detached_call, masked_mean, valid_transitions
from alf.algorithms.offline_rl import first_row, normalized_squared_error, prepare_offline_data
from alf.algorithms.rl_algorithm import LearningSetup
from alf.algorithms.td3 import Td3Algorithm
from alf.config import configurable, invalid_value
from alf.data_structures import AlgStep, Experience, LossInfo

__all__ = ["Td3BcAlgorithm", "Td3BcInfo"]


class Td3BcInfo(NamedTuple):
    """What :meth:`Td3BcAlgorithm.train_step` hands to ``calc_loss``: TD3's, and the
    ``[B]`` behaviour-cloning error of the actor (zeros between actor updates)."""

    td3: DdpgInfo
    bc_error: torch.Tensor


@configurable
class Td3BcAlgorithm(Td3Algorithm):
    """TD3+BC (Fujimoto & Gu, 2021): :class:`Td3Algorithm` whose actor minimises
    ``-lambda * Q(s, pi(s)) + (pi(s) - a)^2`` on the data's actions ``a``, with
    ``lambda = bc_alpha / mean|Q(s, pi(s))|`` (the mean over the mini-batch, without
    gradient) and the squared error averaged over the action's elements in units of
    half the action range (the paper's ``[-1, 1]`` actions). Critics, targets (twin,
    clipped target-policy noise) and the delayed actor are TD3's.

    The paper normalises states with the dataset's mean and standard deviation: use an
    :class:`~alf.data_transformers.ObservationNormalizer` in
    ``TrainerConfig.data_transformer_ctor`` (``clip_value = None`` as the paper has it);
    before training, a new normalizer starts from the moments of the whole offline data
    (:func:`~alf.algorithms.offline_rl.prepare_offline_data`), and with
    ``update_mode = "rollout"`` it keeps them while training offline.

    Args:
        bc_alpha: the paper's ``alpha`` (2.5): the weight of the Q term against the
            behaviour-cloning term.
        **kwargs: :class:`Td3Algorithm` arguments (networks, ``gamma``, noise, periods,
            mini-batches, learning rate).
    """

    needs_offline_data = True

    def __init__(self, *, bc_alpha: float = 2.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(bc_alpha, bool) or not bc_alpha > 0:
            raise invalid_value(f"{type(self).__name__}.bc_alpha", bc_alpha, "a number > 0")
        self.bc_alpha = float(bc_alpha)
        self.register_buffer("_half_range", (self._high - self._low) / 2)

    def prepare_learning(self, setup: LearningSetup) -> None:
        """:meth:`OffPolicyAlgorithm.prepare_learning`, then starts fresh data
        transformers (the state normaliser) from the offline data."""
        super().prepare_learning(setup)
        prepare_offline_data(self, return_range=None)

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        target = self._target(exp)
        observation, data_action = first_row(exp.observation), first_row(exp.action)
        critics = self.critic_network(observation, data_action)
        valid = valid_transitions(exp)
        actor_loss = bc_error = torch.zeros_like(target)
        if self._actor_update_due():
            action = self.actor_network(observation)
            q = detached_call(self.critic_network, observation, action)[:, 0]
            lam = self.bc_alpha / masked_mean(q.detach().abs(), valid).clamp(min=1e-6)
            bc_error = normalized_squared_error(action, data_action, self._half_range)
            actor_loss = bc_error - lam * q
        td3 = DdpgInfo(
            critics=critics,
            target=target,
            actor_loss=actor_loss,
            valid=valid,
            weights=exp.batch_info.importance_weights,
        )
        return AlgStep(state=state, info=Td3BcInfo(td3=td3, bc_error=bc_error))

    def calc_loss(self, info: Td3BcInfo) -> LossInfo:  # type: ignore[override]
        loss_info = super().calc_loss(info.td3)
        bc_error = masked_mean(info.bc_error.detach(), info.td3.valid)
        extra = {**loss_info.extra, "bc_error": bc_error}
        return LossInfo(loss=loss_info.loss, extra=extra, priority=loss_info.priority)
