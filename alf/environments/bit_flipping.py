"""The bit-flipping task of the HER paper (Andrychowicz et al. 2017), a tiny goal
environment: ``alf/BitFlipping-v0``.

The state is ``n_bits`` bits, the goal another ``n_bits`` bits; an action flips one bit.
The reward is 0 when the state equals the goal and -1 otherwise, so a random policy
almost never sees a reward other than -1 for ``n_bits`` beyond 10 or so, and DQN alone
fails; with hindsight relabelling it solves the task. An episode ends when the state
reaches the goal (terminated, as in the HER paper; ``end_on_success=False`` keeps going)
or after ``n_bits`` steps (truncated), and ``info["is_success"]`` says whether the state
equals the goal.

Registered with Gymnasium on import of :mod:`alf.environments`::

    create_environment.env_name = "alf/BitFlipping-v0"
    create_environment.env_kwargs = {"n_bits": 12}
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from alf.environments.goal_env import GoalEnvironmentError

__all__ = ["BitFlippingEnv", "register"]

ENV_ID = "alf/BitFlipping-v0"
"""The registered id."""


class BitFlippingEnv(gym.Env):
    """Flip bits until the state equals the goal (a goal-conditioned ``Dict`` observation).

    Args:
        n_bits: the number of bits (and actions), >= 1.
        max_steps: steps per episode (default ``n_bits``: enough to reach any goal).
        end_on_success: end the episode (terminated) when the state reaches the goal.
        render_mode: not supported beyond None (the environment draws nothing).

    Raises:
        ValueError: ``n_bits`` or ``max_steps`` below 1.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        n_bits: int = 10,
        max_steps: int | None = None,
        end_on_success: bool = True,
        render_mode: str | None = None,
    ) -> None:
        if n_bits < 1:
            raise GoalEnvironmentError(f"BitFlippingEnv: n_bits must be >= 1, got {n_bits}")
        max_steps = n_bits if max_steps is None else max_steps
        if max_steps < 1:
            raise GoalEnvironmentError(f"BitFlippingEnv: max_steps must be >= 1, got {max_steps}")
        self.n_bits = int(n_bits)
        self.max_steps = int(max_steps)
        self.end_on_success = bool(end_on_success)
        self.render_mode = render_mode
        bits = gym.spaces.Box(0.0, 1.0, (self.n_bits,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space = gym.spaces.Discrete(self.n_bits)
        self._state = np.zeros(self.n_bits, dtype=np.float32)
        self._goal = np.zeros(self.n_bits, dtype=np.float32)
        self._t = 0

    def compute_reward(
        self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None
    ) -> np.ndarray:
        """0 where ``achieved_goal`` equals ``desired_goal`` (over the last axis), else -1;
        batched over any leading axes."""
        differ = np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1)
        return -differ.astype(np.float32)

    def _observe(self) -> dict[str, np.ndarray]:
        return {
            "observation": self._state.copy(),
            "achieved_goal": self._state.copy(),
            "desired_goal": self._goal.copy(),
        }

    def _success(self) -> float:
        return float(np.array_equal(self._state, self._goal))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        while np.array_equal(self._state, self._goal):
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._t = 0
        return self._observe(), {"is_success": self._success()}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        bit = int(np.asarray(action).reshape(-1)[0])
        if not 0 <= bit < self.n_bits:
            raise ValueError(f"BitFlippingEnv: action {bit} is outside [0, {self.n_bits})")
        self._state[bit] = 1.0 - self._state[bit]
        self._t += 1
        observation = self._observe()
        reward = float(self.compute_reward(observation["achieved_goal"], self._goal))
        success = self._success()
        terminated = self.end_on_success and success == 1.0
        return observation, reward, terminated, self._t >= self.max_steps, {"is_success": success}


def register() -> None:
    """Registers ``alf/BitFlipping-v0`` with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=f"{__name__}:BitFlippingEnv")


register()
