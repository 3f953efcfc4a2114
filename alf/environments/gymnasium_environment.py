"""A batch of Gymnasium environments stepped in-process through a Gymnasium vector env."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from alf import nest
from alf.data_structures import StepType, TimeStep
from alf.environments.action_check import ActionChecker, first_time_step
from alf.environments.alf_environment import AlfEnvironment
from alf.tensor_specs import from_gym_space

__all__ = ["GymnasiumEnvironment"]


def _to_tensor(array: Any, spec: Any) -> torch.Tensor:
    # A copy: some vector envs reuse their output buffers between steps.
    tensor = torch.from_numpy(np.array(array))
    return tensor if tensor.dtype == spec.dtype else tensor.to(spec.dtype)


class GymnasiumEnvironment(AlfEnvironment):
    """Wraps a Gymnasium ``VectorEnv`` using the NEXT_STEP autoreset mode.

    Terminated episodes end with discount 0, truncated ones with discount 1. Continuous
    actions outside the action space are clipped to it and counted in
    :attr:`num_clipped_actions` (``prev_action`` is the clipped action the environment
    applied); discrete actions outside it raise ``ValueError``.

    Args:
        vector_env: the Gymnasium vector environment (NEXT_STEP autoreset).
        seed: seed of the first environment; environment ``i`` gets ``seed + i``.
    """

    def __init__(self, *, vector_env: gym.vector.VectorEnv, seed: int | None = None) -> None:
        mode = vector_env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        if mode != gym.vector.AutoresetMode.NEXT_STEP:
            raise ValueError(f"ALF needs the NEXT_STEP autoreset mode, got {mode}")
        self._env = vector_env
        self._seed = seed
        self._num_envs = vector_env.num_envs
        self._observation_spec = from_gym_space(vector_env.single_observation_space)
        self._action_spec = from_gym_space(vector_env.single_action_space)
        self._actions = ActionChecker(self._action_spec)
        self._env_id = torch.arange(self._num_envs, dtype=torch.int64)
        self._first_next = np.ones(self._num_envs, dtype=bool)
        self._zero_action = nest.map_structure(
            lambda s: s.zeros((self._num_envs,)), self._action_spec
        )
        if seed is not None:
            vector_env.action_space.seed(seed)

    @property
    def num_clipped_actions(self) -> int:
        """Out-of-bounds continuous actions clipped so far."""
        return self._actions.num_clipped_actions

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def gym_env(self) -> gym.vector.VectorEnv:
        """The wrapped Gymnasium vector environment."""
        return self._env

    def observation_spec(self) -> nest.Nest:
        return self._observation_spec

    def action_spec(self) -> nest.Nest:
        return self._action_spec

    def _observation(self, obs: Any) -> Any:
        return nest.map_structure(_to_tensor, obs, self._observation_spec)

    def reset(self) -> TimeStep:
        obs, _ = self._env.reset(seed=self._seed)
        self._seed = None  # later resets continue the seeded random streams
        self._first_next[:] = False
        return first_time_step(self._observation(obs), self._zero_action, self._env_id)

    def step(self, action: Any) -> TimeStep:
        np_action, applied = self._actions(action, self._first_next)
        obs, reward, terminated, truncated, _ = self._env.step(np_action)
        first = self._first_next.copy()
        last = np.logical_or(terminated, truncated) & ~first
        step_type = np.where(first, StepType.FIRST, np.where(last, StepType.LAST, StepType.MID))
        discount = np.where(terminated & ~first, 0.0, 1.0)
        reward = np.where(first, 0.0, reward)
        self._first_next = last
        prev_action = applied
        if first.any():
            prev_action = nest.zero_rows(applied, torch.from_numpy(~first))
        return TimeStep(
            step_type=torch.from_numpy(step_type.astype(np.int32)),
            reward=torch.from_numpy(reward.astype(np.float32)),
            discount=torch.from_numpy(discount.astype(np.float32)),
            observation=self._observation(obs),
            prev_action=prev_action,
            env_id=self._env_id,
        )

    def render(self) -> Any:
        return self._env.render()

    def close(self) -> None:
        self._env.close()
