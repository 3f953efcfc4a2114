"""CQL: conservative Q-learning, on SAC (continuous actions) and on DQN (discrete)."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn as nn

from alf import nest
from alf.algorithms.dqn import DqnAlgorithm, DqnInfo
from alf.algorithms.off_policy_algorithm import masked_mean, valid_transitions
from alf.algorithms.offline_rl import check_action_box, first_row, prepare_offline_data
from alf.algorithms.rl_algorithm import LearningSetup
from alf.algorithms.sac import SacAlgorithm, SacInfo
from alf.config import configurable, invalid_value
from alf.data_structures import AlgStep, Experience, LossInfo
from alf.tensor_specs import action_bounds
from alf.utils.distributions import distribution_mode
from alf.utils.schedules import Schedule

__all__ = ["CqlAlgorithm", "CqlInfo", "DiscreteCqlAlgorithm", "DiscreteCqlInfo"]


class CqlInfo(NamedTuple):
    """What :meth:`CqlAlgorithm.train_step` hands to ``calc_loss``: SAC's, and the
    ``[B, replicas]`` gap ``logsumexp_a Q(s, a) - Q(s, a_data)`` of each critic."""

    sac: SacInfo
    gap: torch.Tensor


class DiscreteCqlInfo(NamedTuple):
    """What :meth:`DiscreteCqlAlgorithm.train_step` hands to ``calc_loss``: DQN's, and
    the ``[B]`` gap ``logsumexp_a Q(s, a) - Q(s, a_data)``."""

    dqn: DqnInfo
    gap: torch.Tensor


def _check_weight(owner: str, weight: float) -> float:
    if isinstance(weight, bool) or not weight >= 0:
        raise invalid_value(f"{owner}.conservative_weight", weight, "a number >= 0")
    return float(weight)


def _repeat_rows(value: Any, times: int) -> Any:
    """Each leaf ``[B, ...]`` stacked ``times`` times: ``[times * B, ...]`` (block-major)."""
    return nest.map_structure(
        lambda x: x.unsqueeze(0).expand(times, *x.shape).reshape(-1, *x.shape[1:]), value
    )


@configurable
class CqlAlgorithm(SacAlgorithm):
    """CQL(H) (Kumar et al., 2020) on :class:`SacAlgorithm`, for continuous actions.

    Each critic's loss adds ``conservative_weight * (logsumexp_a Q(s, a) - Q(s, a_data))``
    to its squared TD error (not halved here, as CORL and d3rlpy write it), pushing down
    the values of actions outside the data. The log-sum-exp over actions is estimated by
    importance sampling from ``num_sampled_actions`` actions of each of three proposals,
    ``Q(s, a) - log p(a)``: uniformly random actions in the bounds, the current policy's
    at ``s`` and its actions at the next state ``s'`` (all without gradient to the
    policy). Targets bootstrap from the target critics' minimum without the entropy
    term unless ``backup_entropy`` (CORL's and d3rlpy's default), at an action the
    policy samples at the next state (``next_action="sample"``: the paper's and CORL's)
    or at its mean action (``"mean"``: d3rlpy's ``soft_q_backup=False``). The actor and
    the temperature are SAC's.

    With ``lagrange_threshold`` (the paper's ``tau``) the weight is also multiplied by a
    Lagrange multiplier ``alpha' = exp(log_alpha')`` (clipped at 1e6), which rises while
    ``conservative_weight * (gap - lagrange_threshold)`` is positive (each critic's mean
    gap), as the paper's CQL-Lagrange and d3rlpy's ``alpha_threshold`` do.

    The defaults are d3rlpy's (``CQLConfig``): ``conservative_weight`` 5.0 (CORL's
    MuJoCo configs use 10.0), 10 sampled actions, the actor and temperature learning at
    1e-4 against the critics' 3e-4 (``learning_rate``); but ``next_action`` is the
    paper's ``"sample"`` (``cql_hopper_medium.gin`` sets d3rlpy's ``"mean"``). Only
    feed-forward networks (no ``encoder_ctor``).

    Args:
        conservative_weight: the weight of the conservative term (``alpha`` of the paper).
        num_sampled_actions: actions per proposal and state for the log-sum-exp.
        backup_entropy: include ``-alpha * log pi`` in the targets (SAC's soft backup).
        next_action: the next state's action of the targets: ``"sample"`` (drawn from
            the policy) or ``"mean"`` (its squashed mean; only without
            ``backup_entropy``).
        lagrange_threshold: None (a fixed weight), or the gap the Lagrange multiplier
            holds the conservative term to.
        actor_learning_rate: learning rate (or schedule) of the actor, the temperature and
            the Lagrange multiplier; None: ``learning_rate``.
        return_range: None, or scale the rewards so that the offline data's episode
            returns span this (CORL's MuJoCo runs: 1000), see
            :func:`~alf.algorithms.offline_rl.prepare_offline_data`.
        **kwargs: :class:`SacAlgorithm` arguments (networks, ``gamma``, temperature,
            targets, mini-batches, ``learning_rate``).
    """

    needs_offline_data = True
    critic_loss_scale = 1.0

    def __init__(
        self,
        *,
        conservative_weight: float = 5.0,
        num_sampled_actions: int = 10,
        backup_entropy: bool = False,
        next_action: str = "sample",
        lagrange_threshold: float | None = None,
        actor_learning_rate: float | Schedule | None = 1e-4,
        return_range: float | None = None,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        check_action_box(owner, kwargs.get("action_spec"))
        if kwargs.get("encoder_ctor") is not None:
            raise invalid_value(f"{owner}.encoder_ctor", kwargs["encoder_ctor"], "None")
        super().__init__(**kwargs)
        num = num_sampled_actions
        if isinstance(num, bool) or not isinstance(num, int) or num < 1:
            raise invalid_value(f"{owner}.num_sampled_actions", num, "an int >= 1")
        self.conservative_weight = _check_weight(owner, conservative_weight)
        self.num_sampled_actions = num
        if next_action not in ("sample", "mean") or (next_action == "mean" and backup_entropy):
            raise invalid_value(
                f"{owner}.next_action",
                next_action,
                "'sample', or 'mean' (without backup_entropy: a mean action has no entropy)",
            )
        self.backup_entropy = backup_entropy
        self.next_action = next_action
        self.lagrange_threshold = lagrange_threshold
        self.log_alpha_prime = nn.Parameter(
            torch.zeros(()), requires_grad=lagrange_threshold is not None
        )
        self._actor_learning_rate = actor_learning_rate
        self.return_range = return_range
        low, high = action_bounds(self.action_spec)
        self.register_buffer("_low", low)
        self.register_buffer("_high", high)
        # The log-density of the uniform proposal, 1 / prod(high - low).
        self._log_uniform = -float(torch.log(high - low).sum())
        self._base_reward_scale = self.reward_scale

    def learning_rate_groups(self) -> list[tuple[Any, float | Schedule]]:
        if self._actor_learning_rate is None:
            return []
        actor = [*self.actor_network.parameters(), self.log_alpha, self.log_alpha_prime]
        return [(actor, self._actor_learning_rate)]

    def prepare_learning(self, setup: LearningSetup) -> None:
        """:meth:`OffPolicyAlgorithm.prepare_learning`, then starts fresh data
        transformers from the offline data and applies ``return_range``."""
        super().prepare_learning(setup)
        scale = prepare_offline_data(self, return_range=self.return_range)
        self.reward_scale = self._base_reward_scale * scale

    def _target(self, exp: Experience, alpha: torch.Tensor) -> torch.Tensor:
        return super()._target(exp, alpha if self.backup_entropy else torch.zeros_like(alpha))

    @torch.no_grad()
    def _bootstrap_values(
        self, actor_input: Any, critic_input: Any, alpha: torch.Tensor
    ) -> torch.Tensor:
        """SAC's, or with ``next_action="mean"`` the target critics' minimum at the
        policy's mean action (no entropy term: ``backup_entropy`` is refused then)."""
        if self.next_action == "sample":
            return super()._bootstrap_values(actor_input, critic_input, alpha)
        action = distribution_mode(self.actor_network(actor_input))
        return self.target_critic_network(critic_input, action).min(dim=-1).values

    def _policy_samples(self, observation: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, B, ...]`` actions of the policy at ``[B]`` states and their ``[N, B]``
        log-probabilities."""
        dist = self.actor_network(observation)
        return dist.rsample_with_log_prob((self.num_sampled_actions,))

    def _conservative_gap(self, exp: Experience, data_q: torch.Tensor) -> torch.Tensor:
        """``[B, R]`` ``logsumexp_a Q(s, a) - Q(s, a_data)`` of each critic, the
        log-sum-exp by importance sampling from the three proposals."""
        observation = first_row(exp.observation)
        n, batch = self.num_sampled_actions, data_q.shape[0]
        with torch.no_grad():
            current, log_current = self._policy_samples(observation)
            following, log_following = self._policy_samples(
                nest.map_structure(lambda x: x[1], exp.observation)
            )
            uniform = self._low + (self._high - self._low) * torch.rand_like(current)
            log_uniform = torch.full_like(log_current, self._log_uniform)
            actions = torch.cat([uniform, current, following])
            log_p = torch.cat([log_uniform, log_current, log_following])
        q = self.critic_network(
            _repeat_rows(observation, 3 * n), actions.reshape(3 * n * batch, *actions.shape[2:])
        )
        q = q.reshape(3 * n, batch, -1) - log_p.unsqueeze(-1)
        return torch.logsumexp(q, dim=0) - data_q

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        step = super().train_step(exp, state, rollout_info)
        gap = self._conservative_gap(exp, step.info.critics)
        return step._replace(info=CqlInfo(sac=step.info, gap=gap))

    def calc_loss(self, info: CqlInfo) -> LossInfo:  # type: ignore[override]
        loss_info = super().calc_loss(info.sac)
        valid, weights = info.sac.valid, info.sac.weights.unsqueeze(-1)
        # Each critic's mean gap over the valid transitions: [R].
        gaps = (info.gap * weights * valid.unsqueeze(-1)).sum(0) / valid.sum().clamp(min=1.0)
        extra = {**loss_info.extra, "conservative_gap": gaps.detach().mean()}
        conservative = self.conservative_weight * gaps.sum()
        loss = loss_info.loss
        if self.lagrange_threshold is not None:
            alpha_prime = self.log_alpha_prime.exp().clamp(0.0, 1e6)
            excess = self.conservative_weight * (gaps.detach() - self.lagrange_threshold)
            loss = loss - alpha_prime * excess.mean()
            conservative = alpha_prime.detach() * conservative
            extra["alpha_prime"] = alpha_prime.detach()
        extra["conservative_loss"] = conservative.detach()
        return LossInfo(loss=loss + conservative, extra=extra, priority=loss_info.priority)


@configurable
class DiscreteCqlAlgorithm(DqnAlgorithm):
    """Discrete CQL (Kumar et al., 2020) on :class:`DqnAlgorithm`: the Huber TD loss of
    (double) DQN plus ``conservative_weight * (logsumexp_a Q(s, a) - Q(s, a_data))``,
    the log-sum-exp over the valid actions when the observations carry an
    invalid-action mask. Default weight 1.0, as d3rlpy's ``DiscreteCQL``. Only a
    feed-forward Q network (no ``encoder_ctor``).

    Args:
        conservative_weight: the weight of the conservative term.
        **kwargs: :class:`DqnAlgorithm` arguments.
    """

    needs_offline_data = True

    def __init__(self, *, conservative_weight: float = 1.0, **kwargs: Any) -> None:
        owner = type(self).__name__
        if kwargs.get("encoder_ctor") is not None:
            raise invalid_value(f"{owner}.encoder_ctor", kwargs["encoder_ctor"], "None")
        super().__init__(**kwargs)
        self.conservative_weight = _check_weight(owner, conservative_weight)

    def prepare_learning(self, setup: LearningSetup) -> None:
        """:meth:`OffPolicyAlgorithm.prepare_learning`, then starts fresh data
        transformers from the offline data."""
        super().prepare_learning(setup)
        prepare_offline_data(self, return_range=None)

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        target = self._target(exp)
        observation = first_row(exp.observation)
        q_all = self._q(observation)
        index = exp.action[0].long() - self._offset
        q = q_all.gather(-1, index.unsqueeze(-1)).squeeze(-1)
        gap = torch.logsumexp(self._valid_q(q_all, observation), dim=-1) - q
        dqn = DqnInfo(
            q=q,
            target=target,
            valid=valid_transitions(exp),
            weights=exp.batch_info.importance_weights,
        )
        return AlgStep(state=state, info=DiscreteCqlInfo(dqn=dqn, gap=gap))

    def calc_loss(self, info: DiscreteCqlInfo) -> LossInfo:  # type: ignore[override]
        loss_info = super().calc_loss(info.dqn)
        gap = masked_mean(info.gap * info.dqn.weights, info.dqn.valid)
        conservative = self.conservative_weight * gap
        extra = {**loss_info.extra, "conservative_gap": gap.detach()}
        return LossInfo(
            loss=loss_info.loss + conservative, extra=extra, priority=loss_info.priority
        )
