"""How an actor-critic algorithm evaluates its policy and value: two networks or one.

:class:`~alf.algorithms.ActorCriticAlgorithm` (and PPO and APPO on top of it) picks one
of these once, in its constructor, and calls it from ``predict_step``,
``rollout_step``, ``train_step`` and ``train_sequence``:

* :class:`SeparateNetworks`: an actor network and a value network, each with its own
  encoder (the default; for plain MLPs collection evaluates them together, see
  :mod:`alf.networks.fused_actor_value`);
* :class:`SharedTorso`: one :class:`~alf.networks.ActorValueNetwork`, whose encoder
  feeds both heads (Sample Factory's layout: the image is encoded once per step, and
  both the policy and the value loss train the encoder).

Both give ``(dist, value, state)`` for a step (:meth:`~SeparateNetworks.evaluate`) and
for ``[L, B]`` sequences (:meth:`~SeparateNetworks.unroll`), the distribution alone for
``predict_step`` (:meth:`~SeparateNetworks.predict`), and the sampled action with its
log-probability and value for ``rollout_step`` (:meth:`~SeparateNetworks.sample`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import torch
import torch.distributions as td
import torch.nn as nn

from alf import nest
from alf.networks import (
    ActorDistributionNetwork,
    ValueNetwork,
    state_spec_of,
    step_network,
    unroll_network,
)
from alf.networks.fused_actor_value import FusedActorValue, fuse_actor_value
from alf.utils.distributions import sample

__all__ = [
    "ActorCriticNetworks",
    "ActorCriticState",
    "SeparateNetworks",
    "SharedTorso",
    "make_actor_critic_networks",
]

Evaluation = tuple[td.Distribution, torch.Tensor, Any]
"""The action distribution, the values and the new state."""


class ActorCriticState(NamedTuple):
    """The recurrent state of :class:`SeparateNetworks` (an actor-critic algorithm's
    rollout and train state): the actor's and the value network's states (each ``()``
    when that network is stateless)."""

    actor: Any = ()
    value: Any = ()


class ActorCriticNetworks(Protocol):
    """What an actor-critic algorithm asks of its networks (see the module docstring).

    ``networks`` are the modules to register on the algorithm, by attribute name (its
    checkpoint keys start with these names)."""

    networks: dict[str, nn.Module]
    predict_state_spec: Any
    rollout_state_spec: Any
    fused: FusedActorValue | None

    def predict(self, observation: Any, state: Any) -> tuple[td.Distribution, Any]: ...

    def evaluate(self, observation: Any, state: Any) -> Evaluation: ...

    def unroll(self, observation: Any, state: Any, first: torch.Tensor) -> Evaluation: ...

    def sample(
        self, observation: Any, state: Any, *, fused: bool, values: bool
    ) -> tuple[Any, torch.Tensor, torch.Tensor, Any]: ...

    def session(self) -> contextlib.AbstractContextManager[None]: ...

    def skips_values(self, *, fused: bool) -> bool: ...


class SeparateNetworks:
    """An actor network and a value network, each with its own encoder.

    Args:
        actor: observation -> action distribution (e.g.
            :class:`~alf.networks.ActorDistributionNetwork`), stateless or recurrent.
        value: observation -> ``[B]`` values (e.g. :class:`~alf.networks.ValueNetwork`).
        fused_rollout: evaluate the two together during collection where
            :func:`~alf.networks.fused_actor_value.fuse_actor_value` can.
        numpy_rollout: let the fused evaluation compute in numpy where it can.
    """

    def __init__(
        self, *, actor: nn.Module, value: nn.Module, fused_rollout: bool, numpy_rollout: bool
    ) -> None:
        self.actor = actor
        self.value = value
        self.networks = {"actor_network": actor, "value_network": value}
        self._actor_state_spec = state_spec_of(actor)
        self._value_state_spec = state_spec_of(value)
        self._stateless = not nest.flatten((self._actor_state_spec, self._value_state_spec))
        self.fused = fuse_actor_value(actor, value, numpy=numpy_rollout) if fused_rollout else None

    @property
    def predict_state_spec(self) -> Any:
        """The actor's state spec (``()`` when it is stateless)."""
        return self._actor_state_spec

    @property
    def rollout_state_spec(self) -> Any:
        """An :class:`ActorCriticState` of both networks' state specs, ``()`` when both
        are stateless."""
        if self._stateless:
            return ()
        return ActorCriticState(actor=self._actor_state_spec, value=self._value_state_spec)

    def predict(self, observation: Any, state: Any) -> tuple[td.Distribution, Any]:
        """The action distribution of one step and the actor's new state."""
        if self._stateless:
            return self.actor(observation), state
        return step_network(self.actor, observation, state)

    def evaluate(self, observation: Any, state: Any) -> Evaluation:
        """The action distribution, the value and the new state of one time step."""
        if self._stateless:
            return self.actor(observation), self.value(observation), state
        dist, actor_state = step_network(self.actor, observation, state.actor)
        value, value_state = step_network(self.value, observation, state.value)
        return dist, value, ActorCriticState(actor=actor_state, value=value_state)

    def unroll(self, observation: Any, state: Any, first: torch.Tensor) -> Evaluation:
        """Both networks along ``[L, B]`` sequences (:func:`~alf.networks.unroll_network`):
        a distribution and values of ``[L * B]`` rows, and the state after the last."""
        actor_state, value_state = ((), ()) if self._stateless else (state.actor, state.value)
        dist, actor_state = unroll_network(self.actor, observation, actor_state, first)
        value, value_state = unroll_network(self.value, observation, value_state, first)
        if not self._stateless:
            state = ActorCriticState(actor=actor_state, value=value_state)
        return dist, value, state

    def sample(
        self, observation: Any, state: Any, *, fused: bool, values: bool
    ) -> tuple[Any, torch.Tensor, torch.Tensor, Any]:
        """Draws the actions of one collection step: the actions, their log-probabilities,
        the values and the new state; with ``fused`` (the algorithm's ``fused_rollout``)
        from the fused evaluation where it applies now. Without ``values`` (an algorithm
        that recomputes them in training), stateless networks skip the value network and
        return zeros in its place; a recurrent value network still steps, since its
        state is stored with the trajectory."""
        if fused and self.fused.applies():
            action, log_prob, value = self.fused.sample(observation)
            return action, log_prob, value, state
        if not values and self._stateless:
            dist = self.actor(observation)
            action = sample(dist)
            log_prob = dist.log_prob(action)
            return action, log_prob, torch.zeros_like(log_prob), state
        dist, value, state = self.evaluate(observation, state)
        action = sample(dist)
        return action, dist.log_prob(action), value, state

    def skips_values(self, *, fused: bool) -> bool:
        """Whether :meth:`sample` without ``values`` never runs the value network (then
        acting never reads its parameters): stateless networks, not evaluated fused."""
        return self._stateless and not fused

    def session(self) -> contextlib.AbstractContextManager[None]:
        """The fused evaluation's session (a no-op without one)."""
        if self.fused is None:
            return contextlib.nullcontext()
        return self.fused.session()


class SharedTorso:
    """One :class:`~alf.networks.ActorValueNetwork`: ``network(observation) -> (dist,
    value)``, recurrent or not; its state is the torso's (the same for predicting,
    collecting and training).

    Args:
        network: the actor-value network.
    """

    fused = None

    def __init__(self, *, network: nn.Module) -> None:
        self.network = network
        self.networks = {"actor_value_network": network}
        self.predict_state_spec = state_spec_of(network)
        self.rollout_state_spec = self.predict_state_spec

    def predict(self, observation: Any, state: Any) -> tuple[td.Distribution, Any]:
        """The action distribution of one step and the new state."""
        (dist, _), state = step_network(self.network, observation, state)
        return dist, state

    def evaluate(self, observation: Any, state: Any) -> Evaluation:
        """The action distribution, the value and the new state of one time step."""
        (dist, value), state = step_network(self.network, observation, state)
        return dist, value, state

    def unroll(self, observation: Any, state: Any, first: torch.Tensor) -> Evaluation:
        """The network along ``[L, B]`` sequences: a distribution and values of
        ``[L * B]`` rows, and the state after the last."""
        (dist, value), state = unroll_network(self.network, observation, state, first)
        return dist, value, state

    def sample(
        self, observation: Any, state: Any, *, fused: bool, values: bool
    ) -> tuple[Any, torch.Tensor, torch.Tensor, Any]:
        """Draws the actions of one collection step: the actions, their log-probabilities,
        the values and the new state (``fused`` and ``values`` are ignored: there is
        nothing to fuse, and the value head costs little beside the shared torso)."""
        dist, value, state = self.evaluate(observation, state)
        action = sample(dist)
        return action, dist.log_prob(action), value, state

    def skips_values(self, *, fused: bool) -> bool:
        """Never: the value head shares the torso, so acting reads every parameter."""
        return False

    def session(self) -> contextlib.AbstractContextManager[None]:
        """No session is needed."""
        return contextlib.nullcontext()


def make_actor_critic_networks(
    *,
    observation_spec: Any,
    action_spec: Any,
    actor_network_ctor: Callable[..., nn.Module],
    value_network_ctor: Callable[..., nn.Module],
    actor_value_network_ctor: Callable[..., nn.Module] | None,
    fused_rollout: bool,
    numpy_rollout: bool,
) -> ActorCriticNetworks:
    """Builds :class:`SharedTorso` with ``actor_value_network_ctor``, else
    :class:`SeparateNetworks` (the arguments are those of
    :class:`~alf.algorithms.ActorCriticAlgorithm`).

    Raises:
        ValueError: ``actor_value_network_ctor`` is given together with an actor or value
            network other than the default (it would be left unused).
    """
    if actor_value_network_ctor is not None:
        if actor_network_ctor is not ActorDistributionNetwork or value_network_ctor is not (
            ValueNetwork
        ):
            raise ValueError(
                "ActorCriticAlgorithm: actor_value_network_ctor builds one network for the "
                "policy and the value; leave actor_network_ctor and value_network_ctor "
                f"unset (got {actor_network_ctor!r} and {value_network_ctor!r})"
            )
        network = actor_value_network_ctor(input_spec=observation_spec, action_spec=action_spec)
        return SharedTorso(network=network)
    actor = actor_network_ctor(input_spec=observation_spec, action_spec=action_spec)
    value = value_network_ctor(input_spec=observation_spec)
    return SeparateNetworks(
        actor=actor, value=value, fused_rollout=fused_rollout, numpy_rollout=numpy_rollout
    )
