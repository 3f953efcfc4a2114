"""Advantage actor-critic (A2C) with GAE."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.distributions as td

from alf import nest
from alf.algorithms.on_policy_algorithm import OnPolicyAlgorithm
from alf.config import configurable
from alf.data_structures import AlgStep, Experience, LossInfo, TimeStep
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.utils.distributions import distribution_mode, sample
from alf.utils.value_ops import generalized_advantage_estimation

__all__ = ["ActorCriticAlgorithm", "ActorCriticRolloutInfo", "ActorCriticTrainInfo"]


class ActorCriticRolloutInfo(NamedTuple):
    """Kept for every collected step; after preprocessing also advantages and returns."""

    log_prob: torch.Tensor
    value: torch.Tensor
    advantage: Any = ()
    returns: Any = ()


class ActorCriticTrainInfo(NamedTuple):
    """What :meth:`ActorCriticAlgorithm.train_step` hands to ``calc_loss``."""

    log_prob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor
    rollout: ActorCriticRolloutInfo


@configurable
class ActorCriticAlgorithm(OnPolicyAlgorithm):
    """A2C: policy gradient with a learned value baseline and GAE advantages.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: spec of one action.
        actor_network_ctor: builds the policy from ``input_spec`` and ``action_spec``.
        value_network_ctor: builds the value network from ``input_spec``.
        gamma: discount factor.
        gae_lambda: GAE's lambda.
        value_loss_coef: weight of the value loss.
        entropy_coef: weight of the entropy bonus.
        normalize_advantages: normalise advantages within each mini-batch.
        reward_scale: rewards are multiplied by this before computing targets.
        num_epochs, mini_batch_size: see :class:`OnPolicyAlgorithm` (A2C: 1 and None).
        **kwargs: optimizer, learning rate and gradient clipping (:class:`Algorithm`).
    """

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        actor_network_ctor: Callable[..., torch.nn.Module] = ActorDistributionNetwork,
        value_network_ctor: Callable[..., torch.nn.Module] = ValueNetwork,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        value_loss_coef: float = 0.5,
        entropy_coef: float = 0.0,
        normalize_advantages: bool = False,
        reward_scale: float = 1.0,
        num_epochs: int = 1,
        mini_batch_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            observation_spec=observation_spec,
            action_spec=action_spec,
            num_epochs=num_epochs,
            mini_batch_size=mini_batch_size,
            **kwargs,
        )
        self.actor_network = actor_network_ctor(
            input_spec=observation_spec, action_spec=action_spec
        )
        self.value_network = value_network_ctor(input_spec=observation_spec)
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.value_loss_coef = value_loss_coef
        self.entropy_coef = entropy_coef
        self.normalize_advantages = normalize_advantages
        self.reward_scale = reward_scale

    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        dist = self.actor_network(time_step.observation)
        return AlgStep(output=distribution_mode(dist), state=state)

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        dist = self.actor_network(time_step.observation)
        action = sample(dist)
        info = ActorCriticRolloutInfo(
            log_prob=dist.log_prob(action), value=self.value_network(time_step.observation)
        )
        return AlgStep(output=action, state=state, info=info)

    def preprocess_experience(self, exp: Experience) -> Experience:
        info: ActorCriticRolloutInfo = exp.rollout_info
        advantages, returns = generalized_advantage_estimation(
            rewards=exp.reward * self.reward_scale,
            values=info.value,
            step_types=exp.step_type,
            discounts=exp.discount,
            gamma=self.gamma,
            td_lambda=self.gae_lambda,
        )
        head = nest.map_structure(lambda t: t[:-1], exp._replace(rollout_info=()))
        return head._replace(
            rollout_info=info._replace(
                log_prob=info.log_prob[:-1],
                value=info.value[:-1],
                advantage=advantages,
                returns=returns,
            )
        )

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        dist: td.Distribution = self.actor_network(exp.observation)
        info = ActorCriticTrainInfo(
            log_prob=dist.log_prob(exp.action),
            entropy=dist.entropy(),
            value=self.value_network(exp.observation),
            rollout=rollout_info,
        )
        return AlgStep(output=(), state=state, info=info)

    def advantages(self, info: ActorCriticTrainInfo) -> torch.Tensor:
        """The (optionally normalised) advantages of a mini-batch."""
        adv = info.rollout.advantage
        if self.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        return adv

    def policy_loss(self, info: ActorCriticTrainInfo, advantages: torch.Tensor) -> torch.Tensor:
        """Per-step policy-gradient loss (A2C: ``-A * log pi(a|s)``)."""
        return -advantages * info.log_prob

    def value_loss(self, info: ActorCriticTrainInfo) -> torch.Tensor:
        """Per-step value loss: the squared error to the lambda-return (weighted by
        ``value_loss_coef`` in the total loss)."""
        return (info.value - info.rollout.returns) ** 2

    def calc_loss(self, info: ActorCriticTrainInfo) -> LossInfo:
        pg_loss = self.policy_loss(info, self.advantages(info)).mean()
        value_loss = self.value_loss(info).mean()
        entropy = info.entropy.mean()
        loss = pg_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        return LossInfo(
            loss=loss,
            extra={
                "pg_loss": pg_loss.detach(),
                "value_loss": value_loss.detach(),
                "entropy": entropy.detach(),
            },
        )
