"""Replay buffers: per-environment rings (storage) with a sampler (uniform or by priority),
the fixed episodes of a dataset, and the mix of an online buffer with offline ones
that an off-policy learner draws from."""

from alf.replay_buffers.dataset_buffer import DatasetBuffer
from alf.replay_buffers.hindsight import GoalRewardFn, HindsightError, HindsightRelabeller
from alf.replay_buffers.mixed_replay import MixedReplay, OfflineBuffer
from alf.replay_buffers.replay_buffer import ReplayBuffer
from alf.replay_buffers.sampler import Sampler
from alf.replay_buffers.spec_description import (
    ReplayBufferError,
    describe_spec,
    spec_differences,
)
from alf.replay_buffers.sum_tree import SumTree

__all__ = [
    "DatasetBuffer",
    "GoalRewardFn",
    "HindsightError",
    "HindsightRelabeller",
    "MixedReplay",
    "OfflineBuffer",
    "ReplayBuffer",
    "ReplayBufferError",
    "Sampler",
    "SumTree",
    "describe_spec",
    "spec_differences",
]
