"""Environments that misbehave on purpose, for the data-guard tests (importable as
``alf_test_bad_envs:BadCartPole-v0`` with ``tests/`` on the path).

``BadCartPole-v0`` is CartPole-v1 until the step ``ALF_TEST_BAD_AT`` (environment
variable; unset: never) of every episode of the environment first reset with the seed
``ALF_TEST_BAD_SEED`` (default 1: environment 1 of a batch seeded from 0; ``all``: of
every environment), where it
returns, by
``ALF_TEST_BAD_KIND``: ``nan_obs`` (default), ``inf_reward`` or ``shape`` (an observation
of shape (5,)). The misbehaviour is read from the environment so that a run can be
resumed with the same config on a broken environment.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np


class BadCartPole(gym.Wrapper):
    """CartPole-v1 that returns bad data at a chosen step (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(gym.make("CartPole-v1", **kwargs).unwrapped)
        at = os.environ.get("ALF_TEST_BAD_AT")
        self.bad_at = int(at) if at else None
        bad_seed = os.environ.get("ALF_TEST_BAD_SEED", "1")
        self.bad_seed = None if bad_seed == "all" else int(bad_seed)
        self.bad = self.bad_seed is None
        self.kind = os.environ.get("ALF_TEST_BAD_KIND", "nan_obs")
        self.t = 0

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        if kwargs.get("seed") is not None and self.bad_seed is not None:
            self.bad = kwargs["seed"] == self.bad_seed
        self.t = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        if self.bad and self.t == self.bad_at:
            if self.kind == "nan_obs":
                obs = obs.copy()
                obs[2] = np.nan
            elif self.kind == "inf_reward":
                reward = float("inf")
            elif self.kind == "shape":
                obs = np.zeros(5, dtype=obs.dtype)
        return obs, reward, terminated, truncated or self.t >= 500, info


gym.register(id="BadCartPole-v0", entry_point=BadCartPole)
