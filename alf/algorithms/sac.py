"""Soft Actor-Critic for continuous (tanh-squashed Normal) and discrete actions."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn as nn

from alf import nest
from alf.algorithms.intrinsic import IntrinsicReward, IntrinsicRewardError
from alf.algorithms.off_policy_algorithm import (
    OffPolicyAlgorithm,
    bootstrap_observations,
    build_encoder,
    critic_loss,
    detached_call,
    encode_step,
    encoder_state_spec,
    masked_mean,
    n_step_target,
    valid_transitions,
)
from alf.config import configurable
from alf.data_structures import AlgStep, Experience, LossInfo, StepType, TimeStep
from alf.networks import (
    ActorDistributionNetwork,
    CriticNetwork,
    QNetwork,
    require_stateless,
)
from alf.tensor_specs import (
    BoundedTensorSpec,
    UnsupportedActionSpaceError,
    describe_spec,
)
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
    intrinsic: Any = ()


def _intrinsic_reward(
    owner: str,
    intrinsic_reward_ctor: Callable[..., IntrinsicReward] | None,
    encoder_ctor: Any,
    observation_spec: Any,
    action_spec: Any,
) -> IntrinsicReward | None:
    """The intrinsic reward ``intrinsic_reward_ctor`` builds (None: none), refused with a
    recurrent encoder."""
    if intrinsic_reward_ctor is None:
        return None
    if encoder_ctor is not None:
        raise IntrinsicRewardError(
            f"{owner}.intrinsic_reward_ctor is not supported with encoder_ctor (recurrent "
            "SAC); leave one of them unset"
        )
    return intrinsic_reward_ctor(observation_spec=observation_spec, action_spec=action_spec)


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

    Recurrent SAC (partially observed environments): ``encoder_ctor`` builds an
    observation encoder, e.g. an :class:`~alf.networks.EncodingNetwork` with
    ``lstm_hidden_size``, shared by the actor and the critics, which are then
    feed-forward networks on its ``[output_size]`` features (and the action). Its state
    is the algorithm's state: collection stores it in the replay buffer with every step,
    and training samples sequences of ``burn_in + mini_batch_length`` steps, runs the
    encoder along the first ``burn_in`` from the stored state without gradient, then
    along the rest with gradient (one fused call), and learns every transition of the
    remaining ``mini_batch_length`` rows with one-step TD targets (R2D2-style; the target
    encoder runs along the whole sequence from the stored state). The critic loss trains
    the encoder; the actor sees its features detached.

    With ``intrinsic_reward_ctor`` (e.g. :class:`~alf.algorithms.intrinsic.RNDReward`)
    every sampled batch's rewards get the bonus of its transitions (times the reward's
    ``int_coef``, divided by the running std of the bonus; 0 after a LAST step) before
    the targets are computed, and the bonus's models are trained in the same update
    (their losses added to SAC's). The bonus shares SAC's discount and its episodes
    (no separate intrinsic critic). Not with ``encoder_ctor``.

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
        target_update_tau: see :class:`TargetUpdater`.
        target_update_period: see :class:`TargetUpdater`.
        encoder_ctor: None, or builds the shared (recurrent) observation encoder from
            ``input_spec`` (see above); it must have ``output_size``, ``state_spec``,
            ``step`` and ``unroll`` (as :class:`~alf.networks.EncodingNetwork` has).
        intrinsic_reward_ctor: None (the default): no intrinsic reward. Given, builds
            the :class:`~alf.algorithms.intrinsic.IntrinsicReward` from
            ``observation_spec`` and ``action_spec`` (see above).
        **kwargs: :class:`OffPolicyAlgorithm` (mini-batches, replay buffer) and
            :class:`Algorithm` (optimizer, learning rate) arguments.
    """

    critic_loss_scale: float = 0.5
    """The factor of the critics' squared TD errors (summed over the critics) in the loss."""

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
        encoder_ctor: Callable[..., nn.Module] | None = None,
        intrinsic_reward_ctor: Callable[..., IntrinsicReward] | None = None,
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
        self.encoder, self.target_encoder, network_input_spec = build_encoder(
            type(self).__name__, encoder_ctor, observation_spec, action_spec
        )
        if self._discrete:
            self.actor_network = actor_network_ctor(
                input_spec=network_input_spec, action_spec=action_spec
            )
            self.critic_network = q_network_ctor(
                input_spec=network_input_spec,
                action_spec=action_spec,
                num_replicas=num_critic_replicas,
            )
            default_entropy = 0.3 * math.log(action_spec.num_actions)
        else:
            self.actor_network = actor_network_ctor(
                input_spec=network_input_spec,
                action_spec=action_spec,
                squash=True,
                state_dependent_std=True,
            )
            self.critic_network = critic_network_ctor(
                input_spec=(network_input_spec, action_spec), num_replicas=num_critic_replicas
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
        self.intrinsic = _intrinsic_reward(
            type(self).__name__, intrinsic_reward_ctor, encoder_ctor, observation_spec, action_spec
        )
        encoders = [] if self.encoder is None else [self.encoder]
        target_encoders = [] if self.target_encoder is None else [self.target_encoder]
        self._update_targets = TargetUpdater(
            sources=[self.critic_network, *encoders],
            targets=[self.target_critic_network, *target_encoders],
            tau=target_update_tau,
            period=target_update_period,
        )

    # ------------------------------------------------------------ acting
    @property
    def predict_state_spec(self) -> Any:
        """The encoder's state spec (``()`` without a recurrent encoder)."""
        return encoder_state_spec(self.encoder)

    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        features, state = encode_step(self.encoder, time_step.observation, state)
        dist = self.actor_network(features)
        return AlgStep(output=distribution_mode(dist), state=state)

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        features, state = encode_step(self.encoder, time_step.observation, state)
        dist = self.actor_network(features)
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
    def _bootstrap_values(
        self, actor_input: Any, critic_input: Any, alpha: torch.Tensor
    ) -> torch.Tensor:
        """Soft values of the next states: the actor's action (or probabilities) from
        ``actor_input``, the target critics' minimum on ``critic_input``."""
        action_or_probs, log_pi = self._policy(actor_input)
        if self._discrete:
            q = self.target_critic_network(critic_input).min(dim=1).values
            return (action_or_probs * (q - alpha * log_pi)).sum(-1)
        q = self.target_critic_network(critic_input, action_or_probs).min(dim=-1).values
        return q - alpha * log_pi

    @torch.no_grad()
    def _target(self, exp: Experience, alpha: torch.Tensor) -> torch.Tensor:
        obs = bootstrap_observations(exp)
        values = self._bootstrap_values(obs, obs, alpha)
        return n_step_target(exp, values, gamma=self.gamma, reward_scale=self.reward_scale)

    def _transition_losses(
        self, critic_input: Any, actor_input: Any, action: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The critics of the taken actions, the actor loss and ``log pi`` of a batch of
        states (``actor_input``: the same states, detached from an encoder)."""
        if self._discrete:
            q_all = self.critic_network(critic_input)  # [B, R, A]
            index = (action.long() - self._offset).reshape(-1, 1, 1).expand(-1, q_all.shape[1], 1)
            critics = q_all.gather(-1, index).squeeze(-1)
            probs, log_probs = self._policy(actor_input)
            q_min = q_all.detach().min(dim=1).values
            actor_loss = (probs * (alpha * log_probs - q_min)).sum(-1)
            log_pi = (probs * log_probs).sum(-1)
        else:
            critics = self.critic_network(critic_input, action)  # [B, R]
            new_action, log_pi = self._policy(actor_input)
            q_new = detached_call(self.critic_network, actor_input, new_action).min(dim=-1).values
            actor_loss = alpha * log_pi - q_new
        return critics, actor_loss, log_pi

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        alpha = self.log_alpha.detach().exp()
        if self.encoder is not None:
            return self._train_encoded_sequence(exp, state, alpha)
        intrinsic: Any = ()
        if self.intrinsic is not None:
            exp, intrinsic = self._with_intrinsic_reward(exp)
        target = self._target(exp, alpha)
        obs = nest.map_structure(lambda x: x[0], exp.observation)
        critics, actor_loss, log_pi = self._transition_losses(obs, obs, exp.action[0], alpha)
        info = SacInfo(
            critics=critics,
            target=target,
            actor_loss=actor_loss,
            log_pi=log_pi,
            valid=valid_transitions(exp),
            weights=exp.batch_info.importance_weights,
            intrinsic=intrinsic,
        )
        return AlgStep(state=state, info=info)

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        if self.intrinsic is not None:
            self.intrinsic.set_progress(progress)

    def _with_intrinsic_reward(self, exp: Experience) -> tuple[Experience, Any]:
        """The sampled ``[n+1, B]`` batch with the bonus of its transitions added to its
        rewards, and the bonus's per-row losses (of row 0's transitions) and statistics."""
        reward = self.intrinsic
        assert reward is not None
        steps, batch = exp.step_type.shape[0] - 1, exp.step_type.shape[1]

        def rows(x: torch.Tensor, first: int) -> torch.Tensor:
            return x[first : first + steps].reshape(steps * batch, *x.shape[2:])

        with torch.no_grad():
            reward.observe(nest.map_structure(lambda x: rows(x, 0), exp.observation))
            raw = reward.bonus(
                nest.map_structure(lambda x: rows(x, 0), exp.observation),
                rows(exp.action, 0),
                nest.map_structure(lambda x: rows(x, 1), exp.observation),
            ).reshape(steps, batch)
            raw = raw * (exp.step_type[:-1] != StepType.LAST).to(raw.dtype)
            bonus = reward.batch_bonus(raw)
        rewards = exp.reward + reward.int_coef * torch.cat([torch.zeros_like(bonus[:1]), bonus])
        inputs = nest.map_structure(lambda x: x[0], reward.training_inputs(exp))
        first = nest.map_structure(lambda x: x[0], exp.observation)
        losses = reward.losses(first, exp.action[0], inputs)
        return exp._replace(reward=rewards), (losses, reward.bonus_statistics(raw, bonus))

    def _train_encoded_sequence(self, exp: Experience, state: Any, alpha: torch.Tensor) -> AlgStep:
        """The recurrent ``train_step``: ``exp`` is ``[burn_in + L, B]`` and ``state`` the
        encoder state stored with its first row; learns the ``L - 1`` transitions of the
        last ``L`` rows (info leaves ``[(L - 1) * B, ...]``, time-major)."""
        assert self.encoder is not None and self.target_encoder is not None
        whole = exp
        start, exp = self.burn_in_state(self.encoder, exp, state)
        length, batch = exp.step_type.shape
        features, _ = self.encoder.unroll(exp.observation, start, exp.step_type == StepType.FIRST)
        with torch.no_grad():
            target_features, _ = self.target_encoder.unroll(
                whole.observation, state, whole.step_type == StepType.FIRST
            )
            target_features = target_features[self.burn_in * batch :]
            values = self._bootstrap_values(
                features.detach()[batch:], target_features[batch:], alpha
            ).reshape(length - 1, batch)
            target = self.reward_scale * exp.reward[1:] + self.gamma * exp.discount[1:] * values
        num = (length - 1) * batch
        action = exp.action[:-1].reshape(num, *exp.action.shape[2:])
        critics, actor_loss, log_pi = self._transition_losses(
            features[:num], features[:num].detach(), action, alpha
        )
        weights = exp.batch_info.importance_weights
        info = SacInfo(
            critics=critics,
            target=target.reshape(num),
            actor_loss=actor_loss,
            log_pi=log_pi,
            valid=(exp.step_type[:-1] != StepType.LAST).to(torch.float32).reshape(num),
            weights=weights.expand(length - 1, batch).reshape(num),
        )
        return AlgStep(state=(), info=info)

    def calc_loss(self, info: SacInfo) -> LossInfo:
        q_loss, priority = critic_loss(
            info.critics,
            info.target,
            weights=info.weights,
            valid=info.valid,
            scale=self.critic_loss_scale,
        )
        actor_loss = masked_mean(info.actor_loss * info.weights, info.valid)
        alpha_loss = -masked_mean(
            self.log_alpha * (info.log_pi.detach() + self.target_entropy), info.valid
        )
        loss = q_loss + actor_loss + alpha_loss
        extra = {
            "critic_loss": q_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": self.log_alpha.detach().exp(),
            "entropy": -masked_mean(info.log_pi.detach(), info.valid),
            "q_value": masked_mean(info.critics.detach().mean(-1), info.valid),
        }
        if self.intrinsic is not None and info.intrinsic:
            losses, statistics = info.intrinsic
            added, terms = self.intrinsic.weighted_loss(losses, info.valid)
            loss = loss + added
            extra.update(terms)
            extra.update(statistics)
        return LossInfo(loss=loss, extra=extra, priority=priority)

    def after_update(self) -> None:
        self._update_targets()
