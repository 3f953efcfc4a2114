"""``Collector``: the one interface through which trainers and actors collect experience.

Three implementations:

* :class:`~alf.unrollers.SyncUnroller`: one batched environment stepped in this process.
* :class:`~alf.unrollers.DoubleBufferedUnroller`: two environment groups that take turns,
  one stepping in the background while the policy acts for the other.
* :class:`~alf.unrollers.AsyncUnroller`: actor processes that collect into shared memory
  while the learner trains.

A trainer's iteration is ``trajectory = collector.collect(num_steps)``, then the algorithm
learns from it (:meth:`~alf.algorithms.rl_algorithm.RLAlgorithm.learn`), then
``collector.publish(policy)``; it never asks which collector it holds.
"""

from __future__ import annotations

import abc

from alf.algorithms.policy import Policy
from alf.data_structures import Experience, Segment, Trajectory
from alf.environments.alf_environment import AlfEnvironment
from alf.unrollers.episode_tracker import CompletedEpisodes, EpisodeTracker

__all__ = ["Collector", "UnrollingCollector"]


class Collector(abc.ABC):
    """Collects trajectories of a policy's exploring steps in environments."""

    @abc.abstractmethod
    def collect(self, num_steps: int | None = None) -> Trajectory:
        """Collects ``num_steps`` steps per environment (None: the collector's
        ``unroll_length``; 0: nothing) and returns them.

        Raises:
            ValueError: ``num_steps`` is a length this collector cannot deliver (an
                async collector's fragments have a fixed length).
        """

    @abc.abstractmethod
    def publish(self, policy: Policy) -> None:
        """Makes the policies that collect act with ``policy``'s current parameters (and
        statistics): the only way parameters reach them; called after every training
        iteration."""

    @property
    @abc.abstractmethod
    def env_steps(self) -> int:
        """Environment steps taken so far (over all environments)."""

    @property
    @abc.abstractmethod
    def num_clipped_actions(self) -> int:
        """Out-of-bounds continuous actions clipped by the environments so far."""

    @property
    def num_dropped_episodes(self) -> int:
        """Episodes the environments ended early for non-finite data so far
        (``TrainerConfig.nonfinite_data = 'drop_episode'``)."""
        return 0

    @abc.abstractmethod
    def pop_episodes(self) -> CompletedEpisodes:
        """Returns, lengths, env ids and successes of the episodes completed since the
        last call. An env id is the episode's row in the whole training batch of this process (as
        the ``env_id`` of the trajectories): the same numbering for every collector."""

    def stats(self) -> dict[str, float]:
        """Collection statistics since the last call, for summaries (none by default)."""
        return {}

    @abc.abstractmethod
    def close(self) -> None:
        """Releases the environments and any processes (idempotent)."""


class UnrollingCollector(Collector):
    """A :class:`Collector` stepping environments in this process by ``unroll``: the part
    :class:`~alf.unrollers.SyncUnroller` and :class:`~alf.unrollers.DoubleBufferedUnroller`
    share.

    It counts environment steps and uses up ``initial_collect_steps`` (uniformly random
    actions over all environments, the initial collection of off-policy training) over
    the calls of :meth:`collect`. Subclasses provide :meth:`unroll`, ``batch_size``,
    ``num_old_rows``, ``initial_collect_steps_left``, ``unroll_length``, ``episodes``, ``envs`` and
    ``policy``.

    Args:
        initial_collect_steps: uniformly random actions to take first, over all
            environments.
    """

    policy: Policy
    episodes: EpisodeTracker
    initial_collect_steps_left: int
    unroll_length: int

    def __init__(self, *, initial_collect_steps: int = 0) -> None:
        self._random_steps_left = max(0, initial_collect_steps)
        self._env_steps = 0

    @abc.abstractmethod
    def unroll(self, num_steps: int | None = None) -> Experience:
        """Runs ``num_steps`` (default ``unroll_length``) steps per environment and
        returns the ``[h + num_steps + 1, B]`` trajectory."""

    @property
    @abc.abstractmethod
    def batch_size(self) -> int:
        """Number of environments."""

    @property
    @abc.abstractmethod
    def num_old_rows(self) -> int:
        """Leading rows of the last :meth:`unroll` result that are not new steps."""

    @property
    @abc.abstractmethod
    def envs(self) -> tuple[AlfEnvironment, ...]:
        """The environments stepped."""

    def collect(self, num_steps: int | None = None) -> Trajectory:
        """Unrolls ``num_steps`` steps (None: ``unroll_length``; 0: returns an empty
        trajectory without stepping)."""
        num_steps = self.unroll_length if num_steps is None else num_steps
        if num_steps == 0:
            return Trajectory(segments=(), env_steps=0)
        self.initial_collect_steps_left = self._random_steps_left
        exp = self.unroll(num_steps)
        steps = num_steps * self.batch_size
        self._random_steps_left = max(0, self._random_steps_left - steps)
        self._env_steps += steps
        segment = Segment(exp=exp, num_old_rows=self.num_old_rows)
        return Trajectory(segments=(segment,), env_steps=steps)

    def publish(self, policy: Policy) -> None:
        """Loads ``policy``'s parameters into the collecting policy when it is another
        one."""
        if policy is not self.policy:
            self.policy.load_parameters(policy.algorithm)

    @property
    def env_steps(self) -> int:
        """Environment steps taken by :meth:`collect` so far."""
        return self._env_steps

    @property
    def num_clipped_actions(self) -> int:
        """Out-of-bounds continuous actions clipped by the environments so far."""
        return sum(int(getattr(env, "num_clipped_actions", 0)) for env in self.envs)

    @property
    def num_dropped_episodes(self) -> int:
        """Episodes the environments ended early for non-finite data so far."""
        return sum(int(getattr(env, "num_dropped_episodes", 0)) for env in self.envs)

    def pop_episodes(self) -> CompletedEpisodes:
        """Returns, lengths, env ids and successes of the episodes completed since the
        last call."""
        return self.episodes.pop_completed()

