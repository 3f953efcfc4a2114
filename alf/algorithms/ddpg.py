"""DDPG: a deterministic actor trained through a learned critic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

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
from alf.config import configurable, invalid_value
from alf.data_structures import AlgStep, Experience, LossInfo, TimeStep
from alf.networks import ActorNetwork, CriticNetwork, require_stateless
from alf.tensor_specs import (
    BoundedTensorSpec,
    TensorSpec,
    UnsupportedActionSpaceError,
    action_bounds,
    describe_spec,
)
from alf.utils.target_update import TargetUpdater, make_target

__all__ = ["DdpgAlgorithm", "DdpgInfo"]


class DdpgInfo(NamedTuple):
    """What :meth:`DdpgAlgorithm.train_step` hands to ``calc_loss``."""

    critics: torch.Tensor
    target: torch.Tensor
    actor_loss: torch.Tensor
    valid: torch.Tensor
    weights: torch.Tensor


@configurable
class DdpgAlgorithm(OffPolicyAlgorithm):
    """DDPG (and, with its options, TD3) for continuous actions.

    The actor is trained every ``actor_update_period`` updates to maximise the first
    critic; its loss reaches the actor only through the action (``dQ/da`` by autograd).
    Critic targets are n-step returns from the minimum of the target critics at the
    target actor's action, optionally smoothed with clipped Gaussian noise (TD3). Target
    networks follow with Polyak averaging after each actor update.

    Exploration adds Gaussian noise (``exploration_noise="gaussian"``) or an
    Ornstein-Uhlenbeck process (``"ou"``, kept per environment in the rollout state and
    reset at episode starts), scaled by half the action range, then clips to the bounds.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: continuous bounded spec of one action.
        actor_network_ctor: builds the deterministic actor.
        critic_network_ctor: builds ``Q(s, a)`` from ``input_spec=(obs, act)``.
        num_critic_replicas: number of critics (targets use their minimum).
        gamma: discount factor.
        reward_scale: rewards are multiplied by this in the targets.
        exploration_noise: ``"gaussian"`` or ``"ou"``.
        exploration_std: noise scale, as a fraction of half the action range.
        ou_theta: mean reversion of the OU process.
        target_policy_noise: std of the target-action smoothing noise (0: none).
        target_policy_noise_clip: that noise is clipped to ``±`` this.
        actor_update_period: critic updates per actor (and target) update.
        target_update_tau: Polyak factor of the target networks.
        **kwargs: :class:`OffPolicyAlgorithm` and :class:`Algorithm` arguments.
    """

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        actor_network_ctor: Callable[..., nn.Module] = ActorNetwork,
        critic_network_ctor: Callable[..., nn.Module] = CriticNetwork,
        num_critic_replicas: int = 1,
        gamma: float = 0.99,
        reward_scale: float = 1.0,
        exploration_noise: str = "gaussian",
        exploration_std: float = 0.1,
        ou_theta: float = 0.15,
        target_policy_noise: float = 0.0,
        target_policy_noise_clip: float = 0.5,
        actor_update_period: int = 1,
        target_update_tau: float = 0.005,
        **kwargs: Any,
    ) -> None:
        if not isinstance(action_spec, BoundedTensorSpec) or action_spec.is_discrete:
            raise UnsupportedActionSpaceError(
                f"{type(self).__name__} supports only a Box action space, got "
                f"{describe_spec(action_spec)}; use SacAlgorithm or DqnAlgorithm for a "
                "Discrete one, PPOAlgorithm for MultiDiscrete, MultiBinary and Dict/Tuple"
            )
        super().__init__(observation_spec=observation_spec, action_spec=action_spec, **kwargs)
        owner = type(self).__name__
        if exploration_noise not in ("gaussian", "ou"):
            raise invalid_value(
                f"{owner}.exploration_noise", exploration_noise, "'gaussian' or 'ou'"
            )
        period = actor_update_period
        if isinstance(period, bool) or not isinstance(period, int) or period < 1:
            raise invalid_value(f"{owner}.actor_update_period", period, "an int >= 1")
        self.actor_network = actor_network_ctor(
            input_spec=observation_spec, action_spec=action_spec
        )
        self.critic_network = critic_network_ctor(
            input_spec=(observation_spec, action_spec), num_replicas=num_critic_replicas
        )
        require_stateless(
            type(self).__name__,
            actor_network=self.actor_network,
            critic_network=self.critic_network,
        )
        self.target_actor_network = make_target(self.actor_network)
        self.target_critic_network = make_target(self.critic_network)
        low, high = action_bounds(action_spec)
        self.register_buffer("_low", low)
        self.register_buffer("_high", high)
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.int64))
        self.gamma = gamma
        self.reward_scale = reward_scale
        self.exploration_noise = exploration_noise
        self.exploration_std = exploration_std
        self.ou_theta = ou_theta
        self.target_policy_noise = target_policy_noise
        self.target_policy_noise_clip = target_policy_noise_clip
        self.actor_update_period = actor_update_period
        self._update_targets = TargetUpdater(
            sources=[self.actor_network, self.critic_network],
            targets=[self.target_actor_network, self.target_critic_network],
            tau=target_update_tau,
        )

    @property
    def rollout_state_spec(self) -> Any:
        if self.exploration_noise == "ou":
            return TensorSpec(tuple(self.action_spec.shape))
        return ()

    @property
    def train_state_spec(self) -> Any:
        return ()

    def _clip(self, action: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(action, self._high), self._low)

    # ------------------------------------------------------------ acting
    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        return AlgStep(output=self.actor_network(time_step.observation), state=state)

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        action = self.actor_network(time_step.observation)
        scale = self.exploration_std * (self._high - self._low) / 2
        noise = torch.randn_like(action)
        if self.exploration_noise == "ou":
            # dx = -theta * x + sigma * sqrt(2 theta) * N(0, 1): stationary std = sigma.
            state = state - self.ou_theta * state + (2 * self.ou_theta) ** 0.5 * noise
            noise = state
        return AlgStep(output=self._clip(action + scale * noise), state=state)

    # ---------------------------------------------------------- training
    @torch.no_grad()
    def _target(self, exp: Experience) -> torch.Tensor:
        obs = bootstrap_observations(exp)
        action = self.target_actor_network(obs)
        if self.target_policy_noise > 0:
            clip = self.target_policy_noise_clip
            noise = (torch.randn_like(action) * self.target_policy_noise).clamp(-clip, clip)
            action = self._clip(action + noise * (self._high - self._low) / 2)
        values = self.target_critic_network(obs, action).min(dim=-1).values
        return n_step_target(exp, values, gamma=self.gamma, reward_scale=self.reward_scale)

    def _actor_update_due(self) -> bool:
        return int(self.num_updates) % self.actor_update_period == 0

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        target = self._target(exp)
        obs = nest.map_structure(lambda x: x[0], exp.observation)
        critics = self.critic_network(obs, exp.action[0])
        actor_loss = torch.zeros_like(target)
        if self._actor_update_due():
            action = self.actor_network(obs)
            actor_loss = -detached_call(self.critic_network, obs, action)[:, 0]
        info = DdpgInfo(
            critics=critics,
            target=target,
            actor_loss=actor_loss,
            valid=valid_transitions(exp),
            weights=exp.batch_info.importance_weights,
        )
        return AlgStep(state=state, info=info)

    def calc_loss(self, info: DdpgInfo) -> LossInfo:
        q_loss, priority = critic_loss(
            info.critics, info.target, weights=info.weights, valid=info.valid
        )
        actor_loss = masked_mean(info.actor_loss * info.weights, info.valid)
        return LossInfo(
            loss=q_loss + actor_loss,
            extra={
                "critic_loss": q_loss.detach(),
                "q_value": masked_mean(info.critics.detach().mean(-1), info.valid),
            },
            priority=priority,
        )

    def after_update(self) -> None:
        if self._actor_update_due():
            self._update_targets()
        self.num_updates += 1
