"""Episode returns and lengths, computed from the stream of time steps."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from alf.data_structures import StepType, TimeStep

__all__ = ["CompletedEpisodes", "EpisodeTracker"]


class CompletedEpisodes(NamedTuple):
    """Episodes that ended: their undiscounted returns, lengths and environment ids.

    Attributes:
        returns: each episode's return.
        lengths: each episode's length.
        env_ids: the batch row that played it (a collector's global row of its training
            batch; in a multi-agent game, ``env_id mod A`` is its agent).
    """

    returns: list[float]
    lengths: list[int]
    env_ids: list[int]


class EpisodeTracker:
    """Accumulates each environment's undiscounted return and length.

    An episode's length counts its actions (a FIRST..LAST episode of ``k + 1`` time steps
    has length ``k``), and its return sums the rewards of the steps after FIRST. A row
    may stay LAST for several steps (an idle row: an agent that left a multi-agent game
    before the game ended, see :mod:`alf.environments.pettingzoo_environment`); its
    episode is counted once, at its first LAST step.

    Args:
        batch_size: number of environments.
    """

    def __init__(self, *, batch_size: int) -> None:
        self._returns = np.zeros(batch_size, dtype=np.float64)
        self._lengths = np.zeros(batch_size, dtype=np.int64)
        self.completed_returns: list[float] = []
        self.completed_lengths: list[int] = []
        self.completed_env_ids: list[int] = []
        self._ended = np.zeros(batch_size, dtype=bool)  # rows at LAST (idle until FIRST)
        self._any_ended = False

    def update(self, time_step: TimeStep) -> None:
        """Adds one batched time step."""
        step_type = time_step.step_type.numpy()
        first = step_type == StepType.FIRST
        last = step_type == StepType.LAST
        any_first = bool(first.any())
        if not (any_first or self._any_ended):  # the usual step: no masks needed
            self._returns += time_step.reward.numpy()
            self._lengths += 1
        else:
            if any_first:
                self._returns[first] = 0.0
                self._lengths[first] = 0
                self._ended[first] = False
            counted = ~first & ~self._ended  # idle rows (LAST after LAST) do not count
            self._returns[counted] += time_step.reward.numpy()[counted]
            self._lengths[counted] += 1
        if last.any():
            ids = np.flatnonzero(last & ~self._ended)
            self.completed_returns += self._returns[ids].tolist()
            self.completed_lengths += self._lengths[ids].tolist()
            self.completed_env_ids += ids.tolist()
            self._ended |= last
        if any_first or self._any_ended or last.any():
            self._any_ended = bool(self._ended.any())

    @property
    def current_returns(self) -> np.ndarray:
        """Each environment's return so far in its current episode (read-only view)."""
        view = self._returns.view()
        view.flags.writeable = False
        return view

    @property
    def current_lengths(self) -> np.ndarray:
        """Each environment's steps so far in its current episode (read-only view)."""
        view = self._lengths.view()
        view.flags.writeable = False
        return view

    def pop_completed(self) -> CompletedEpisodes:
        """Returns, lengths and env ids of the episodes completed since the last call."""
        episodes = CompletedEpisodes(
            self.completed_returns, self.completed_lengths, self.completed_env_ids
        )
        self.completed_returns, self.completed_lengths, self.completed_env_ids = [], [], []
        return episodes
