"""Uniform sampling of sequence starts from a :class:`RingStorage`.

A sequence of ``batch_length`` steps of environment ``e`` may start at any position ``p``
in ``[max(0, pos[e] - max_length), pos[e] - batch_length]``: it lies within the held
steps and never crosses the write head. These are the *valid* starts.
"""

from __future__ import annotations

import torch

from alf.replay_buffers.ring_storage import RingStorage
from alf.replay_buffers.spec_description import ReplayBufferError

__all__ = [
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
