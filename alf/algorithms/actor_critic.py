"""Advantage actor-critic (A2C) with GAE."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.distributions as td

from alf import nest
from alf.algorithms.actor_critic_networks import (
    ActorCriticNetworks,
    ActorCriticState,
    SharedTorso,
    make_actor_critic_networks,
)
from alf.algorithms.intrinsic import IntrinsicCritic, IntrinsicReward
from alf.algorithms.intrinsic.critic import Estimator
from alf.algorithms.on_policy_algorithm import OnPolicyAlgorithm
from alf.config import configurable
from alf.data_structures import AlgStep, Experience, LossInfo, StepType, TimeStep
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.networks.fused_actor_value import FusedActorValue
from alf.utils.distributions import distribution_mode
from alf.utils.value_ops import generalized_advantage_estimation

__all__ = [
    "ActorCriticAlgorithm",
    "ActorCriticRolloutInfo",
    "ActorCriticState",
    "ActorCriticTrainInfo",
]


def _squared_error(value: torch.Tensor, returns: torch.Tensor, _old: torch.Tensor) -> torch.Tensor:
    """A2C's per-step value loss (the old value is unused)."""
    return (value - returns) ** 2


class ActorCriticRolloutInfo(NamedTuple):
    """Kept for every collected step; after preprocessing also advantages and returns
    (and, with an intrinsic reward, its
    :class:`~alf.algorithms.intrinsic.IntrinsicTargets`; ``advantage`` is then the
    combined one)."""

    log_prob: torch.Tensor
    value: torch.Tensor
    advantage: Any = ()
    returns: Any = ()
    intrinsic: Any = ()


class ActorCriticTrainInfo(NamedTuple):
    """What :meth:`ActorCriticAlgorithm.train_step` hands to ``calc_loss``."""

    log_prob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor
    rollout: ActorCriticRolloutInfo
    intrinsic: Any = ()


@configurable
class ActorCriticAlgorithm(OnPolicyAlgorithm):
    """A2C: policy gradient with a learned value baseline and GAE advantages.

    The actor and value networks may be recurrent (e.g. ``lstm_hidden_size``; they then
    have a non-empty ``state_spec`` and a ``step(observation, state)`` method). The
    rollout and train state is then an :class:`ActorCriticState` of both networks'
    states, the predict state the actor's state alone; with two stateless networks every
    state is ``()``. ``train_step`` is then one time step of ``[B]`` rows:
    :class:`~alf.algorithms.on_policy_algorithm.OnPolicyAlgorithm` steps it through
    sequences, starting from the stored rollout states.

    With ``actor_value_network_ctor`` (e.g. :class:`~alf.networks.ActorValueNetwork`)
    one network with a shared torso gives both the action distribution and the value
    (``actor_value_network``, instead of ``actor_network`` and ``value_network``): an
    image is encoded once per step, and the policy and the value loss both train the
    torso. Its state (with LSTM layers) is the predict, rollout and train state. Which
    of the two is used is decided once, here
    (:mod:`~alf.algorithms.actor_critic_networks`).

    With ``intrinsic_reward_ctor`` (e.g. :class:`~alf.algorithms.intrinsic.RNDReward`)
    the algorithm holds an :class:`~alf.algorithms.intrinsic.IntrinsicCritic`
    (``intrinsic``): the bonus, computed on the learner for each trajectory, has its own
    value head and discount and non-episodic returns, and the policy is trained on
    ``ext_coef * A_ext + int_coef * A_int``; the bonus's models train in the same
    updates. Summaries ``intrinsic/...``. Collection is unchanged.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: spec of one action.
        actor_network_ctor: builds the policy from ``input_spec`` and ``action_spec``.
        value_network_ctor: builds the value network from ``input_spec``.
        actor_value_network_ctor: None (the default) builds the two networks above. Given,
            it builds the one network, from ``input_spec`` and ``action_spec``, whose
            call gives ``(dist, value)`` (see :class:`~alf.networks.ActorValueNetwork`);
            ``actor_network_ctor`` and ``value_network_ctor`` must then be left unset.
        gamma: discount factor.
        gae_lambda: GAE's lambda.
        value_loss_coef: weight of the value loss.
        entropy_coef: weight of the entropy bonus.
        normalize_advantages: normalise advantages within each mini-batch.
        reward_scale: rewards are multiplied by this before computing targets.
        num_epochs: see :class:`OnPolicyAlgorithm` (A2C: 1).
        mini_batch_size: see :class:`OnPolicyAlgorithm` (A2C: None).
        fused_rollout: evaluate the separate actor and value networks together in
            ``rollout_step`` when both are plain MLPs of the same shape on the same
            observation (:class:`~alf.networks.fused_actor_value.FusedActorValue`: one
            operation per layer, the same parameters, results equal up to float
            rounding); False always calls them one after the other.
        numpy_rollout: with ``fused_rollout``, compute the two networks, the action
            draw and its log-probability in numpy where they allow it (tanh or ReLU
            MLPs, float32 on the CPU, a ``Discrete`` or unsquashed ``Box`` action with
            a state-independent standard deviation;
            :meth:`~alf.networks.fused_actor_value.FusedActorValue.sample`): about twice
            as fast at collection's batch sizes, the same draws up to float rounding.
            False computes them with torch.
        intrinsic_reward_ctor: None (the default): no intrinsic reward. Given, builds
            the :class:`~alf.algorithms.intrinsic.IntrinsicReward` from
            ``observation_spec`` and ``action_spec``.
        intrinsic_value_network_ctor: builds the intrinsic value head (a stateless
            network, from ``input_spec``) when there is an intrinsic reward.
        **kwargs: optimizer, learning rate and gradient clipping (:class:`Algorithm`).
    """

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        actor_network_ctor: Callable[..., torch.nn.Module] = ActorDistributionNetwork,
        value_network_ctor: Callable[..., torch.nn.Module] = ValueNetwork,
        actor_value_network_ctor: Callable[..., torch.nn.Module] | None = None,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        value_loss_coef: float = 0.5,
        entropy_coef: float = 0.0,
        normalize_advantages: bool = False,
        reward_scale: float = 1.0,
        num_epochs: int = 1,
        mini_batch_size: int | None = None,
        fused_rollout: bool = True,
        numpy_rollout: bool = True,
        intrinsic_reward_ctor: Callable[..., IntrinsicReward] | None = None,
        intrinsic_value_network_ctor: Callable[..., torch.nn.Module] = ValueNetwork,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            observation_spec=observation_spec,
            action_spec=action_spec,
            num_epochs=num_epochs,
            mini_batch_size=mini_batch_size,
            **kwargs,
        )
        self._networks: ActorCriticNetworks = make_actor_critic_networks(
            observation_spec=observation_spec,
            action_spec=action_spec,
            actor_network_ctor=actor_network_ctor,
            value_network_ctor=value_network_ctor,
            actor_value_network_ctor=actor_value_network_ctor,
            fused_rollout=fused_rollout,
            numpy_rollout=numpy_rollout,
        )
        for name, network in self._networks.networks.items():
            self.add_module(name, network)
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.value_loss_coef = value_loss_coef
        self.entropy_coef = entropy_coef
        self.normalize_advantages = normalize_advantages
        self.reward_scale = reward_scale
        self.intrinsic: IntrinsicCritic | None = None
        if intrinsic_reward_ctor is not None:
            self.intrinsic = IntrinsicCritic(
                reward=intrinsic_reward_ctor(
                    observation_spec=observation_spec, action_spec=action_spec
                ),
                value_network=intrinsic_value_network_ctor(input_spec=observation_spec),
                owner=type(self).__name__,
            )
        # State trained and used on the learner alone: asynchronous actors are not sent it.
        learner_only = ["intrinsic."] if self.intrinsic is not None else []
        if not self.uses_rollout_values and self._networks.skips_values(fused=self.fused_rollout):
            learner_only.append("value_network.")
        self.learner_only_state = tuple(learner_only)

    @property
    def shared_torso(self) -> bool:
        """Whether one :class:`~alf.networks.ActorValueNetwork` (``actor_value_network``)
        gives the policy and the value, rather than ``actor_network`` and
        ``value_network``."""
        return isinstance(self._networks, SharedTorso)

    @property
    def predict_state_spec(self) -> Any:
        """The actor's (or the shared torso's) state spec (``()`` when stateless)."""
        return self._networks.predict_state_spec

    @property
    def rollout_state_spec(self) -> Any:
        """Separate networks: an :class:`ActorCriticState` of both networks' state specs,
        ``()`` when both are stateless. A shared torso: its state spec."""
        return self._networks.rollout_state_spec

    @property
    def train_state_spec(self) -> Any:
        """The same as :attr:`rollout_state_spec`."""
        return self.rollout_state_spec

    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        dist, state = self._networks.predict(time_step.observation, state)
        return AlgStep(output=distribution_mode(dist), state=state)

    def evaluate(self, observation: Any, state: Any) -> tuple[td.Distribution, torch.Tensor, Any]:
        """The action distribution, the value and the new state of one time step (any
        batch of steps with stateless networks)."""
        return self._networks.evaluate(observation, state)

    @property
    def _fused(self) -> FusedActorValue | None:
        """The separate networks' fused evaluation for collection (None without one)."""
        return self._networks.fused

    uses_rollout_values: bool = True
    """Whether training reads the values computed during collection (GAE does); an
    algorithm that recomputes them (APPO's V-trace) sets False, and its stateless
    networks then skip the value network while collecting (zeros stand in); unless
    evaluated fused, the value network is then ``learner_only_state``."""

    @property
    def fused_rollout(self) -> bool:
        """Whether ``rollout_step`` evaluates the two networks together
        (:class:`~alf.networks.fused_actor_value.FusedActorValue`)."""
        fused = self._fused
        return (
            fused is not None
            and fused.actor is self.actor_network
            and fused.value is self.value_network
        )

    def rollout_session(self) -> contextlib.AbstractContextManager[None]:
        """With :attr:`fused_rollout`, the span in which ``rollout_step`` evaluates the
        networks together from fused weights built once (see
        :meth:`~alf.networks.fused_actor_value.FusedActorValue.session`); outside a
        session it calls them one after the other."""
        if self.fused_rollout:
            return self._networks.session()
        return contextlib.nullcontext()

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        action, log_prob, value, state = self._networks.sample(
            time_step.observation,
            state,
            fused=self.fused_rollout,
            values=self.uses_rollout_values,
        )
        info = ActorCriticRolloutInfo(log_prob=log_prob, value=value)
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
            rollout_info=self.with_intrinsic(
                exp,
                info._replace(
                    log_prob=info.log_prob[:-1],
                    value=info.value[:-1],
                    advantage=advantages,
                    returns=returns,
                ),
                self._gae,
            )
        )

    def _gae(self, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return generalized_advantage_estimation(td_lambda=self.gae_lambda, **kwargs)

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        if self.intrinsic is not None:
            self.intrinsic.reward.set_progress(progress)

    def with_intrinsic(
        self, exp: Experience, info: ActorCriticRolloutInfo, estimator: Estimator
    ) -> ActorCriticRolloutInfo:
        """``info`` (of the first ``T`` rows of the ``[T+1, B]`` ``exp``) with the
        intrinsic targets and the combined advantage, computed with ``estimator`` (see
        :class:`~alf.algorithms.intrinsic.IntrinsicCritic`); ``info`` itself without an
        intrinsic reward."""
        if self.intrinsic is None:
            return info
        advantage, targets = self.intrinsic.targets(exp, info.advantage, estimator)
        return info._replace(advantage=advantage, intrinsic=targets)

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        """Recomputes the log-probabilities, entropies and values of ``exp``'s steps with
        gradients. Stateless networks: any batch of steps. Recurrent ones: one time step
        of ``[B]`` rows and its state; returns the new state."""
        dist, value, state = self._networks.evaluate(exp.observation, state)
        intrinsic: Any = ()
        if self.intrinsic is not None:
            intrinsic = self.intrinsic.train_info(
                exp.observation, exp.action, rollout_info.intrinsic
            )
        info = ActorCriticTrainInfo(
            log_prob=dist.log_prob(exp.action),
            entropy=dist.entropy(),
            value=value,
            rollout=rollout_info,
            intrinsic=intrinsic,
        )
        return AlgStep(output=(), state=state, info=info)

    def train_sequence(self, exp: Experience, state: Any) -> AlgStep:
        """:meth:`train_step` along ``[L, B]`` sequences with one call per network
        (:func:`~alf.networks.unroll_network`: an LSTM runs as one fused call over the
        sequences, split at the episode starts), resetting the state at FIRST steps.

        Returns:
            ``info``: an :class:`ActorCriticTrainInfo` of ``[L, B]`` tensors; ``state``:
            the state after the last row.
        """
        first = exp.step_type == StepType.FIRST
        outer = first.shape
        dist, value, state = self._networks.unroll(exp.observation, state, first)
        action = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:]), exp.action)
        intrinsic: Any = ()
        if self.intrinsic is not None:
            intrinsic = self.intrinsic.train_sequence_info(
                exp.observation, exp.action, exp.rollout_info.intrinsic
            )
        info = ActorCriticTrainInfo(
            log_prob=dist.log_prob(action).reshape(outer),
            entropy=dist.entropy().reshape(outer),
            value=value.reshape(outer),
            rollout=exp.rollout_info,
            intrinsic=intrinsic,
        )
        return AlgStep(output=(), state=state, info=info)

    def advantages(self, info: ActorCriticTrainInfo) -> torch.Tensor:
        """The (optionally normalised) advantages of a mini-batch."""
        adv = info.rollout.advantage
        if self.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        return adv

    def calc_loss(self, info: ActorCriticTrainInfo) -> LossInfo:
        """A2C's loss: ``-A log pi(a|s)`` plus ``value_loss_coef`` times the squared error
        to the lambda-return, minus ``entropy_coef`` times the entropy (means over the
        mini-batch)."""
        pg_loss = (-self.advantages(info) * info.log_prob).mean()
        value_loss = ((info.value - info.rollout.returns) ** 2).mean()
        loss = pg_loss + self.value_loss_coef * value_loss
        entropy = self.mean_entropy(info)
        if entropy is not None:
            loss = loss - self.entropy_coef * entropy
        extra = self.loss_terms(info, pg_loss=pg_loss, value_loss=value_loss, entropy=entropy)
        loss = self.add_intrinsic_loss(info, loss, extra, _squared_error)
        return LossInfo(loss=loss, extra=extra)

    def add_intrinsic_loss(
        self,
        info: ActorCriticTrainInfo,
        loss: torch.Tensor,
        extra: dict[str, torch.Tensor],
        value_loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """``loss`` plus the intrinsic value head's loss (``value_loss_coef`` times the
        mean of the per-step ``value_loss(value, returns, old_value)``) and the intrinsic
        reward's losses, their terms added to ``extra``; ``loss`` itself without an
        intrinsic reward."""
        if self.intrinsic is None or not isinstance(info.intrinsic, tuple) or not info.intrinsic:
            return loss
        added, terms = self.intrinsic.loss(
            info.intrinsic,
            info.rollout.intrinsic,
            value_loss=value_loss,
            value_loss_coef=self.value_loss_coef,
        )
        extra.update(terms)
        return loss + added

    def trajectory_statistics(self, exp: Experience, valid: torch.Tensor) -> dict[str, Any]:
        """The intrinsic reward's statistics of the trajectory (``intrinsic/...``: the
        bonus's mean and max, raw and normalised, the std it was divided by, the mean
        intrinsic value); none without one."""
        if self.intrinsic is None:
            return {}
        return dict(self.intrinsic.statistics)

    def mean_entropy(self, info: ActorCriticTrainInfo) -> torch.Tensor | None:
        """The mini-batch's mean entropy, with gradient, for the entropy bonus of the loss;
        None when ``entropy_coef`` is 0 (with a zero weight it would still cost a
        backward pass)."""
        if not self.entropy_coef:
            return None
        return info.entropy.mean()

    def loss_terms(
        self,
        info: ActorCriticTrainInfo,
        *,
        pg_loss: torch.Tensor,
        value_loss: torch.Tensor,
        entropy: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        """The terms of an actor-critic loss to report in ``LossInfo.extra``.

        Args:
            info: the mini-batch's :class:`ActorCriticTrainInfo`.
            pg_loss: the mean policy loss.
            value_loss: the mean value loss.
            entropy: the mean entropy in the loss (:meth:`mean_entropy`), or None.

        Returns:
            ``pg_loss``, ``value_loss`` and ``entropy`` without gradient; ``entropy`` is
            the one in the loss or, when there is none, computed from ``info`` on the
            iterations whose summary is written (:attr:`record_statistics`), else left
            out.
        """
        extra = {"pg_loss": pg_loss.detach(), "value_loss": value_loss.detach()}
        if entropy is not None:
            extra["entropy"] = entropy.detach()
        elif self.record_statistics:
            extra["entropy"] = info.entropy.detach().mean()
        return extra
