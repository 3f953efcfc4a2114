"""Small Gymnasium wrappers that configs apply through ``suite_gym.load.wrappers``.

Each wrapper takes the environment as its only positional argument and its options as
keyword-only arguments, so a config names it as a reference and binds its options::

    suite_gym.load.wrappers = [@ObservationSubset]
    ObservationSubset.indices = (0, 2)

Gymnasium's own ``FlattenObservation`` is registered here too (as
``@FlattenObservation``), e.g. to turn the ``Dict`` observations of DeepMind Control into
one vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsFloat

import gin
import gymnasium as gym
import numpy as np

from alf.config import configurable

__all__ = ["ChannelFirst", "DropObservationKeys", "ObservationSubset", "RewardSign"]

gin.external_configurable(gym.wrappers.FlattenObservation, module="alf.environments.wrappers")


@configurable
class ObservationSubset(gym.ObservationWrapper):
    """Keeps the given entries of a 1-D ``Box`` observation and drops the others.

    For example ``indices=(0, 2)`` on CartPole keeps the cart position and the pole angle
    and hides both velocities (a partially observable CartPole).

    Args:
        env: the environment to wrap; its observation space must be a 1-D ``Box``.
        indices: positions to keep, in the order given (no repeats).

    Raises:
        TypeError: the observation space is not a 1-D ``Box``.
        ValueError: ``indices`` is empty, repeats an index or is out of range.
    """

    def __init__(self, env: gym.Env, *, indices: Sequence[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise TypeError(f"ObservationSubset needs a 1-D Box observation space, got {space}")
        idx = np.asarray(list(indices), dtype=np.int64)
        size = space.shape[0]
        if idx.size == 0 or len(set(idx.tolist())) != idx.size:
            raise ValueError(f"ObservationSubset.indices must be distinct and non-empty: {indices}")
        if idx.min() < -size or idx.max() >= size:
            raise ValueError(f"ObservationSubset.indices {indices} out of range for size {size}")
        self._indices = idx
        self.observation_space = gym.spaces.Box(
            low=space.low[idx], high=space.high[idx], dtype=space.dtype
        )

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation)[self._indices]


@configurable
class DropObservationKeys(gym.ObservationWrapper):
    """Leaves entries out of a ``Dict`` observation, e.g. a space ALF cannot represent
    (MiniGrid's text ``mission``) or an entry the agent should not see::

        suite_gym.load.wrappers = [@DropObservationKeys]
        DropObservationKeys.keys = ['mission']

    The observation stays a ``Dict`` (of the entries left). A key inside a nested
    ``Dict`` is named by its path, ``'outer/inner'``.

    Args:
        env: the environment to wrap; its observation space must be a ``Dict``.
        keys: the entries to leave out.

    Raises:
        TypeError: the observation space is not a ``Dict``.
        ValueError: a key is not in the observation space, or every entry would go.
    """

    def __init__(self, env: gym.Env, *, keys: Sequence[str]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise TypeError(f"DropObservationKeys needs a Dict observation space, got {space}")
        self._paths = [tuple(str(key).split("/")) for key in keys]
        self.observation_space = self._drop(space, self._paths, ())
        if not self.observation_space.spaces:
            raise ValueError(f"DropObservationKeys.keys {list(keys)} would drop every entry")

    @classmethod
    def _drop(
        cls, space: gym.spaces.Dict, paths: Sequence[tuple[str, ...]], at: tuple[str, ...]
    ) -> gym.spaces.Dict:
        kept = {}
        for path in paths:
            if path[0] not in space.spaces:
                raise ValueError(
                    f"DropObservationKeys: no observation entry '{'/'.join(at + path)}' "
                    f"(the entries are {sorted(space.spaces)})"
                )
        for key, sub in space.spaces.items():
            if (key,) in paths:
                continue
            inner = [p[1:] for p in paths if p[0] == key and len(p) > 1]
            kept[key] = cls._drop(sub, inner, (*at, key)) if inner else sub
        return gym.spaces.Dict(kept)

    def observation(self, observation: Any) -> dict[str, Any]:
        return _select(observation, self.observation_space)


def _select(observation: Any, space: gym.spaces.Dict) -> dict[str, Any]:
    """The entries of a ``Dict`` observation that ``space`` keeps, recursively."""
    return {
        key: _select(observation[key], sub)
        if isinstance(sub, gym.spaces.Dict)
        else observation[key]
        for key, sub in space.spaces.items()
    }


@configurable
class RewardSign(gym.RewardWrapper):
    """Replaces every reward by its sign, -1, 0 or 1 (Atari's reward clipping).

    Args:
        env: the environment to wrap.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(reward))


@configurable
class ChannelFirst(gym.ObservationWrapper):
    """Moves the channel axis of an image observation to the front.

    An ``[H, W]`` observation becomes ``[1, H, W]`` (a channel axis is added, so frame
    stackers can concatenate along axis 0) and ``[H, W, C]`` becomes ``[C, H, W]``.

    Args:
        env: the environment to wrap; its observation space must be a 2-D or 3-D ``Box``.

    Raises:
        TypeError: the observation space is not a 2-D or 3-D ``Box``.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) not in (2, 3):
            raise TypeError(f"ChannelFirst needs a 2-D or 3-D Box observation, got {space}")
        self._add_axis = len(space.shape) == 2
        self.observation_space = gym.spaces.Box(
            low=self._move(space.low), high=self._move(space.high), dtype=space.dtype
        )

    def _move(self, array: np.ndarray) -> np.ndarray:
        if self._add_axis:
            return array[None]
        return np.ascontiguousarray(np.moveaxis(array, -1, 0))

    def observation(self, observation: Any) -> np.ndarray:
        return self._move(np.asarray(observation))
