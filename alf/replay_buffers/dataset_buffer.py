"""A fixed dataset of episodes held once in memory, sampled like a replay buffer.

:class:`DatasetBuffer` is the offline buffer of a dataset (see :mod:`alf.datasets`): the
episodes are laid out one after the other as rows of the ``[T+1, B]``
:class:`~alf.data_structures.Experience` layout (row ``t`` of an episode of ``T``
transitions holds the observation at ``t``, the reward received on arriving there, the
step type FIRST/MID/LAST, the discount and the action taken at ``t``). Only what a
dataset holds is stored, each field once and compactly: observations and actions in
their spec's dtype, rewards, and one byte each for the step type and the discount.
``prev_action`` (the previous row's action, zero at FIRST), ``env_id`` (0) and the
fields a dataset lacks (``rollout_info``, ``state``: zeros) are made for each sampled
batch, so the buffer takes about the dataset's raw size (``benchmarks/README.md``).
"""

from __future__ import annotations

from typing import Any

import torch

from alf import nest
from alf.data_structures import BatchInfo, Experience, StepType
from alf.replay_buffers.sequence_sampler import check_sequence_args
from alf.replay_buffers.spec_description import ReplayBufferError
from alf.tensor_specs import TensorSpec

__all__ = ["DatasetBuffer"]


def _rows(spec: Any, num_rows: int) -> Any:
    return nest.map_structure(lambda s: torch.zeros((num_rows, *s.shape), dtype=s.dtype), spec)


class DatasetBuffer:
    """Episodes of a dataset, laid out consecutively, sampled uniformly as sequences.

    Fill it with :meth:`add_episode` (exactly ``num_rows`` rows in all: an episode of
    ``T`` transitions takes ``T + 1``), then sample with :meth:`get_batch` as from a
    :class:`~alf.replay_buffers.ReplayBuffer` (it is one of the offline buffers of a
    :class:`~alf.replay_buffers.MixedReplay`). A sampled sequence may cross the end of an
    episode; the step types say where, as in a replay buffer.

    Args:
        data_spec: the :class:`Experience` of specs of one step (an algorithm's
            ``experience_spec()``); its ``reward``, ``discount`` and ``step_type`` are
            scalars.
        num_rows: rows to hold.

    Raises:
        ReplayBufferError: ``num_rows`` < 1, or a spec this layout cannot hold.
    """

    prioritized = False
    enable_checkpoint = False

    def __init__(self, *, data_spec: Experience, num_rows: int) -> None:
        if num_rows < 1:
            raise ReplayBufferError(f"a dataset buffer needs num_rows >= 1, got {num_rows}")
        for name in ("step_type", "reward", "discount", "env_id"):
            spec = getattr(data_spec, name)
            if not isinstance(spec, TensorSpec) or spec.shape != ():
                raise ReplayBufferError(
                    f"a dataset buffer needs a scalar '{name}' in the experience spec, got {spec}"
                )
        self._spec = data_spec
        self._num_rows = int(num_rows)
        self._written = 0
        self._observation = _rows(data_spec.observation, num_rows)
        self._action = _rows(data_spec.action, num_rows)
        self._reward = torch.zeros(num_rows, dtype=data_spec.reward.dtype)
        self._step_type = torch.zeros(num_rows, dtype=torch.int8)
        self._discount = torch.ones(num_rows, dtype=torch.uint8)

    # ----------------------------------------------------------------- properties
    @property
    def data_spec(self) -> Experience:
        """The specs of one step, as sampled batches have them."""
        return self._spec

    @property
    def num_envs(self) -> int:
        """One row sequence (the episodes one after the other)."""
        return 1

    @property
    def max_length(self) -> int:
        """The rows it holds when full."""
        return self._num_rows

    @property
    def total_size(self) -> int:
        """Rows written so far."""
        return self._written

    @property
    def nbytes(self) -> int:
        """Bytes of the stored tensors."""
        leaves = [
            *nest.flatten(self._observation),
            *nest.flatten(self._action),
            self._reward,
            self._step_type,
            self._discount,
        ]
        return sum(t.numel() * t.element_size() for t in leaves)

    def num_steps(self, env_ids: Any = None) -> torch.Tensor:
        """``[1]`` rows written (the one row sequence's steps)."""
        return torch.tensor([self._written], dtype=torch.int64)

    # ----------------------------------------------------------------- filling
    def add_episode(
        self, *, observation: Any, action: Any, reward: torch.Tensor, terminated: bool
    ) -> None:
        """Appends an episode of ``T >= 1`` transitions as ``T + 1`` rows.

        Args:
            observation: nest of ``[T + 1, ...]`` tensors (the first to the last
                observation), cast to the spec's dtypes.
            action: nest of ``[T, ...]`` tensors, the action taken at each of the first
                ``T`` observations (the last row's action is 0: none is taken at LAST).
            reward: ``[T]`` rewards, ``reward[t]`` received on arriving at
                ``observation[t + 1]``.
            terminated: whether the episode ended in a terminal state (discount 0 at
                its last row) rather than being cut (discount 1: values bootstrap).

        Raises:
            ReplayBufferError: an empty episode, lengths that disagree, or more rows
                than ``num_rows``.
        """
        length = int(reward.shape[0])
        start, end = self._written, self._written + length + 1
        if length < 1:
            raise ReplayBufferError("an episode needs at least one transition")
        if end > self._num_rows:
            raise ReplayBufferError(
                f"the dataset buffer holds {self._num_rows} rows; this episode would end "
                f"at row {end}"
            )
        parts = (("observation", observation, length + 1), ("action", action, length))
        for name, data, rows in parts:
            for leaf in nest.flatten(data):
                if leaf.shape[0] != rows:
                    raise ReplayBufferError(
                        f"an episode of {length} transitions needs {rows} rows of {name}, "
                        f"got {leaf.shape[0]}"
                    )

        def put(store: torch.Tensor, value: torch.Tensor) -> None:
            store[start : start + value.shape[0]] = value.to(store.dtype)

        nest.map_structure(put, self._observation, observation)
        nest.map_structure(put, self._action, action)
        self._reward[start + 1 : end] = reward.to(self._reward.dtype)
        self._step_type[start] = StepType.FIRST
        self._step_type[start + 1 : end - 1] = StepType.MID
        self._step_type[end - 1] = StepType.LAST
        self._discount[end - 1] = 0 if terminated else 1
        self._written = end

    # ----------------------------------------------------------------- reading
    def _experience(self, rows: torch.Tensor) -> Experience:
        """The full experience of the flat ``rows`` (any shape), made from the stored
        fields; derived and missing fields as the module docstring says."""
        shape = tuple(rows.shape)
        flat = rows.reshape(-1)

        def take(store: torch.Tensor) -> torch.Tensor:
            return store.index_select(0, flat).view(*shape, *store.shape[1:])

        spec = self._spec
        step_type = take(self._step_type)
        first = step_type == StepType.FIRST
        previous = (flat - 1).clamp(min=0)

        def prev(store: torch.Tensor) -> torch.Tensor:
            value = store.index_select(0, previous).view(*shape, *store.shape[1:])
            keep = (~first).view(*shape, *([1] * (store.dim() - 1)))
            return value * keep.to(value.dtype) if value.dtype != torch.bool else value & keep

        def zeros(s: TensorSpec) -> torch.Tensor:
            return s.zeros(shape)

        return Experience(
            step_type=step_type.to(spec.step_type.dtype),
            reward=take(self._reward),
            discount=take(self._discount).to(spec.discount.dtype),
            observation=nest.map_structure(take, self._observation),
            prev_action=nest.map_structure(prev, self._action),
            env_id=torch.zeros(shape, dtype=spec.env_id.dtype),
            action=nest.map_structure(take, self._action),
            rollout_info=nest.map_structure(zeros, spec.rollout_info),
            state=nest.map_structure(zeros, spec.state),
        )

    def get_batch(
        self, batch_size: int, batch_length: int, generator: torch.Generator | None = None
    ) -> tuple[Experience, BatchInfo]:
        """Samples ``batch_size`` sequences of ``batch_length`` consecutive rows,
        uniformly among the rows written.

        Args:
            batch_size: number of sequences ``B``.
            batch_length: rows per sequence ``T``.
            generator: random generator (torch's default one if None).

        Returns:
            A time-major ``[T, B]`` :class:`Experience` and its :class:`BatchInfo` (env
            id 0, the start rows, weights 1).

        Raises:
            ReplayBufferError: bad sizes, or fewer than ``batch_length`` rows written.
        """
        check_sequence_args(
            batch_size=batch_size, batch_length=batch_length, max_length=self._num_rows
        )
        if self._written < batch_length:
            raise ReplayBufferError(
                f"the dataset holds {self._written} rows, fewer than a sequence of {batch_length}"
            )
        start = torch.randint(
            0, self._written - batch_length + 1, (batch_size,), generator=generator
        )
        rows = start.unsqueeze(0) + torch.arange(batch_length).unsqueeze(1)
        info = BatchInfo(
            env_ids=torch.zeros(batch_size, dtype=torch.int64),
            positions=start,
            importance_weights=torch.ones(batch_size),
        )
        return self._experience(rows), info

    def experience(self) -> Experience:
        """Every row written, as a ``[rows, 1]`` :class:`Experience`."""
        return self._experience(torch.arange(self._written).unsqueeze(1))
