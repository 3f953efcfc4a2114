"""Small PettingZoo games for the multi-agent tests (importable with ``tests/`` on the
path, e.g. ``pettingzoo:alf_test_multiagent``).

The module's ``parallel_env()`` is a race of 3 agents on a line: each moves right (action
1) or stays (0) and gets reward 1 for each move; ``runner_<i>`` terminates when it
reaches position ``i + 2`` (so ``runner_0`` leaves first, after 2 moves), and the game is
truncated for everyone left after ``max_cycles`` steps. Its observation is
``[position, time]``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

__all__ = ["RaceEnv", "parallel_env"]


class RaceEnv(ParallelEnv):
    """The race of the module docstring."""

    metadata = {"name": "alf_test_race", "render_modes": []}

    def __init__(self, max_cycles: int = 10, render_mode: str | None = None) -> None:
        self.possible_agents = [f"runner_{i}" for i in range(3)]
        self.agents: list[str] = []
        self.max_cycles = max_cycles
        self.render_mode = render_mode
        self._pos: dict[str, int] = {}
        self._t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(-100.0, 100.0, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self._pos[agent], self._t], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = list(self.possible_agents)
        self._pos = {a: 0 for a in self.agents}
        self._t = 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)
        self._t += 1
        rewards, terminated, truncated = {}, {}, {}
        for agent in self.agents:
            move = int(actions[agent])
            self._pos[agent] += move
            rewards[agent] = float(move)
            terminated[agent] = self._pos[agent] >= int(agent[-1]) + 2
            truncated[agent] = self._t >= self.max_cycles and not terminated[agent]
        observations = {a: self._obs(a) for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return observations, rewards, terminated, truncated, infos


def parallel_env(**kwargs: Any) -> RaceEnv:
    """The race (see the module docstring)."""
    return RaceEnv(**kwargs)
