"""A goal-looking environment without ``compute_reward``, for the hindsight refusals
(importable as ``alf_test_goal_envs:GoalWithoutReward-v0`` with ``tests/`` on the path)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class GoalWithoutReward(gym.Env):
    """Observes ``observation``, ``achieved_goal`` and ``desired_goal`` but cannot
    recompute its reward (no ``compute_reward``); episodes of 5 steps."""

    def __init__(self, render_mode: str | None = None) -> None:
        box = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": box, "achieved_goal": box, "desired_goal": box}
        )
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def _observe(self) -> dict[str, np.ndarray]:
        return {k: np.zeros(2, dtype=np.float32) for k in self.observation_space.spaces}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._t += 1
        return self._observe(), -1.0, False, self._t >= 5, {}


if "GoalWithoutReward-v0" not in gym.registry:
    gym.register(id="GoalWithoutReward-v0", entry_point=GoalWithoutReward)
