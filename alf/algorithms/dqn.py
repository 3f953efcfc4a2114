"""DQN with double-Q targets, n-step returns, a Huber loss and epsilon-greedy rollouts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from alf import nest
from alf.algorithms.off_policy_algorithm import (
    OffPolicyAlgorithm,
    bootstrap_observations,
    masked_mean,
    n_step_target,
    valid_transitions,
)
from alf.config import configurable
from alf.data_structures import AlgStep, Experience, LossInfo, TimeStep
from alf.networks import QNetwork, require_stateless
from alf.tensor_specs import require_scalar_discrete
from alf.utils.distributions import allowed_actions
from alf.utils.schedules import LinearSchedule, Schedule, as_schedule
from alf.utils.target_update import TargetUpdater, make_target

__all__ = ["DqnAlgorithm", "DqnInfo"]


class DqnInfo(NamedTuple):
    """What :meth:`DqnAlgorithm.train_step` hands to ``calc_loss``."""

    q: torch.Tensor
    target: torch.Tensor
    valid: torch.Tensor
    weights: torch.Tensor


@configurable
class DqnAlgorithm(OffPolicyAlgorithm):
    """Deep Q-learning for a scalar discrete action space (``Discrete(n, start)``, any
    ``start``); any other action space raises
    :class:`~alf.tensor_specs.UnsupportedActionSpaceError`.

    With an invalid-action mask in the observations (see
    :mod:`alf.networks.action_mask`), the greedy action, the epsilon-random action and
    the targets' maximum (double DQN: the online argmax) range over the valid actions
    only (the next observation's mask for the targets).

    Rollouts are epsilon-greedy with ``epsilon_greedy`` (a number or a
    :class:`Schedule` of training progress); evaluation is greedy. Targets are n-step
    returns (``n = mini_batch_length - 1``) bootstrapped from the target network's value
    of the online network's greedy action (double DQN, or the target network's own
    maximum with ``double_q=False``). The loss is the Huber loss of the TD error.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: scalar discrete spec of one action.
        q_network_ctor: builds ``Q(s, .)``.
        gamma: discount factor.
        reward_scale: rewards are multiplied by this in the targets.
        epsilon_greedy: exploration rate of rollouts.
        double_q: use double-DQN targets.
        huber_delta: where the Huber loss turns from quadratic to linear.
        target_update_tau, target_update_period: see :class:`TargetUpdater` (by default
            a hard copy every 500 updates).
        **kwargs: :class:`OffPolicyAlgorithm` and :class:`Algorithm` arguments.
    """

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        q_network_ctor: Callable[..., nn.Module] = QNetwork,
        gamma: float = 0.99,
        reward_scale: float = 1.0,
        epsilon_greedy: float | Schedule = LinearSchedule(start=1.0, end=0.05, until=0.1),
        double_q: bool = True,
        huber_delta: float = 1.0,
        target_update_tau: float = 1.0,
        target_update_period: int = 500,
        **kwargs: Any,
    ) -> None:
        require_scalar_discrete(type(self).__name__, action_spec)
        super().__init__(observation_spec=observation_spec, action_spec=action_spec, **kwargs)
        self.q_network = q_network_ctor(input_spec=observation_spec, action_spec=action_spec)
        self._offset = int(np.asarray(action_spec.minimum))
        require_stateless(type(self).__name__, q_network=self.q_network)
        self.target_q_network = make_target(self.q_network)
        self.gamma = gamma
        self.reward_scale = reward_scale
        self._epsilon_schedule = as_schedule(epsilon_greedy)
        self.epsilon = self._epsilon_schedule(0.0)
        self.double_q = double_q
        self.huber_delta = huber_delta
        self._update_targets = TargetUpdater(
            sources=[self.q_network],
            targets=[self.target_q_network],
            tau=target_update_tau,
            period=target_update_period,
        )

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        self.epsilon = self._epsilon_schedule(progress)

    def _q(self, observation: Any) -> torch.Tensor:
        return self.q_network(observation)[:, 0]

    def _valid_q(self, q: torch.Tensor, observation: Any) -> torch.Tensor:
        """``q`` with the actions that the observation's mask forbids at ``-inf`` (for
        an argmax or a maximum over the valid actions only)."""
        mask = self.q_network.action_mask(observation)
        return q if mask is None else q.masked_fill(~allowed_actions(mask), float("-inf"))

    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        q = self._valid_q(self._q(time_step.observation), time_step.observation)
        return AlgStep(output=q.argmax(-1) + self._offset, state=state)

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        observation = time_step.observation
        q = self._q(observation)
        greedy = self._valid_q(q, observation).argmax(-1)
        explore = torch.rand(greedy.shape, device=greedy.device) < self.epsilon
        mask = self.q_network.action_mask(observation)
        if mask is None:
            random = torch.randint(0, q.shape[-1], greedy.shape, device=greedy.device)
        else:  # uniform over the valid actions
            random = torch.multinomial(allowed_actions(mask).float(), 1).squeeze(-1)
        action = torch.where(explore, random, greedy) + self._offset
        return AlgStep(output=action, state=state)

    @torch.no_grad()
    def _target(self, exp: Experience) -> torch.Tensor:
        obs = bootstrap_observations(exp)
        target_q = self.target_q_network(obs)[:, 0]
        if self.double_q:
            best = self._valid_q(self._q(obs), obs).argmax(-1, keepdim=True)
            values = target_q.gather(-1, best).squeeze(-1)
        else:
            values = self._valid_q(target_q, obs).max(-1).values
        return n_step_target(exp, values, gamma=self.gamma, reward_scale=self.reward_scale)

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        target = self._target(exp)
        obs = nest.map_structure(lambda x: x[0], exp.observation)
        index = exp.action[0].long() - self._offset
        q = self._q(obs).gather(-1, index.unsqueeze(-1)).squeeze(-1)
        info = DqnInfo(
            q=q,
            target=target,
            valid=valid_transitions(exp),
            weights=exp.batch_info.importance_weights,
        )
        return AlgStep(state=state, info=info)

    def calc_loss(self, info: DqnInfo) -> LossInfo:
        td_loss = F.huber_loss(info.q, info.target, reduction="none", delta=self.huber_delta)
        loss = masked_mean(td_loss * info.weights, info.valid)
        return LossInfo(
            loss=loss,
            extra={
                "td_loss": loss.detach(),
                "q_value": masked_mean(info.q.detach(), info.valid),
                "epsilon": torch.full((), self.epsilon, device=info.q.device),
            },
            priority=(info.q - info.target).detach().abs(),
        )

    def after_update(self) -> None:
        self._update_targets()
