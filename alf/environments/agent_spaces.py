"""Agents whose spaces differ, in one batch: the padded union of their spaces.

A PettingZoo game's agents are rows of one batch, which has one observation spec and one
action spec. When the agents' spaces differ, :class:`AgentSpaces` makes the batch's
spaces their union and pads each agent's observations into it:

* a ``Box`` observation (or a ``Box`` entry of a ``Dict`` observation, the agents' Dicts
  having the same keys) is zero-padded at the end of each dimension to the largest size
  among the agents (same rank and dtype needed); the union's bounds cover every agent's
  and include 0 in the padding;
* ``Discrete`` actions (with one ``start``) become ``Discrete(n)`` for the largest ``n``:
  the values an agent does not have are masked out by an action mask
  (:func:`~alf.tensor_specs.action_mask_key`): a ``Dict`` observation gains the mask
  key (or its own mask is zero-padded), any other observation ``o`` becomes
  ``{"observation": o, "action_mask": mask}``.

Anything else that differs is refused with one line naming two agents and their spaces:
``Box`` (continuous), ``MultiDiscrete`` and ``MultiBinary`` actions, observations other
than ``Box`` and ``Dict``, Boxes of different ranks or dtypes, Dicts of different keys.
Padded observations are constant zeros for an agent, so agents whose spaces differ must
not share a policy: :meth:`AgentSpaces.mismatch` names two such agents of a group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from alf.environments.suite_gym import UnknownEnvironmentError
from alf.tensor_specs import action_mask_key

__all__ = ["AgentSpaces"]

PADS = "ALF pads Box observations (also as entries of Dict ones) and Discrete actions"
"""What can differ between agents (for error messages)."""

_Pad = Callable[[Any], Any]


def _padded_array(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(shape, dtype=array.dtype)
    out[tuple(slice(0, n) for n in array.shape)] = array
    return out


def _box_union(boxes: Sequence[gym.spaces.Box]) -> gym.spaces.Box | None:
    if len({len(b.shape) for b in boxes}) > 1 or len({b.dtype for b in boxes}) > 1:
        return None
    shape = tuple(max(sizes) for sizes in zip(*(b.shape for b in boxes), strict=True))
    low = np.min([_padded_array(b.low, shape) for b in boxes], axis=0)
    high = np.max([_padded_array(b.high, shape) for b in boxes], axis=0)
    return gym.spaces.Box(low=low, high=high, shape=shape, dtype=boxes[0].dtype)


def _observation_union(spaces: Sequence[gym.Space]) -> gym.Space | None:
    """The padded union of observation spaces (None if they cannot be padded)."""
    if all(space == spaces[0] for space in spaces):
        return spaces[0]
    if all(isinstance(space, gym.spaces.Box) for space in spaces):
        return _box_union(spaces)
    if not all(isinstance(space, gym.spaces.Dict) for space in spaces):
        return None
    keys = list(spaces[0].spaces)
    if any(set(space.spaces) != set(keys) for space in spaces):
        return None
    entries = {key: _observation_union([space[key] for space in spaces]) for key in keys}
    if any(entry is None for entry in entries.values()):
        return None
    return gym.spaces.Dict(entries)


def _action_union(spaces: Sequence[gym.Space]) -> gym.Space | None:
    """The padded union of action spaces (None if they cannot be padded)."""
    if all(space == spaces[0] for space in spaces):
        return spaces[0]
    if all(isinstance(space, gym.spaces.Discrete) for space in spaces):
        if len({int(space.start) for space in spaces}) == 1:
            return gym.spaces.Discrete(max(int(s.n) for s in spaces), start=int(spaces[0].start))
    return None


def _padder(space: gym.Space, union: gym.Space) -> _Pad | None:
    """A function padding a value of ``space`` into ``union`` (None: they are equal)."""
    if space == union:
        return None
    if isinstance(space, gym.spaces.Box):
        shape, dtype = union.shape, union.dtype
        region = tuple(slice(0, n) for n in space.shape)

        def pad_box(value: Any) -> np.ndarray:
            out = np.zeros(shape, dtype=dtype)
            out[region] = value
            return out

        return pad_box
    pads = {key: _padder(space[key], union[key]) for key in union.spaces}

    def pad_dict(value: Any) -> dict[str, Any]:
        return {k: value[k] if pad is None else pad(value[k]) for k, pad in pads.items()}

    return pad_dict


def _with_mask(pad: _Pad | None, mask: np.ndarray, key: str, wrap: bool) -> _Pad:
    """``pad`` followed by adding the constant action mask ``mask`` under ``key``
    (``wrap``: the observation becomes ``{"observation": ..., key: mask}``)."""

    def padded(value: Any) -> dict[str, Any]:
        value = value if pad is None else pad(value)
        return {"observation": value, key: mask} if wrap else {**value, key: mask}

    return padded


class AgentSpaces:
    """The spaces of a game's agents and of the batch they are rows of (see the module
    docstring).

    Args:
        env_name: the game, named in errors.
        agents: the game's agents.
        observation_spaces: each agent's observation space (in ``agents`` order).
        action_spaces: each agent's action space.

    Raises:
        UnknownEnvironmentError: agents' spaces differ in a way that cannot be padded.
    """

    def __init__(
        self,
        *,
        env_name: str,
        agents: Sequence[str],
        observation_spaces: Sequence[gym.Space],
        action_spaces: Sequence[gym.Space],
    ) -> None:
        self.env_name = env_name
        self.agents = tuple(agents)
        self.observation_spaces = tuple(observation_spaces)
        self.action_spaces = tuple(action_spaces)
        observation = self._union(_observation_union, self.observation_spaces, "observation")
        self.action_space: gym.Space = self._union(_action_union, self.action_spaces, "action")
        """The batch's action space."""
        pads = [_padder(space, observation) for space in self.observation_spaces]
        self._limits: tuple[int | None, ...] = (None,) * len(self.agents)
        self._mask_key: str | None = None
        if any(space != self.action_space for space in self.action_spaces):
            observation, pads = self._masked(observation, pads)
        self.observation_space: gym.Space = observation
        """The batch's observation space."""
        self._pads: tuple[_Pad | None, ...] = tuple(pads)

    @property
    def padded(self) -> bool:
        """Whether the agents' spaces differ (their observations are padded)."""
        return any(pad is not None for pad in self._pads)

    def _union(
        self,
        union_of: Callable[[Sequence[gym.Space]], gym.Space | None],
        spaces: Sequence[gym.Space],
        what: str,
    ) -> gym.Space:
        union = union_of(spaces)
        if union is None:
            # The first agent whose space cannot be padded with the first agent's.
            other = next(
                k for k in range(1, len(spaces)) if union_of([spaces[0], spaces[k]]) is None
            )
            raise UnknownEnvironmentError(
                f"the agents of '{self.env_name}' have different {what} spaces "
                f"({self._two(spaces, [0, other])}) that cannot be padded into one batch: "
                f"{PADS}"
            )
        return union

    def _two(self, spaces: Sequence[gym.Space], members: Sequence[int] | None = None) -> str:
        """``a: <space>; b: <space>`` for the first two of ``members`` whose spaces
        differ (empty if none)."""
        members = range(len(spaces)) if members is None else members
        first = members[0]
        for other in members[1:]:
            if spaces[other] != spaces[first]:
                return (
                    f"{self.agents[first]}: {spaces[first]}; {self.agents[other]}: {spaces[other]}"
                )
        return ""

    def _masked(
        self, observation: gym.Space, pads: list[_Pad | None]
    ) -> tuple[gym.Space, list[_Pad | None]]:
        """The observation space and pads with an action mask for padded actions."""
        key = action_mask_key()
        if key is None:
            raise UnknownEnvironmentError(
                f"the agents of '{self.env_name}' have different action spaces "
                f"({self._two(self.action_spaces)}), padded with an action mask, but "
                "action_mask_key.name is None"
            )
        self._mask_key = key
        n = int(self.action_space.n)
        start = int(self.action_space.start)
        self._limits = tuple(start + int(space.n) - 1 for space in self.action_spaces)
        if isinstance(observation, gym.spaces.Dict) and key in observation.spaces:
            return observation, pads  # the agents' own masks, zero-padded
        wrap = not isinstance(observation, gym.spaces.Dict)
        mask_space = gym.spaces.Box(0, 1, (n,), np.int8)
        entries = {"observation": observation} if wrap else dict(observation.spaces)
        masked = [
            _with_mask(pad, (np.arange(n) < space.n).astype(np.int8), key, wrap)
            for pad, space in zip(pads, self.action_spaces, strict=True)
        ]
        return gym.spaces.Dict({**entries, key: mask_space}), masked

    def pad(self, agent: int, observation: Any) -> Any:
        """Agent ``agent``'s (index) observation padded into the batch's space."""
        pad = self._pads[agent]
        return observation if pad is None else pad(observation)

    def action(self, agent: int, action: Any) -> Any:
        """Agent ``agent``'s (index) action from the batch's ``action``.

        Raises:
            ValueError: a padded Discrete value the agent does not have (its policy
                ignored the action mask).
        """
        limit = self._limits[agent]
        if limit is not None and int(action) > limit:
            raise ValueError(
                f"action {int(action)} of agent '{self.agents[agent]}' of '{self.env_name}' "
                f"is outside its {self.action_spaces[agent]}: the batch's "
                f"{self.action_space} pads it, masked out by observation[{self._mask_key!r}]"
            )
        return action

    def mismatch(self, members: Sequence[int]) -> str | None:
        """``different <what> spaces (a: <space>; b: <space>)`` for the first two agents
        (indices) of ``members`` whose spaces differ, or None if theirs are all equal."""
        for what, spaces in (
            ("observation", self.observation_spaces),
            ("action", self.action_spaces),
        ):
            two = self._two(spaces, members)
            if two:
                return f"different {what} spaces ({two})"
        return None
