"""Replay buffers: per-environment rings sampled uniformly or by priority."""

from alf.replay_buffers.replay_buffer import ReplayBuffer
from alf.replay_buffers.spec_description import (
    ReplayBufferError,
    describe_spec,
    spec_differences,
)
from alf.replay_buffers.sum_tree import SumTree

__all__ = ["ReplayBuffer", "ReplayBufferError", "SumTree", "describe_spec", "spec_differences"]
