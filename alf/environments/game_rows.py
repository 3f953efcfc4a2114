"""The batch rows of a PettingZoo environment: what :mod:`pettingzoo_environment` and
:mod:`pettingzoo_turns` share (specs, action checks, observation buffers, data checks, and
turning a step's arrays into a :class:`~alf.data_structures.TimeStep`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from alf import nest
from alf.data_structures import StepType, TimeStep
from alf.environments.action_check import ActionChecker, first_time_step, numpy_dtype
from alf.environments.data_check import DataChecker
from alf.environments.pettingzoo_games import GameInfo, row_setter
from alf.tensor_specs import from_gym_space

__all__ = ["GameRows"]


class GameRows:
    """``num_rows`` rows of agents' observations of one game's spaces.

    Args:
        info: the game.
        num_rows: rows of the batch.
        first_index: the run-wide index of the first row (named in errors).
    """

    def __init__(self, *, info: GameInfo, num_rows: int, first_index: int) -> None:
        self.observation_spec = from_gym_space(info.observation_space)
        self.action_spec = from_gym_space(info.action_space)
        self.actions = ActionChecker(self.action_spec)
        """Turns a batch of actions into numpy (see :class:`ActionChecker`)."""
        self._set = row_setter(self.observation_spec)
        self._buffers = [
            np.zeros((num_rows, *spec.shape), dtype=numpy_dtype(spec))
            for spec in nest.flatten(self.observation_spec)
        ]
        self._env_id = torch.arange(num_rows, dtype=torch.int64)
        self._zero_action = nest.map_structure(lambda s: s.zeros((num_rows,)), self.action_spec)
        self._check = DataChecker(
            env_name=info.env_name,
            observation_spec=self.observation_spec,
            batch_size=num_rows,
            first_index=first_index,
        )

    def set(self, row: int, observation: Any) -> None:
        """Writes one agent's observation into row ``row``."""
        self._set(self._buffers, row, observation)

    def _observation(self) -> Any:
        tensors = [torch.from_numpy(buffer.copy()) for buffer in self._buffers]
        return nest.pack_sequence_as(self.observation_spec, tensors)

    def first(self) -> TimeStep:
        """The FIRST steps of every row (after a reset), checked."""
        self._check.restart()
        observation = self._observation()
        self._check.check(observation, None)
        self._check.check_action_mask(observation)
        return first_time_step(observation, self._zero_action, self._env_id)

    def time_step(
        self,
        *,
        step_type: np.ndarray,
        reward: np.ndarray,
        discount: np.ndarray,
        applied: Any,
        first: np.ndarray,
    ) -> TimeStep:
        """The checked time step of the rows as written, ``applied`` being the actions
        taken (zeroed where a row is ``first``)."""
        last = step_type == StepType.LAST
        self._check.advance(first)
        observation = self._observation()
        reward_tensor = torch.from_numpy(reward)
        self._check.check(observation, reward_tensor)
        self._check.check_action_mask(observation, ignore=last)
        prev_action = nest.zero_rows(applied, torch.from_numpy(~first)) if first.any() else applied
        return TimeStep(
            step_type=torch.from_numpy(step_type),
            reward=reward_tensor,
            discount=torch.from_numpy(discount),
            observation=observation,
            prev_action=prev_action,
            env_id=self._env_id,
        )
