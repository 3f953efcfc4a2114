"""Replay buffers: per-environment rings (storage) with a sampler (uniform or by priority),
and the mix of an online buffer with offline ones that an off-policy learner draws from."""

from alf.replay_buffers.mixed_replay import MixedReplay
from alf.replay_buffers.replay_buffer import ReplayBuffer
from alf.replay_buffers.sampler import Sampler
from alf.replay_buffers.spec_description import (
    ReplayBufferError,
    describe_spec,
    spec_differences,
)
from alf.replay_buffers.sum_tree import SumTree

__all__ = [
    "MixedReplay",
    "ReplayBuffer",
    "ReplayBufferError",
    "Sampler",
    "SumTree",
    "describe_spec",
    "spec_differences",
]
