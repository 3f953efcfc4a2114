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

__all__ = ["ChannelFirst", "ObservationSubset", "RewardSign"]

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
