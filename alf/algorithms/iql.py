"""IQL: implicit Q-learning, in-sample value learning with an advantage-weighted actor."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.distributions as td
import torch.nn as nn

from alf.algorithms.off_policy_algorithm import (
    OffPolicyAlgorithm,
    bootstrap_observations,
    critic_loss,
    masked_mean,
    n_step_target,
    valid_transitions,
)
from alf.algorithms.offline_rl import check_action_box, first_row, prepare_offline_data
from alf.algorithms.rl_algorithm import LearningSetup
from alf.config import configurable, invalid_value
from alf.data_structures import AlgStep, Experience, LossInfo, TimeStep
from alf.networks import ActorDistributionNetwork, CriticNetwork, ValueNetwork, require_stateless
from alf.tensor_specs import action_bounds
from alf.utils.distributions import diag_normal
from alf.utils.schedules import Schedule
from alf.utils.target_update import TargetUpdater, make_target

__all__ = ["IqlAlgorithm", "IqlInfo", "expectile_loss"]


_MIN_STD, _MAX_STD = math.exp(-5.0), math.exp(2.0)  # d3rlpy's log-std bounds


class IqlInfo(NamedTuple):
    """What :meth:`IqlAlgorithm.train_step` hands to ``calc_loss`` (``[B]`` or
    ``[B, replicas]``)."""

    critics: torch.Tensor
    target: torch.Tensor
    value: torch.Tensor
    value_target: torch.Tensor
    actor_loss: torch.Tensor
    advantage: torch.Tensor
    valid: torch.Tensor
    weights: torch.Tensor


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """``|expectile - 1(diff < 0)| * diff^2``, elementwise: the asymmetric squared loss
    whose minimiser over a constant is the ``expectile`` of ``diff``'s distribution."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return weight * diff**2


@configurable
class IqlAlgorithm(OffPolicyAlgorithm):
    """IQL (Kostrikov, Nair & Levine, 2021) for continuous actions: never queries the
    value of an action outside the data.

    - ``V(s)`` fits an upper ``expectile`` of ``min_i Q_target_i(s, a)`` over the data's
      actions ``a`` (the expectile loss, :func:`expectile_loss`);
    - twin ``Q_i(s, a)`` fit ``r + gamma * V(s')`` (n-step with ``mini_batch_length > 2``);
    - the actor, a Gaussian with a state-independent standard deviation, maximises the
      log-likelihood of the data's actions weighted by ``exp(beta * (Q_target - V))``,
      clipped at ``max_weight`` (advantage-weighted regression). With ``squash_mean``
      (the default, as d3rlpy's and CORL's IQL) its mean is the network's output
      through ``tanh``, scaled to the action bounds, and its log-std is clamped to
      [-5, 2]; the Normal itself is not squashed, so data actions on the bounds keep a
      finite likelihood.

    The three losses are summed and take one optimizer step (each touches its own
    network only). The target critics follow by Polyak averaging. Evaluation takes the
    Gaussian's mean, rollouts (offline-to-online fine-tuning, a hybrid run) a sample;
    both clipped to the action bounds.

    Rewards: with ``return_range`` (the paper's, CORL's and d3rlpy's 1000 for MuJoCo
    locomotion), rewards are scaled before training so that the episode returns of the
    offline data span ``return_range``
    (:func:`~alf.algorithms.offline_rl.prepare_offline_data`), online steps of a
    hybrid run by the same factor; then by ``reward_scale``.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: a continuous bounded spec of one action.
        actor_network_ctor: builds the actor's Normal distribution from ``input_spec,
            action_spec`` (``squash=False``, ``state_dependent_std=False`` and
            ``std_transform="exp"`` are set).
        critic_network_ctor: builds ``Q(s, a)`` from ``input_spec=(obs, act)``.
        value_network_ctor: builds ``V(s)`` from ``input_spec``.
        num_critic_replicas: number of critics (2); targets use their minimum.
        gamma: discount factor.
        expectile: ``tau`` of the value loss (0.7 for MuJoCo, 0.9 for AntMaze).
        beta: inverse temperature of the advantage weights (3.0 for MuJoCo).
        max_weight: the advantage weights are clipped at this (100).
        squash_mean: the actor's mean through ``tanh`` into the action bounds, its log-std
            clamped to [-5, 2] (see above); False: the raw mean, clipped when acting
            (on the committed Pendulum dataset d3rlpy scored -319 with such an actor
            against -138 with its squashed one).
        reward_scale: rewards are multiplied by this (after ``return_range``'s factor).
        return_range: see above; None: no return-based scaling.
        actor_learning_rate: the actor's own learning rate or schedule (e.g. a
            :class:`~alf.utils.schedules.CosineSchedule`, as the paper's runs anneal it);
            None: ``learning_rate``.
        target_update_tau: Polyak factor of the target critics.
        target_update_period: updates between target updates.
        **kwargs: :class:`OffPolicyAlgorithm` and :class:`Algorithm` arguments.
    """

    needs_offline_data = True

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        actor_network_ctor: Callable[..., nn.Module] = ActorDistributionNetwork,
        critic_network_ctor: Callable[..., nn.Module] = CriticNetwork,
        value_network_ctor: Callable[..., nn.Module] = ValueNetwork,
        num_critic_replicas: int = 2,
        gamma: float = 0.99,
        expectile: float = 0.7,
        beta: float = 3.0,
        max_weight: float = 100.0,
        squash_mean: bool = True,
        reward_scale: float = 1.0,
        return_range: float | None = 1000.0,
        actor_learning_rate: float | Schedule | None = None,
        target_update_tau: float = 0.005,
        target_update_period: int = 1,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        check_action_box(owner, action_spec)
        super().__init__(observation_spec=observation_spec, action_spec=action_spec, **kwargs)
        if not 0.0 < expectile < 1.0:
            raise invalid_value(f"{owner}.expectile", expectile, "in (0, 1)")
        if return_range is not None and not return_range > 0:
            raise invalid_value(f"{owner}.return_range", return_range, "> 0 or None")
        self.actor_network = actor_network_ctor(
            input_spec=observation_spec,
            action_spec=action_spec,
            squash=False,
            state_dependent_std=False,
            std_transform="exp",
        )
        self.critic_network = critic_network_ctor(
            input_spec=(observation_spec, action_spec), num_replicas=num_critic_replicas
        )
        self.value_network = value_network_ctor(input_spec=observation_spec)
        require_stateless(
            owner,
            actor_network=self.actor_network,
            critic_network=self.critic_network,
            value_network=self.value_network,
        )
        self.target_critic_network = make_target(self.critic_network)
        low, high = action_bounds(action_spec)
        self.register_buffer("_low", low)
        self.register_buffer("_high", high)
        self._action_dims = len(action_spec.shape)
        self.gamma = gamma
        self.expectile = expectile
        self.beta = beta
        self.max_weight = max_weight
        self.squash_mean = squash_mean
        self.reward_scale = reward_scale
        self.return_range = return_range
        self.data_reward_scale = 1.0
        """``return_range``'s factor, measured on the offline data by
        :meth:`prepare_learning` (1.0 before, or without ``return_range``)."""
        self._actor_learning_rate = actor_learning_rate
        self._update_targets = TargetUpdater(
            sources=[self.critic_network],
            targets=[self.target_critic_network],
            tau=target_update_tau,
            period=target_update_period,
        )

    def learning_rate_groups(self) -> list[tuple[Any, float | Schedule]]:
        if self._actor_learning_rate is None:
            return []
        return [(self.actor_network.parameters(), self._actor_learning_rate)]

    def prepare_learning(self, setup: LearningSetup) -> None:
        """:meth:`OffPolicyAlgorithm.prepare_learning`, then starts fresh data
        transformers from the offline data and measures ``return_range``'s factor."""
        super().prepare_learning(setup)
        self.data_reward_scale = prepare_offline_data(self, return_range=self.return_range)

    # ------------------------------------------------------------ acting
    def _clip(self, action: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(action, self._high), self._low)

    def policy(self, observation: Any) -> td.Distribution:
        """The actor's Gaussian at ``observation`` (its mean squashed into the bounds
        with ``squash_mean``)."""
        normal = self.actor_network(observation)
        if not self.squash_mean:
            return normal
        unit = (torch.tanh(normal.mean) + 1.0) / 2.0
        mean = self._low + unit * (self._high - self._low)
        std = normal.stddev.clamp(_MIN_STD, _MAX_STD)
        return diag_normal(mean, std, self._action_dims)

    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        mean = self.policy(time_step.observation).mean
        return AlgStep(output=self._clip(mean), state=state)

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        action = self.policy(time_step.observation).sample()
        return AlgStep(output=self._clip(action), state=state)

    # ---------------------------------------------------------- training
    @torch.no_grad()
    def _target(self, exp: Experience) -> torch.Tensor:
        values = self.value_network(bootstrap_observations(exp))
        scale = self.reward_scale * self.data_reward_scale
        return n_step_target(exp, values, gamma=self.gamma, reward_scale=scale)

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        observation, action = first_row(exp.observation), first_row(exp.action)
        with torch.no_grad():
            value_target = self.target_critic_network(observation, action).min(-1).values
        value = self.value_network(observation)
        advantage = value_target - value.detach()
        weight = torch.exp(self.beta * advantage).clamp(max=self.max_weight)
        log_prob = self.policy(observation).log_prob(action)
        info = IqlInfo(
            critics=self.critic_network(observation, action),
            target=self._target(exp),
            value=value,
            value_target=value_target,
            actor_loss=-weight * log_prob,
            advantage=advantage,
            valid=valid_transitions(exp),
            weights=exp.batch_info.importance_weights,
        )
        return AlgStep(state=state, info=info)

    def calc_loss(self, info: IqlInfo) -> LossInfo:
        q_loss, priority = critic_loss(
            info.critics, info.target, weights=info.weights, valid=info.valid
        )
        value_loss = masked_mean(
            expectile_loss(info.value_target - info.value, self.expectile) * info.weights,
            info.valid,
        )
        actor_loss = masked_mean(info.actor_loss * info.weights, info.valid)
        return LossInfo(
            loss=q_loss + value_loss + actor_loss,
            extra={
                "critic_loss": q_loss.detach(),
                "value_loss": value_loss.detach(),
                "actor_loss": actor_loss.detach(),
                "advantage": masked_mean(info.advantage, info.valid),
                "q_value": masked_mean(info.critics.detach().mean(-1), info.valid),
                "value": masked_mean(info.value.detach(), info.valid),
            },
            priority=priority,
        )

    def after_update(self) -> None:
        self._update_targets()
