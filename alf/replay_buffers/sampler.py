"""What a :class:`~alf.replay_buffers.replay_buffer.ReplayBuffer` asks of its sampler.

A replay buffer is a :class:`~alf.replay_buffers.ring_storage.RingStorage` (the steps)
and a :class:`Sampler` (which sequence starts to draw, and whatever state that takes):
:class:`~alf.replay_buffers.sequence_sampler.UniformSampler` or
:class:`~alf.replay_buffers.prioritized_sampler.PrioritizedSampler`. The buffer treats
every sampler alike; :func:`make_sampler` is the one place that picks one.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from alf.replay_buffers.prioritized_sampler import PrioritizedSampler
from alf.replay_buffers.ring_storage import RingStorage
from alf.replay_buffers.sequence_sampler import UniformSampler

__all__ = ["Sampler", "make_sampler"]


@runtime_checkable
class Sampler(Protocol):
    """Draws sequence starts from a storage and keeps what that takes (e.g. priorities).

    A sampler is built on one :class:`RingStorage`, reads its write counters, and is told
    of every write through :meth:`record_new`. Its checkpoint state is its part of the
    buffer's: a dict with ``max_priority`` and ``priorities`` (None without priorities).
    """

    @property
    def prioritized(self) -> bool:
        """Whether sampling is by priority (and :meth:`update_priority` works)."""
        ...

    def record_new(self, flat: torch.Tensor) -> None:
        """Takes note of the newly written flat slots ``flat``.

        Args:
            flat: ``[n]`` distinct flat slots, as returned by :meth:`RingStorage.append`.
        """
        ...

    def sample(
        self,
        *,
        batch_size: int,
        batch_length: int,
        beta: float,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draws ``batch_size`` valid sequence starts, with replacement.

        Args:
            batch_size: number of sequences.
            batch_length: steps per sequence.
            beta: exponent of the importance weights.
            generator: random generator (torch's default one if None).

        Returns:
            ``[batch_size]`` env ids, absolute start positions and float32 importance
            weights.
        """
        ...

    def update_priority(
        self, env_ids: torch.Tensor, positions: torch.Tensor, priorities: torch.Tensor
    ) -> int:
        """Sets the priorities of the steps ``(env_ids, positions)`` still held.

        Args:
            env_ids: ``[n]`` environment of each entry.
            positions: ``[n]`` absolute step numbers.
            priorities: ``[n]`` new priorities (before ``alpha``).

        Returns:
            The number of entries applied.
        """
        ...

    def clear(self) -> None:
        """Forgets everything recorded (the storage is being cleared)."""
        ...

    def checkpoint_state(self) -> dict[str, Any]:
        """The sampler's part of a buffer checkpoint state.

        Returns:
            A dict with ``max_priority`` and ``priorities``.
        """
        ...

    def load_checkpoint_state(self, state: dict[str, Any], *, positions: torch.Tensor) -> None:
        """Restores from a buffer checkpoint state, checked before anything changes.

        Args:
            state: a buffer checkpoint state.
            positions: its (checked) write counters.
        """
        ...


def make_sampler(*, storage: RingStorage, prioritized: bool, priority_alpha: float) -> Sampler:
    """The sampler that ``ReplayBuffer(prioritized=..., priority_alpha=...)`` describes.

    Args:
        storage: the storage to sample from.
        prioritized: sample by priority instead of uniformly.
        priority_alpha: exponent applied to priorities (prioritized only).

    Returns:
        A :class:`PrioritizedSampler` or a :class:`UniformSampler` on ``storage``.
    """
    if prioritized:
        return PrioritizedSampler(storage=storage, priority_alpha=priority_alpha)
    return UniformSampler(storage=storage)
