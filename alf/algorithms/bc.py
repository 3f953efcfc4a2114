"""Behaviour cloning: a policy fitted to the actions of offline data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn as nn

from alf.algorithms.off_policy_algorithm import (
    OffPolicyAlgorithm,
    masked_mean,
    valid_transitions,
)
from alf.algorithms.offline_rl import first_row, normalized_squared_error, prepare_offline_data
from alf.algorithms.rl_algorithm import LearningSetup
from alf.config import configurable
from alf.data_structures import AlgStep, Experience, LossInfo, TimeStep
from alf.networks import ActorDistributionNetwork, ActorNetwork, require_stateless
from alf.tensor_specs import BoundedTensorSpec, action_bounds
from alf.utils.distributions import distribution_mode, sample

__all__ = ["BcAlgorithm", "BcInfo"]


class BcInfo(NamedTuple):
    """What :meth:`BcAlgorithm.train_step` hands to ``calc_loss`` (all ``[B]``)."""

    loss: torch.Tensor
    valid: torch.Tensor
    weights: torch.Tensor


def _is_box(action_spec: Any) -> bool:
    return isinstance(action_spec, BoundedTensorSpec) and not action_spec.is_discrete


@configurable
class BcAlgorithm(OffPolicyAlgorithm):
    """Behaviour cloning: maximises the likelihood of the data's actions (offline data,
    or whatever the replay holds), with no reward or value.

    A continuous (Box) action is cloned by a deterministic actor (``ActorNetwork``,
    ``tanh`` into the bounds) with the mean squared error of the actions in units of
    half the action range, as CORL's BC and d3rlpy's default (``deterministic``) do;
    with ``deterministic=False`` by a tanh-squashed Normal (``ActorDistributionNetwork``)
    with the negative log-likelihood. Any other action space (Discrete, MultiDiscrete,
    MultiBinary, Dict/Tuple) always uses the distribution network and the negative
    log-likelihood: cross-entropy for discrete actions, where an invalid-action mask in
    the observations gives the invalid actions probability zero (as the other
    algorithms do; the data's own actions must be valid).

    Evaluation takes the actor's action (the distribution's mode); rollouts (a hybrid
    run's collection) the same for the deterministic actor, a sample otherwise.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: nest of bounded specs of one action.
        deterministic: Box actions: the deterministic actor and the squared error
            (True), or the squashed Normal and the log-likelihood (False).
        actor_network_ctor: builds the deterministic actor from ``input_spec,
            action_spec``.
        distribution_network_ctor: builds the action distribution from ``input_spec,
            action_spec`` (``squash=True`` and ``state_dependent_std=True`` are set).
        **kwargs: :class:`OffPolicyAlgorithm` and :class:`Algorithm` arguments.
    """

    needs_offline_data = True

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        deterministic: bool = True,
        actor_network_ctor: Callable[..., nn.Module] = ActorNetwork,
        distribution_network_ctor: Callable[..., nn.Module] = ActorDistributionNetwork,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_spec=observation_spec, action_spec=action_spec, **kwargs)
        self.deterministic = deterministic and _is_box(action_spec)
        if self.deterministic:
            self.actor_network = actor_network_ctor(
                input_spec=observation_spec, action_spec=action_spec
            )
            low, high = action_bounds(action_spec)
            self.register_buffer("_half_range", (high - low) / 2)
        else:
            self.actor_network = distribution_network_ctor(
                input_spec=observation_spec,
                action_spec=action_spec,
                squash=True,
                state_dependent_std=True,
            )
        require_stateless(type(self).__name__, actor_network=self.actor_network)

    def prepare_learning(self, setup: LearningSetup) -> None:
        """:meth:`OffPolicyAlgorithm.prepare_learning`, then starts fresh data
        transformers from the offline data (see :mod:`~alf.algorithms.offline_rl`)."""
        super().prepare_learning(setup)
        prepare_offline_data(self, return_range=None)

    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        output = self.actor_network(time_step.observation)
        if not self.deterministic:
            output = distribution_mode(output)
        return AlgStep(output=output, state=state)

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        if self.deterministic:
            return self.predict_step(time_step, state)
        return AlgStep(output=sample(self.actor_network(time_step.observation)), state=state)

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        observation, action = first_row(exp.observation), first_row(exp.action)
        if self.deterministic:
            loss = normalized_squared_error(
                self.actor_network(observation), action, self._half_range
            )
        else:
            loss = -self.actor_network(observation).log_prob(action)
        info = BcInfo(
            loss=loss, valid=valid_transitions(exp), weights=exp.batch_info.importance_weights
        )
        return AlgStep(state=state, info=info)

    def calc_loss(self, info: BcInfo) -> LossInfo:
        loss = masked_mean(info.loss * info.weights, info.valid)
        return LossInfo(loss=loss, extra={"bc_loss": loss.detach()})
