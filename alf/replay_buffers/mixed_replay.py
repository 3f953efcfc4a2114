"""The replay an off-policy learner draws from: its own buffer, mixed with offline data.

:class:`MixedReplay` holds the online :class:`ReplayBuffer` (filled with the steps the
run collects), the offline buffers (loaded from earlier runs, see
:mod:`alf.replay_buffers.offline`, or from datasets, :mod:`alf.datasets`) and the share
of every mini-batch drawn from them. It decides once, when built, whether training is on
offline data alone, and answers whether training may start (:meth:`MixedReplay.is_ready`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from alf import nest
from alf.data_structures import BatchInfo, Experience
from alf.replay_buffers.dataset_buffer import DatasetBuffer
from alf.replay_buffers.replay_buffer import ReplayBuffer

__all__ = ["MixedReplay", "OfflineBuffer"]

OfflineBuffer = ReplayBuffer | DatasetBuffer
"""An offline buffer: one saved by an earlier run, or a dataset's."""


def _cat(parts: Sequence[Any], dim: int) -> Any:
    return nest.map_structure(lambda *xs: torch.cat(xs, dim=dim), *parts)


class MixedReplay:
    """An online replay buffer and, optionally, offline buffers mixed into every batch.

    ``round(offline_fraction * batch_size)`` sequences of every batch come from the
    offline buffers (split among them in proportion to their sizes) and the rest, first
    in the batch, from the online buffer; ``offline_fraction=1`` trains on offline data
    alone (:attr:`offline_only`).

    Args:
        online: the buffer that stores the run's collected steps.
        offline: buffers of earlier runs' data or of datasets, sampled uniformly and
            never written.
        offline_fraction: the share of every batch drawn from ``offline``: in (0, 1]
            with offline buffers, 0 without.

    Raises:
        ValueError: ``offline_fraction`` out of range.
    """

    def __init__(
        self,
        *,
        online: ReplayBuffer,
        offline: Sequence[OfflineBuffer] = (),
        offline_fraction: float = 0.0,
    ) -> None:
        if offline and not 0.0 < offline_fraction <= 1.0:
            raise ValueError(f"offline fraction must be in (0, 1], got {offline_fraction}")
        if not offline and offline_fraction != 0.0:
            raise ValueError(
                f"offline fraction {offline_fraction} needs offline buffers (none given)"
            )
        self._online = online
        self._offline = tuple(offline)
        self._offline_fraction = float(offline_fraction)
        self._offline_only = bool(self._offline) and self._offline_fraction >= 1.0

    @property
    def online(self) -> ReplayBuffer:
        """The buffer of the run's own collected steps."""
        return self._online

    @property
    def offline(self) -> tuple[OfflineBuffer, ...]:
        """The offline buffers (empty without offline data)."""
        return self._offline

    @property
    def offline_fraction(self) -> float:
        """The share of every batch drawn from the offline buffers (0 without them)."""
        return self._offline_fraction

    @property
    def offline_only(self) -> bool:
        """Whether every batch comes from the offline buffers (no collected steps needed)."""
        return self._offline_only

    def is_ready(self, initial_collect_steps: int) -> bool:
        """Whether training may start: on offline data alone, or once the online buffer
        holds ``initial_collect_steps`` steps.

        Args:
            initial_collect_steps: steps to store before the first update.

        Returns:
            True if training may start.
        """
        return self._offline_only or self._online.total_size >= initial_collect_steps

    def can_sample(self, batch_length: int) -> bool:
        """Whether a batch of ``batch_length``-step sequences can be sampled.

        Args:
            batch_length: steps per sequence.

        Returns:
            True when training on offline data alone or some environment of the online
            buffer holds ``batch_length`` steps.
        """
        if self._offline_only:
            return True
        return int(self._online.num_steps().max()) >= batch_length

    def add(self, steps: Experience) -> None:
        """Stores a ``[T, B]`` :class:`Experience` of new steps in the online buffer, one
        row at a time (row ``t`` appends one step to each environment of ``env_id``).

        Args:
            steps: new steps; their ``batch_info`` is dropped.
        """
        buffer = self._online
        steps = steps._replace(batch_info=())
        for t in range(steps.step_type.shape[0]):
            row = nest.map_structure(lambda x, t=t: x[t], steps)
            buffer.add_batch(row, row.env_id)

    def split(self, batch_size: int) -> tuple[int, int]:
        """How many sequences of a batch come from the online and the offline buffers.

        Args:
            batch_size: sequences per batch.

        Returns:
            ``(num_online, num_offline)``, summing to ``batch_size``.
        """
        num_offline = round(self._offline_fraction * batch_size) if self._offline else 0
        return batch_size - num_offline, num_offline

    def sample(
        self, batch_size: int, batch_length: int, *, anchor: int = 0
    ) -> tuple[Any, BatchInfo, int]:
        """Samples ``batch_size`` sequences of ``batch_length`` steps, the online ones first.

        Draws from torch's default generator, online buffer first, then (with more than
        one offline buffer) how many sequences each offline buffer gives, then each of
        them in order.

        Args:
            batch_size: sequences per batch.
            batch_length: steps per sequence.
            anchor: the first row a loss is computed on (where the online buffer's
                hindsight relabelling anchors its goals; offline rows are not relabelled).

        Returns:
            A time-major ``[batch_length, batch_size]`` nest, its :class:`BatchInfo` (the
            offline rows have env id and position -1 and weight 1), and the number of
            leading sequences that came from the online buffer.
        """
        num_online, num_offline = self.split(batch_size)
        parts, infos = [], []
        if num_online:
            batch, info = self._online.get_batch(num_online, batch_length, anchor=anchor)
            parts.append(batch)
            infos.append(info)
        if num_offline:
            parts.append(self._sample_offline(num_offline, batch_length))
            infos.append(
                BatchInfo(
                    env_ids=torch.full((num_offline,), -1, dtype=torch.int64),
                    positions=torch.full((num_offline,), -1, dtype=torch.int64),
                    importance_weights=torch.ones(num_offline),
                )
            )
        batch = parts[0] if len(parts) == 1 else _cat(parts, dim=1)
        info = infos[0] if len(infos) == 1 else _cat(infos, dim=0)
        return batch, info, num_online

    def _sample_offline(self, n: int, batch_length: int) -> Any:
        """``n`` sequences from the offline buffers, split in proportion to their sizes."""
        sizes = torch.tensor([float(b.total_size) for b in self._offline])
        if len(sizes) == 1:
            counts = [n]
        else:
            counts = torch.bincount(
                torch.multinomial(sizes, n, replacement=True), minlength=len(sizes)
            ).tolist()
        parts = [
            b.get_batch(c, batch_length)[0]
            for b, c in zip(self._offline, counts, strict=True)
            if c > 0
        ]
        return parts[0] if len(parts) == 1 else _cat(parts, dim=1)

    def update_priority(self, info: BatchInfo, priorities: torch.Tensor, num_online: int) -> None:
        """Gives the online sequences of a sampled batch new priorities (nothing when the
        online buffer samples uniformly or the batch holds no online sequence).

        Args:
            info: the batch's :class:`BatchInfo` (on any device).
            priorities: ``[batch_size]`` new priorities (on any device).
            num_online: the batch's leading sequences that came from the online buffer.
        """
        if not (self._online.prioritized and num_online):
            return
        self._online.update_priority(
            info.env_ids[:num_online].cpu(),
            info.positions[:num_online].cpu(),
            priorities[:num_online].detach().cpu(),
        )
