"""Unrollers: run the algorithm's ``rollout_step`` in environments to collect experience."""

from alf.unrollers.async_unroller import ActorError, ActorTimeoutError, AsyncUnroller, Fragment
from alf.unrollers.double_buffered_unroller import DoubleBufferedUnroller
from alf.unrollers.episode_tracker import CompletedEpisodes, EpisodeTracker
from alf.unrollers.sync_unroller import SyncUnroller

__all__ = [
    "ActorError",
    "ActorTimeoutError",
    "AsyncUnroller",
    "CompletedEpisodes",
    "DoubleBufferedUnroller",
    "EpisodeTracker",
    "Fragment",
    "SyncUnroller",
]
