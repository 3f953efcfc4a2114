"""Episode returns, lengths and successes, computed from the stream of time steps."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from alf.data_structures import StepType, TimeStep
from alf.environments.gymnasium_environment import SUCCESS_KEY

__all__ = ["SUCCESS_KEY", "SUCCESS_WINDOW", "CompletedEpisodes", "EpisodeTracker", "success_rate"]

"""The ``TimeStep.env_info`` key of a step's success (``info["is_success"]`` of goal
environments, passed on by the ``sync`` and ``subprocess`` backends)."""

SUCCESS_WINDOW = 100
"""Finished episodes the training success rate is measured over (the last ones that
reported a success; :class:`~alf.trainers.train_report.TrainingReport`)."""


def success_rate(successes: Iterable[float]) -> float | None:
    """The mean of the known (not NaN) successes, or None if none is known."""
    known = [s for s in successes if s == s]
    return sum(known) / len(known) if known else None


def _step_success(time_step: TimeStep) -> Any:
    """The ``[B]`` successes of a time step's ``env_info`` (None without any)."""
    info = time_step.env_info
    if isinstance(info, dict) and SUCCESS_KEY in info:
        return np.asarray(info[SUCCESS_KEY], dtype=np.float64)
    return None


class CompletedEpisodes(NamedTuple):
    """Episodes that ended: their undiscounted returns, lengths, environment ids and
    successes.

    Attributes:
        returns: each episode's return.
        lengths: each episode's length.
        env_ids: the batch row that played it (a collector's global row of its training
            batch; in a multi-agent game, ``env_id mod A`` is its agent).
        successes: ``info["is_success"]`` at its last step (goal environments), NaN
            where its environment reported none.
    """

    returns: list[float]
    lengths: list[int]
    env_ids: list[int]
    successes: list[float]


class EpisodeTracker:
    """Accumulates each environment's undiscounted return and length.

    An episode's length counts its actions (a FIRST..LAST episode of ``k + 1`` time steps
    has length ``k``), and its return sums the rewards of the steps after FIRST. A row
    may stay LAST for several steps (an idle row: an agent that left a multi-agent game
    before the game ended, see :mod:`alf.environments.pettingzoo_environment`); its
    episode is counted once, at its first LAST step. Its success is the
    ``env_info["is_success"]`` of that step (goal environments; NaN when the time step
    has none): :attr:`completed_successes` beside the other lists.

    Args:
        batch_size: number of environments.
    """

    def __init__(self, *, batch_size: int) -> None:
        self._returns = np.zeros(batch_size, dtype=np.float64)
        self._lengths = np.zeros(batch_size, dtype=np.int64)
        self.completed_returns: list[float] = []
        self.completed_lengths: list[int] = []
        self.completed_env_ids: list[int] = []
        self.completed_successes: list[float] = []
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
            self._record_successes(time_step, ids)
            self._ended |= last
        if any_first or self._any_ended or last.any():
            self._any_ended = bool(self._ended.any())

    def _record_successes(self, time_step: TimeStep, ids: np.ndarray) -> None:
        success = _step_success(time_step)
        if success is None:
            self.completed_successes += [float("nan")] * len(ids)
            return
        self.completed_successes += success[ids].tolist()

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
        """Returns, lengths, env ids and successes of the episodes completed since the
        last call."""
        episodes = CompletedEpisodes(
            self.completed_returns,
            self.completed_lengths,
            self.completed_env_ids,
            self.completed_successes,
        )
        self.completed_returns, self.completed_lengths, self.completed_env_ids = [], [], []
        self.completed_successes = []
        return episodes
