"""A PettingZoo module that ALF must refuse under one shared policy (the default), for
the bad-input tests: its agents have different observation spaces
(``pettingzoo:alf_test_multiagent_bad``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from alf_test_multiagent import RaceEnv

__all__ = ["MixedSpacesEnv", "parallel_env"]


class MixedSpacesEnv(RaceEnv):
    """The race, with ``runner_2`` seeing a 3-number observation."""

    def observation_space(self, agent: str) -> gym.Space:
        size = 3 if agent == "runner_2" else 2
        return gym.spaces.Box(-100.0, 100.0, (size,), np.float32)


def parallel_env(**kwargs: Any) -> MixedSpacesEnv:
    """The race with mixed observation spaces."""
    return MixedSpacesEnv(**kwargs)
