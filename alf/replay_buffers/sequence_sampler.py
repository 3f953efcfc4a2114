"""Uniform sampling of sequence starts from a :class:`RingStorage`: :class:`UniformSampler`.

A sequence of ``batch_length`` steps of environment ``e`` may start at any position ``p``
in ``[max(0, pos[e] - max_length), pos[e] - batch_length]``: it lies within the held
steps and never crosses the write head. These are the *valid* starts.
"""

from __future__ import annotations

from typing import Any

import torch

from alf.replay_buffers.ring_storage import RingStorage
from alf.replay_buffers.spec_description import ReplayBufferError

__all__ = [
    "UniformSampler",
    "check_sequence_args",
    "not_enough_steps_error",
    "sample_uniform_starts",
    "valid_start_counts",
]


def check_sequence_args(*, batch_size: int, batch_length: int, max_length: int) -> None:
    """Checks the sizes of a batch of sequences.

    Args:
        batch_size: number of sequences, >= 1.
        batch_length: steps per sequence, in ``[1, max_length]``.
        max_length: capacity in steps per environment.

    Raises:
        ReplayBufferError: naming the first size out of range.
    """
    if batch_size < 1:
        raise ReplayBufferError(f"batch_size must be >= 1, got {batch_size}")
    if not 1 <= batch_length <= max_length:
        raise ReplayBufferError(
            f"batch_length must be in [1, max_length={max_length}], got {batch_length}"
        )


def valid_start_counts(storage: RingStorage, batch_length: int) -> torch.Tensor:
    """Number of valid starts of ``batch_length``-step sequences per environment.

    Args:
        storage: the steps to sample from.
        batch_length: steps per sequence.

    Returns:
        A ``[num_envs]`` int64 tensor, ``max(0, held - batch_length + 1)``.
    """
    held = storage.num_steps()
    return (held - (batch_length - 1)).clamp(min=0)


def not_enough_steps_error(storage: RingStorage, batch_length: int) -> ReplayBufferError:
    """The error for a storage where no environment holds ``batch_length`` steps.

    Args:
        storage: the storage sampled.
        batch_length: steps per sequence asked for.

    Returns:
        The error to raise, naming the most steps any environment holds.
    """
    held = int(storage.num_steps().max())
    return ReplayBufferError(
        f"ReplayBuffer holds at most {held} steps per environment; cannot sample "
        f"sequences of {batch_length} steps"
    )


def sample_uniform_starts(
    storage: RingStorage,
    *,
    batch_size: int,
    batch_length: int,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draws ``batch_size`` valid ``(env, start)`` pairs uniformly, with replacement.

    One ``torch.randint`` draw of ``batch_size`` numbers from ``generator`` indexes the
    valid pairs, environment by environment.

    Args:
        storage: the steps to sample from.
        batch_size: number of sequences.
        batch_length: steps per sequence.
        generator: random generator (torch's default one if None).

    Returns:
        ``[batch_size]`` env ids and absolute start positions.

    Raises:
        ReplayBufferError: when no environment holds ``batch_length`` steps.
    """
    pos = storage.positions
    held = storage.num_steps()
    counts = valid_start_counts(storage, batch_length)
    cum = counts.cumsum(0)
    total = int(cum[-1])
    if total == 0:
        raise not_enough_steps_error(storage, batch_length)
    r = torch.randint(total, (batch_size,), generator=generator)
    env = torch.searchsorted(cum, r, right=True)
    # start = oldest held step of env + (r - number of pairs of the envs before)
    start = r + (pos - held - cum + counts)[env]
    return env, start


class UniformSampler:
    """Samples every valid sequence start of a :class:`RingStorage` with equal
    probability (a :class:`~alf.replay_buffers.sampler.Sampler`).

    It keeps no state of its own: its checkpoint state says only that there are no
    priorities, and loading one (even a prioritized one) changes nothing.

    Args:
        storage: the storage whose steps are sampled.
    """

    prioritized = False
    """Uniform sampling: no priorities."""

    def __init__(self, *, storage: RingStorage) -> None:
        self._storage = storage

    def record_new(self, flat: torch.Tensor) -> None:
        """Nothing to record for new steps.

        Args:
            flat: ``[n]`` flat slots just written (unused).
        """

    def sample(
        self,
        *,
        batch_size: int,
        batch_length: int,
        beta: float,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draws ``batch_size`` valid starts uniformly (:func:`sample_uniform_starts`).

        Args:
            batch_size: number of sequences.
            batch_length: steps per sequence.
            beta: exponent of the importance weights (unused: every weight is 1).
            generator: random generator (torch's default one if None).

        Returns:
            ``[batch_size]`` env ids, absolute start positions and importance weights
            (all ones, float32).

        Raises:
            ReplayBufferError: when no environment holds ``batch_length`` steps.
        """
        env, start = sample_uniform_starts(
            self._storage,
            batch_size=batch_size,
            batch_length=batch_length,
            generator=generator,
        )
        return env, start, torch.ones(batch_size)

    def update_priority(
        self, env_ids: torch.Tensor, positions: torch.Tensor, priorities: torch.Tensor
    ) -> int:
        """Refuses: there are no priorities to update.

        Args:
            env_ids: ``[n]`` environment of each entry.
            positions: ``[n]`` absolute step numbers.
            priorities: ``[n]`` new priorities.

        Returns:
            Never returns.

        Raises:
            ReplayBufferError: always.
        """
        raise ReplayBufferError(
            "update_priority needs a prioritized ReplayBuffer (prioritized=True); "
            "this one samples uniformly"
        )

    def clear(self) -> None:
        """Nothing to forget."""

    def checkpoint_state(self) -> dict[str, Any]:
        """The sampler's part of a :class:`ReplayBuffer` checkpoint state.

        Returns:
            ``{"max_priority": 1.0, "priorities": None}``: no priorities.
        """
        return {"max_priority": 1.0, "priorities": None}

    def load_checkpoint_state(self, state: dict[str, Any], *, positions: torch.Tensor) -> None:
        """Loads nothing: saved priorities, if any, are dropped.

        Args:
            state: a :class:`ReplayBuffer` checkpoint state.
            positions: its (checked) write counters.
        """
