"""The typed records that flow between environments, unrollers, algorithms and trainers.

All batched tensors are time-major inside a trajectory (``[T, B, ...]``); a single
environment step is ``[B, ...]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import torch

from alf import nest


class StepType:
    """Where a time step sits in its episode (stored as ``torch.int32``).

    An episode is FIRST, MID..., LAST; the step after LAST is the next episode's FIRST,
    except in a row that stays idle: a multi-agent game's agent that left before the
    game ended repeats LAST (reward 0, discount 0) until the game starts again. Every
    LAST row is masked out of losses, and an episode is counted at its first LAST.
    """

    FIRST = 0
    MID = 1
    LAST = 2


class TimeStep(NamedTuple):
    """What the environment returns for one step of a batch of environments.

    Attributes:
        step_type: ``[B]`` FIRST, MID or LAST.
        reward: ``[B]`` reward received on arriving at this step (0 at FIRST).
        discount: ``[B]`` 0 if the episode terminated here, otherwise 1 (truncation
            by a time limit keeps 1 so that value targets bootstrap).
        observation: nest of ``[B, ...]`` tensors.
        prev_action: nest of ``[B, ...]`` tensors, the action that led here (0 at FIRST).
        env_id: ``[B]`` index of each environment.
        env_info: optional nest of per-environment extras.
    """

    step_type: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    observation: Any
    prev_action: Any
    env_id: torch.Tensor
    env_info: Any = ()

    def is_first(self) -> torch.Tensor:
        """Boolean mask of the environments starting an episode."""
        return self.step_type == StepType.FIRST

    def is_last(self) -> torch.Tensor:
        """Boolean mask of the environments ending an episode."""
        return self.step_type == StepType.LAST


class AlgStep(NamedTuple):
    """What every algorithm step hook returns.

    Attributes:
        output: the action (or any output) of the step.
        state: the recurrent state for the next step (``()`` when stateless).
        info: whatever the algorithm wants to keep: stored as ``rollout_info`` by the
            unrollers, passed to :meth:`calc_loss` in training.
    """

    output: Any = ()
    state: Any = ()
    info: Any = ()


class Experience(NamedTuple):
    """One step of experience as stored by unrollers and replay buffers.

    ``batch_info`` is filled only on batches sampled from a replay buffer
    (a :class:`BatchInfo`); it is never stored.
    """

    step_type: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    observation: Any
    prev_action: Any
    env_id: torch.Tensor
    action: Any
    rollout_info: Any = ()
    state: Any = ()
    batch_info: Any = ()

    @staticmethod
    def from_time_step(
        time_step: TimeStep, action: Any, rollout_info: Any = (), state: Any = ()
    ) -> Experience:
        """Combines a time step with the algorithm's response to it."""
        return Experience(
            step_type=time_step.step_type,
            reward=time_step.reward,
            discount=time_step.discount,
            observation=time_step.observation,
            prev_action=time_step.prev_action,
            env_id=time_step.env_id,
            action=action,
            rollout_info=rollout_info,
            state=state,
        )

    def to_time_step(self) -> TimeStep:
        """The environment part of this experience."""
        return TimeStep(
            step_type=self.step_type,
            reward=self.reward,
            discount=self.discount,
            observation=self.observation,
            prev_action=self.prev_action,
            env_id=self.env_id,
        )


class LossInfo(NamedTuple):
    """The result of :meth:`RLAlgorithm.calc_loss`.

    Attributes:
        loss: scalar tensor to minimise.
        extra: dict of named scalar tensors reported in summaries (e.g. ``pg_loss``).
        priority: optional ``[B]`` new priorities of the sampled sequences (e.g. absolute
            TD errors) for prioritized replay; ``()`` when the algorithm gives none.
    """

    loss: torch.Tensor
    extra: Mapping[str, torch.Tensor] = MappingProxyType({})
    priority: Any = ()


class BatchInfo(NamedTuple):
    """Where a batch sampled from a replay buffer came from.

    Attributes:
        env_ids: ``[B]`` int64 environment of each sampled sequence.
        positions: ``[B]`` int64 absolute position (the number of steps that environment
            had added before it) of the first step of each sequence; with ``env_ids`` it
            names the sequence for :meth:`ReplayBuffer.update_priority`.
        importance_weights: ``[B]`` float32 weights that correct prioritized sampling
            (all ones for uniform sampling).
    """

    env_ids: torch.Tensor
    positions: torch.Tensor
    importance_weights: torch.Tensor


@dataclass(frozen=True)
class Segment:
    """A block of collected steps: a ``[h + T + 1, b]`` :class:`Experience` of raw time
    steps, ``h`` the data transformers' history rows (see
    :class:`~alf.unrollers.SyncUnroller` for the layout).

    Attributes:
        exp: the steps, time-major.
        num_old_rows: leading rows that were delivered before (the row repeated from the
            previous block, and history padding); :meth:`new_rows` drops them.
    """

    exp: Experience
    num_old_rows: int

    def new_rows(self) -> Experience:
        """The rows not delivered by an earlier block (for replay buffers, which store
        each step once)."""
        if self.num_old_rows == 0:
            return self.exp
        return nest.map_structure(lambda x: x[self.num_old_rows :], self.exp)


@dataclass(frozen=True)
class Trajectory:
    """What one :meth:`Collector.collect <alf.unrollers.Collector.collect>` call returns:
    its segments (one per environment batch or actor fragment, all of the same length)
    and the environment steps they took.

    It is a sequence of its segments (``len``, indexing and unpacking work on them).

    Attributes:
        segments: the collected blocks (none when nothing was collected).
        env_steps: environment steps taken for them (over all environments; for async
            collection, including fragments dropped as too old).
    """

    segments: tuple[Segment, ...]
    env_steps: int

    def __len__(self) -> int:
        return len(self.segments)

    def __iter__(self) -> Iterator[Segment]:
        return iter(self.segments)

    def __getitem__(self, index: int) -> Segment:
        return self.segments[index]

    def experience(self) -> Experience:
        """The segments side by side: one ``[h + T + 1, B]`` :class:`Experience` (the
        input of on-policy training)."""
        if not self.segments:
            raise ValueError("the trajectory is empty: nothing was collected")
        exps = [segment.exp for segment in self.segments]
        if len(exps) == 1:
            return exps[0]
        return nest.map_structure(lambda *xs: torch.cat(xs, dim=1), *exps)

    def new_rows(self) -> list[Experience]:
        """Each segment's new rows (see :meth:`Segment.new_rows`)."""
        return [segment.new_rows() for segment in self.segments]
