"""Asynchronous PPO (APPO): PPO's clipped objective with V-trace targets.

The trajectories may come from a slightly older policy than the one being trained (an
asynchronous collector's actors reload parameters only now and then). APPO corrects for
this twice: the value targets and advantages are V-trace's (Espeholt et al., 2018),
whose truncated importance weights ``min(clip_rho, pi/mu)`` are computed once per
trajectory from the behaviour log-probabilities stored in ``rollout_info``, and the
policy loss is PPO's clipped surrogate with the ratio to the *behaviour* policy, which
also bounds how far several epochs or mini-batches move the policy.
"""

from __future__ import annotations

from typing import Any

import torch

from alf import nest
from alf.algorithms.actor_critic import (
    ActorCriticAlgorithm,
    ActorCriticRolloutInfo,
    ActorCriticTrainInfo,
)
from alf.algorithms.clipped_surrogate import ClippedSurrogate
from alf.algorithms.intrinsic.critic import Estimator
from alf.config import configurable, invalid_value
from alf.data_structures import Experience, LossInfo, StepType
from alf.utils.schedules import Schedule
from alf.utils.value_ops import valid_mask, vtrace

__all__ = ["AppoAlgorithm"]


@configurable
class AppoAlgorithm(ActorCriticAlgorithm):
    """APPO: PPO's clipped objective on V-trace targets, for lagging behaviour policies.

    :meth:`preprocess_experience` recomputes, with the current networks and without
    autograd, the log-probabilities of the stored actions and the values of every row of
    the ``[T+1, B]`` trajectory; ``log_rhos = log pi(a|x) - log mu(a|x)`` (``mu``: the
    behaviour log-probability in ``rollout_info.log_prob``) feed
    :func:`~alf.utils.value_ops.vtrace`, whose ``vs`` become the value targets
    (``returns``) and whose policy-gradient advantages (``min(clip_pg_rho, rho) (r +
    gamma v' - V)``) become ``advantage``. V-trace is computed once per trajectory.

    The policy loss is PPO's clipped surrogate with ``ratio = exp(log pi_new(a|x) -
    log mu(a|x))``: the ratio to the behaviour policy, so that actions the current
    policy already prefers more (or less) than the stale behaviour policy did are
    clipped. With ``num_epochs > 1`` or several mini-batches, later updates are further
    off-policy with respect to ``mu``; the clip handles that as in PPO. The value loss is
    the squared error to ``vs`` (optionally clipped around the recomputed values, like
    PPO's ``value_clip``), and an entropy bonus is added. (The advantages keep V-trace's
    ``min(clip_pg_rho, rho)`` weight on top of the surrogate's ratio, as RLlib's APPO
    does: this only damps the steps whose action the current policy now likes less than
    the behaviour policy did; on-policy both are 1.)

    When the behaviour policy is the current one (all ratios 1), V-trace's ``vs`` are
    GAE's lambda-returns, and APPO trains like PPO with ``gae_lambda`` as its lambda.

    The clipped objective is a
    :class:`~alf.algorithms.clipped_surrogate.ClippedSurrogate` (``objective``), as in
    :class:`~alf.algorithms.PPOAlgorithm`; the whole loss is :meth:`calc_loss`.

    ``calc_loss`` reports ``clip_fraction`` and ``mean_rho`` (the mean ratio to the
    behaviour policy in the mini-batch); on the iterations whose summary is written,
    each update also reports ``approx_kl`` (of the behaviour policy to the one being
    trained, so it includes the policy lag) and the iteration ``explained_variance``
    (of V-trace's ``vs`` by the values recomputed in preprocessing), as PPO does.
    :meth:`train_from_unroll` also reports, over the
    trajectory's steps when V-trace was computed (before any update on it),
    ``vtrace_mean_rho``, the mean of ``pi/mu`` (about 1 whatever the lag, since
    ``E_mu[pi/mu] = 1``), and ``vtrace_mean_abs_log_rho``, the mean of ``|log(pi/mu)|``
    (0 on-policy; it grows with the behaviour policy's staleness).

    With ``single_pass``, V-trace is instead computed per mini-batch from the forward
    pass of the update itself (IMPALA's and Sample Factory's shape): the mini-batches are
    whole columns of the trajectory (the ``T+1`` rows of one environment's fragment, the
    last one only for the bootstrap value), ``mini_batch_size // T`` columns each (at
    least one); each update runs the networks on its columns once, with gradients, and
    takes the V-trace targets from those log-probabilities and values without gradients.
    This saves the separate no-grad pass over the whole trajectory (one forward per step
    of the ``T+1`` rows; 18% of an iteration's time on VizDoom Basic, see
    ``docs/pixels.md``), at the price of a mini-batch that is ``T`` steps of few
    environments instead of steps drawn from all. The "old" values of ``value_clip`` are
    then those the actors computed while collecting (as in Sample Factory), and the
    trajectory's ``explained_variance`` and V-trace statistics are averaged over the
    mini-batches. It needs stateless networks, ``num_epochs = 1`` and no intrinsic
    reward.

    Recurrent (LSTM) actor and value networks are supported: the collectors store the
    state given to ``rollout_step`` with every step (in an asynchronous run, in the
    shared fragments), and preprocessing runs the networks along the whole ``[T+1, B]``
    trajectory from the state stored with its first row
    (:meth:`~alf.algorithms.OnPolicyAlgorithm.run_sequences`; from zeros without
    ``use_rollout_state``), resetting it at episode starts. Training then runs sequences
    of ``mini_batch_length`` steps (default: the whole unroll) from their stored states,
    as :class:`~alf.algorithms.PPOAlgorithm` does. The stored states are the behaviour
    policy's; V-trace corrects the actions' lag, not the states'.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: spec of one action.
        clip: the ratio clip epsilon, a number or a :class:`Schedule`.
        value_clip: if given, clip the new value to ``old_value +- value_clip`` (the old
            value being the one recomputed in preprocessing) and take the larger of the
            clipped and unclipped errors.
        gae_lambda: the lambda of V-trace's traces (``c_t = gae_lambda * min(clip_c,
            rho_t)``); named as in :class:`ActorCriticAlgorithm`, whose GAE lambda it
            equals when the behaviour policy is the current one. Default 1.0 (IMPALA's).
        clip_rho: V-trace's truncation of the importance weights of the TD errors
            (``rho_bar``).
        clip_c: V-trace's truncation of the trace coefficients (``c_bar``).
        clip_pg_rho: truncation of the importance weights of the policy-gradient
            advantages.
        normalize_advantages: normalise advantages per mini-batch.
        num_epochs: passes over each trajectory. Default 1: with an asynchronous
            collector, the learner's time per trajectory adds to the policy lag.
        mini_batch_size: steps per update (an int >= 1). Default None: one update on the
            whole trajectory (IMPALA's shape: the learner's cost per trajectory is one
            update, and every update uses the freshest data). Set it (and
            ``num_epochs``) to reuse each trajectory more, as PPO does; the clip keeps
            those updates close to the behaviour policy.
        single_pass: compute V-trace per mini-batch of whole columns from the update's
            own forward pass instead of in a separate pass before the updates (see
            above).
        **kwargs: see :class:`ActorCriticAlgorithm` (``gamma``, ``value_loss_coef``,
            ``entropy_coef``, ``reward_scale``, ``actor_network_ctor``,
            ``value_network_ctor`` or ``actor_value_network_ctor``, optimizer, learning
            rate and gradient clipping).
    """

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        clip: float | Schedule = 0.2,
        value_clip: float | None = None,
        gae_lambda: float = 1.0,
        clip_rho: float = 1.0,
        clip_c: float = 1.0,
        clip_pg_rho: float = 1.0,
        normalize_advantages: bool = True,
        num_epochs: int = 1,
        mini_batch_size: int | None = None,
        single_pass: bool = False,
        **kwargs: Any,
    ) -> None:
        self.single_pass = single_pass  # read by uses_rollout_values while building
        super().__init__(
            observation_spec=observation_spec,
            action_spec=action_spec,
            gae_lambda=gae_lambda,
            normalize_advantages=normalize_advantages,
            num_epochs=num_epochs,
            mini_batch_size=mini_batch_size,
            **kwargs,
        )
        truncations = {"clip_rho": clip_rho, "clip_c": clip_c, "clip_pg_rho": clip_pg_rho}
        for name, value in truncations.items():
            if not value > 0:
                raise invalid_value(f"AppoAlgorithm.{name}", value, "> 0")
        self.objective = ClippedSurrogate(
            clip=clip, value_clip=value_clip, owner=type(self).__name__
        )
        self.clip_rho = clip_rho
        self.clip_c = clip_c
        self.clip_pg_rho = clip_pg_rho
        self._vtrace_stats: dict[str, torch.Tensor] = {}
        if single_pass:
            self._check_single_pass(num_epochs)

    @property
    def uses_rollout_values(self) -> bool:  # type: ignore[override]
        """Only the single pass reads the actors' values (``value_clip``'s old values);
        otherwise V-trace recomputes them and collection skips the value network."""
        return self.single_pass

    def _check_single_pass(self, num_epochs: int) -> None:
        if num_epochs != 1:
            raise invalid_value(
                "AppoAlgorithm.num_epochs", num_epochs, "1 with AppoAlgorithm.single_pass"
            )
        if self.is_recurrent:
            raise invalid_value(
                "AppoAlgorithm.single_pass", True, "False with recurrent (LSTM) networks"
            )
        if self.intrinsic is not None:
            raise invalid_value("AppoAlgorithm.single_pass", True, "False with an intrinsic reward")

    def target_log_prob_and_value(self, exp: Experience) -> tuple[torch.Tensor, torch.Tensor]:
        """The current policy's log-probabilities of ``exp``'s actions and the current
        values of its observations, for a ``[T, B]`` trajectory (both ``[T, B]``).

        Recurrent networks run along the trajectory from the state stored with its first
        row (zeros without ``use_rollout_state``), reset at FIRST steps."""
        outer = exp.step_type.shape[:2]
        if self.is_recurrent:
            if self.use_rollout_state:
                state = nest.map_structure(lambda x: x[0], exp.state)
            else:
                state = self.zero_state(self.train_state_spec, outer[1])
            info = self.run_sequences(exp, state).info
            return info.log_prob, info.value

        def flat(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(-1, *x.shape[2:])

        observation = nest.map_structure(flat, exp.observation)
        action = nest.map_structure(flat, exp.action)
        dist, value, _ = self.evaluate(observation, ())
        log_prob = dist.log_prob(action)
        return log_prob.reshape(outer), value.reshape(outer)

    def preprocess_experience(self, exp: Experience) -> Experience:
        """V-trace targets for a ``[T+1, B]`` trajectory (see the class docstring).

        Returns:
            The ``[T, B]`` trajectory whose ``rollout_info`` is an
            :class:`ActorCriticRolloutInfo` of the behaviour ``log_prob``, the recomputed
            ``value``, V-trace's policy-gradient ``advantage`` and its ``returns`` (``vs``).
        """
        if self.single_pass:
            return exp  # V-trace per mini-batch, in _single_pass_loss
        info: ActorCriticRolloutInfo = exp.rollout_info
        log_prob, value = self.target_log_prob_and_value(exp)
        log_rhos = log_prob - info.log_prob
        returns, advantages = self._vtrace(exp, log_rhos, value)
        self._vtrace_stats = _log_rho_statistics(log_rhos, valid_mask(exp.step_type).bool())
        head = nest.map_structure(lambda t: t[:-1], exp._replace(rollout_info=()))
        rollout_info = info._replace(
            log_prob=info.log_prob[:-1], value=value[:-1], advantage=advantages, returns=returns
        )
        # The intrinsic returns run across episode ends: the action recorded at a LAST row
        # never reached the environment, so its ratio must not cut their traces.
        intrinsic_log_rhos = log_rhos.masked_fill(exp.step_type == StepType.LAST, 0.0)
        estimator = self._vtrace_estimator(intrinsic_log_rhos)
        return head._replace(rollout_info=self.with_intrinsic(exp, rollout_info, estimator))

    def _vtrace(
        self, exp: Experience, log_rhos: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V-trace's ``(vs, pg_advantages)`` of a ``[T+1, B]`` trajectory."""
        return vtrace(
            rewards=exp.reward * self.reward_scale,
            values=values,
            step_types=exp.step_type,
            discounts=exp.discount,
            log_rhos=log_rhos,
            gamma=self.gamma,
            td_lambda=self.gae_lambda,
            clip_rho=self.clip_rho,
            clip_c=self.clip_c,
            clip_pg_rho=self.clip_pg_rho,
        )

    def train_updates(
        self, exp: Experience, valid: torch.Tensor
    ) -> tuple[list[dict[str, Any]], int]:
        """With ``single_pass``, updates on mini-batches of whole ``[T+1]`` columns of the
        unpreprocessed trajectory; otherwise as :class:`OnPolicyAlgorithm`."""
        if not self.single_pass:
            return super().train_updates(exp, valid)
        length, batch = valid.shape
        per_batch = max(1, (self.mini_batch_size or length * batch) // length)
        return self.train_on_columns(exp, valid, per_batch, self._single_pass_loss)

    def _single_pass_loss(self, exp: Experience, valid: torch.Tensor) -> LossInfo:
        """The loss of ``[T+1, b]`` columns (``valid``: ``[T, b]``) with V-trace targets
        from this forward pass (without gradients through them)."""
        outer = exp.step_type.shape
        flat = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:]), exp)
        dist, value, _ = self.evaluate(flat.observation, ())
        log_prob = dist.log_prob(flat.action).reshape(outer)
        value = value.reshape(outer)
        behaviour: ActorCriticRolloutInfo = exp.rollout_info
        log_rhos = log_prob.detach() - behaviour.log_prob
        returns, advantages = self._vtrace(exp, log_rhos, value.detach())
        rollout = ActorCriticRolloutInfo(
            log_prob=behaviour.log_prob[:-1],
            value=behaviour.value[:-1],
            advantage=advantages,
            returns=returns,
        )
        info = ActorCriticTrainInfo(
            log_prob=log_prob[:-1],
            entropy=dist.entropy().reshape(outer)[:-1],
            value=value[:-1],
            rollout=rollout,
        )
        steps = valid.reshape(-1)
        loss_info = self.loss_with_statistics(
            nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:])[steps], info)
        )
        if self.record_statistics:
            loss_info.extra.update(_log_rho_statistics(log_rhos, valid))
            loss_info.extra.update(
                self.objective.trajectory_statistics(value[:-1].detach(), returns, valid)
            )
        return loss_info

    def _vtrace_estimator(self, log_rhos: torch.Tensor) -> Estimator:
        """V-trace with this trajectory's ratios, as an intrinsic-return estimator."""

        def estimate(**kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            vs, advantages = vtrace(
                log_rhos=log_rhos,
                td_lambda=self.gae_lambda,
                clip_rho=self.clip_rho,
                clip_c=self.clip_c,
                clip_pg_rho=self.clip_pg_rho,
                **kwargs,
            )
            return advantages, vs

        return estimate

    def train_from_unroll(self, exp: Experience) -> dict[str, Any]:
        stats = super().train_from_unroll(exp)
        stats.update(self._vtrace_stats)
        return stats

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
        """APPO's loss: the clipped surrogate of the V-trace advantages (ratio to the
        behaviour policy), plus ``value_loss_coef`` times the (optionally clipped)
        squared error to V-trace's ``vs``, minus ``entropy_coef`` times the entropy
        (means over the mini-batch); ``mean_rho``, and ``clip_fraction`` when
        :attr:`record_statistics` is set, in ``extra``."""
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
        extra["mean_rho"] = torch.exp(info.log_prob.detach() - rollout.log_prob).mean()
        return LossInfo(loss=loss, extra=extra)

    def update_statistics(self, info: ActorCriticTrainInfo) -> dict[str, torch.Tensor]:
        """``approx_kl`` of the mini-batch, on the iterations whose summary is written."""
        if not self.record_statistics:
            return {}
        return self.objective.update_statistics(info.log_prob, info.rollout.log_prob)

    def trajectory_statistics(self, exp: Experience, valid: torch.Tensor) -> dict[str, Any]:
        """``explained_variance`` of ``vs`` by the recomputed values."""
        if self.single_pass:
            return {}  # per mini-batch, in _single_pass_loss
        info = exp.rollout_info
        stats = super().trajectory_statistics(exp, valid)
        return {**stats, **self.objective.trajectory_statistics(info.value, info.returns, valid)}


def _log_rho_statistics(log_rhos: torch.Tensor, valid: torch.Tensor) -> dict[str, torch.Tensor]:
    """``vtrace_mean_rho`` and ``vtrace_mean_abs_log_rho`` over the ``[T, B]`` steps
    where ``valid`` of a ``[T+1, B]`` trajectory's ``log_rhos`` (none without a step)."""
    valid_log_rhos = log_rhos[:-1][valid]
    if not valid_log_rhos.numel():
        return {}
    return {
        "vtrace_mean_rho": valid_log_rhos.exp().mean(),
        "vtrace_mean_abs_log_rho": valid_log_rhos.abs().mean(),
    }
