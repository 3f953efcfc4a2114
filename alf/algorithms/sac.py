"""Soft Actor-Critic for continuous (tanh-squashed Normal) and discrete actions."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn as nn

from alf import nest
from alf.algorithms.off_policy_algorithm import (
    OffPolicyAlgorithm,
    bootstrap_observations,
    critic_loss,
    detached_call,
    masked_mean,
    n_step_target,
    valid_transitions,
)
from alf.config import configurable
from alf.data_structures import AlgStep, Experience, LossInfo, TimeStep
from alf.networks import ActorDistributionNetwork, CriticNetwork, QNetwork, require_stateless
from alf.tensor_specs import BoundedTensorSpec, UnsupportedActionSpaceError, describe_spec
from alf.utils.distributions import Categorical, SquashedNormal, distribution_mode, sample
from alf.utils.target_update import TargetUpdater, make_target

__all__ = ["SacAlgorithm", "SacInfo"]


class SacInfo(NamedTuple):
    """What :meth:`SacAlgorithm.train_step` hands to ``calc_loss`` (all ``[B]`` or
    ``[B, replicas]``)."""

    critics: torch.Tensor
    target: torch.Tensor
    actor_loss: torch.Tensor
    log_pi: torch.Tensor
    valid: torch.Tensor
    weights: torch.Tensor


@configurable
class SacAlgorithm(OffPolicyAlgorithm):
    """SAC: twin critics, a stochastic actor and an automatically tuned temperature.

    Continuous actions use a tanh-squashed Normal actor; the actor loss
    ``alpha * log pi(a|s) - Q(s, a)`` reaches the actor through the reparameterised
    action only (the critics are called with detached parameters for it).
    Scalar discrete actions (``Discrete(n, start)``) use a Categorical actor and Q
    networks over all actions (the expectation over actions replaces sampling); with an
    invalid-action mask in the observations the actor gives invalid actions probability
    zero, so the expectations range over the valid ones. Other action spaces
    (MultiDiscrete, MultiBinary, Dict/Tuple) raise
    :class:`~alf.tensor_specs.UnsupportedActionSpaceError`. Critic targets are n-step
    (``mini_batch_length - 1``) soft returns from the minimum of the target critics.
    All losses are summed and take one optimizer step.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: spec of one action.
        actor_network_ctor: builds the policy (``squash`` and ``state_dependent_std`` are
            set for continuous actions).
        critic_network_ctor: builds ``Q(s, a)`` (continuous) from ``input_spec=(obs, act)``.
        q_network_ctor: builds ``Q(s, .)`` (discrete) from ``input_spec, action_spec``.
        num_critic_replicas: number of critics; targets use their minimum.
        gamma: discount factor.
        reward_scale: rewards are multiplied by this in the targets.
        initial_alpha: initial entropy temperature.
        target_entropy: entropy the temperature aims for (default: ``-action_dim`` for
            continuous actions, ``0.3 * log(num_actions)`` for discrete ones).
        fixed_alpha: keep ``alpha`` at ``initial_alpha``.
        target_update_tau, target_update_period: see :class:`TargetUpdater`.
        **kwargs: :class:`OffPolicyAlgorithm` (mini-batches, replay buffer) and
            :class:`Algorithm` (optimizer, learning rate) arguments.
    """

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        actor_network_ctor: Callable[..., nn.Module] = ActorDistributionNetwork,
        critic_network_ctor: Callable[..., nn.Module] = CriticNetwork,
        q_network_ctor: Callable[..., nn.Module] = QNetwork,
        num_critic_replicas: int = 2,
        gamma: float = 0.99,
        reward_scale: float = 1.0,
        initial_alpha: float = 1.0,
        target_entropy: float | None = None,
        fixed_alpha: bool = False,
        target_update_tau: float = 0.005,
        target_update_period: int = 1,
        **kwargs: Any,
    ) -> None:
        if not isinstance(action_spec, BoundedTensorSpec) or (
            action_spec.is_discrete and action_spec.shape != ()
        ):
            raise UnsupportedActionSpaceError(
                f"{type(self).__name__} supports a Discrete (any start) or a Box action "
                f"space, got {describe_spec(action_spec)}; use PPOAlgorithm, AppoAlgorithm "
                "or ActorCriticAlgorithm for MultiDiscrete, MultiBinary and Dict/Tuple actions"
            )
        super().__init__(observation_spec=observation_spec, action_spec=action_spec, **kwargs)
        self._discrete = action_spec.is_discrete
        self._offset = int(np.asarray(action_spec.minimum)) if self._discrete else 0
        if self._discrete:
            self.actor_network = actor_network_ctor(
                input_spec=observation_spec, action_spec=action_spec
            )
            self.critic_network = q_network_ctor(
                input_spec=observation_spec,
                action_spec=action_spec,
                num_replicas=num_critic_replicas,
            )
            default_entropy = 0.3 * math.log(action_spec.num_actions)
        else:
            self.actor_network = actor_network_ctor(
                input_spec=observation_spec,
                action_spec=action_spec,
                squash=True,
                state_dependent_std=True,
            )
            self.critic_network = critic_network_ctor(
                input_spec=(observation_spec, action_spec), num_replicas=num_critic_replicas
            )
            default_entropy = -float(action_spec.numel)
        require_stateless(
            type(self).__name__,
            actor_network=self.actor_network,
            critic_network=self.critic_network,
        )
        self.target_critic_network = make_target(self.critic_network)
        self.log_alpha = nn.Parameter(
            torch.tensor(math.log(initial_alpha)), requires_grad=not fixed_alpha
        )
        self.target_entropy = default_entropy if target_entropy is None else target_entropy
        self.gamma = gamma
        self.reward_scale = reward_scale
        self._update_targets = TargetUpdater(
            sources=[self.critic_network],
            targets=[self.target_critic_network],
            tau=target_update_tau,
            period=target_update_period,
        )

    # ------------------------------------------------------------ acting
    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        dist = self.actor_network(time_step.observation)
        return AlgStep(output=distribution_mode(dist), state=state)

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        dist = self.actor_network(time_step.observation)
        return AlgStep(output=sample(dist), state=state)

    # ---------------------------------------------------------- training
    def _policy(self, observation: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action and its log-probability; for discrete actions the
        ``[B, A]`` probabilities and log-probabilities of every action instead."""
        dist = self.actor_network(observation)
        if isinstance(dist, Categorical):
            # Masked actions have probability 0; bounding their log-probability keeps
            # ``0 * (q - alpha * log_pi)`` at 0 instead of 0 * inf.
            return dist.logits.exp(), dist.logits.clamp(min=-1e4)
        assert isinstance(dist, SquashedNormal)
        return dist.rsample_with_log_prob()

    @torch.no_grad()
    def _target(self, exp: Experience, alpha: torch.Tensor) -> torch.Tensor:
        obs = bootstrap_observations(exp)
        action_or_probs, log_pi = self._policy(obs)
        if self._discrete:
            q = self.target_critic_network(obs).min(dim=1).values
            values = (action_or_probs * (q - alpha * log_pi)).sum(-1)
        else:
            q = self.target_critic_network(obs, action_or_probs).min(dim=-1).values
            values = q - alpha * log_pi
        return n_step_target(exp, values, gamma=self.gamma, reward_scale=self.reward_scale)

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        alpha = self.log_alpha.detach().exp()
        target = self._target(exp, alpha)
        obs = nest.map_structure(lambda x: x[0], exp.observation)
        action = exp.action[0]
        if self._discrete:
            q_all = self.critic_network(obs)  # [B, R, A]
            index = (action.long() - self._offset).reshape(-1, 1, 1).expand(-1, q_all.shape[1], 1)
            critics = q_all.gather(-1, index).squeeze(-1)
            probs, log_probs = self._policy(obs)
            q_min = q_all.detach().min(dim=1).values
            actor_loss = (probs * (alpha * log_probs - q_min)).sum(-1)
            log_pi = (probs * log_probs).sum(-1)
        else:
            critics = self.critic_network(obs, action)  # [B, R]
            new_action, log_pi = self._policy(obs)
            q_new = detached_call(self.critic_network, obs, new_action).min(dim=-1).values
            actor_loss = alpha * log_pi - q_new
        info = SacInfo(
            critics=critics,
            target=target,
            actor_loss=actor_loss,
            log_pi=log_pi,
            valid=valid_transitions(exp),
            weights=exp.batch_info.importance_weights,
        )
        return AlgStep(state=state, info=info)

    def calc_loss(self, info: SacInfo) -> LossInfo:
        q_loss, priority = critic_loss(
            info.critics, info.target, weights=info.weights, valid=info.valid, scale=0.5
        )
        actor_loss = masked_mean(info.actor_loss * info.weights, info.valid)
        alpha_loss = -masked_mean(
            self.log_alpha * (info.log_pi.detach() + self.target_entropy), info.valid
        )
        loss = q_loss + actor_loss + alpha_loss
        return LossInfo(
            loss=loss,
            extra={
                "critic_loss": q_loss.detach(),
                "actor_loss": actor_loss.detach(),
                "alpha": self.log_alpha.detach().exp(),
                "entropy": -masked_mean(info.log_pi.detach(), info.valid),
                "q_value": masked_mean(info.critics.detach().mean(-1), info.valid),
            },
            priority=priority,
        )

    def after_update(self) -> None:
        self._update_targets()
