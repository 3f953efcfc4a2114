"""``DoubleBufferedUnroller``: two environment groups take turns, so one steps while the
policy acts for the other."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from alf import nest
from alf.algorithms.policy import Policy
from alf.data_structures import Experience
from alf.environments.alf_environment import AlfEnvironment
from alf.unrollers.collector import UnrollingCollector
from alf.unrollers.episode_tracker import CompletedEpisodes
from alf.unrollers.sync_unroller import SyncUnroller

__all__ = ["DoubleBufferedUnroller"]


class _CombinedEpisodes:
    """Completed episodes of both groups (the ``EpisodeTracker.pop_completed`` API), the
    second group's env ids shifted by the first's batch size (as in :meth:`unroll`)."""

    def __init__(self, groups: tuple[SyncUnroller, SyncUnroller]) -> None:
        self._groups = groups

    def pop_completed(self) -> CompletedEpisodes:
        first, second = (group.episodes.pop_completed() for group in self._groups)
        shift = self._groups[0].batch_size
        return CompletedEpisodes(
            first.returns + second.returns,
            first.lengths + second.lengths,
            first.env_ids + [env_id + shift for env_id in second.env_ids],
            first.successes + second.successes,
        )


class DoubleBufferedUnroller(UnrollingCollector):
    """Collects like a :class:`SyncUnroller` over two environment groups that alternate
    (a :class:`~alf.unrollers.Collector`).

    While the policy chooses actions for one group, the other group's environments step
    in the background (EnvPool's threads or subprocess workers: both environments must
    have :attr:`~alf.environments.AlfEnvironment.steps_in_background`), so the time of
    an environment step is hidden behind the policy's, up to the smaller of the two.
    The cost is that each policy call sees half the environments: it pays off when an
    environment step costs about as much as a policy call (MuJoCo, Atari), not for
    environments far cheaper than the policy (CartPole).

    :meth:`unroll` returns the same ``[h + unroll_length + 1, B]`` trajectory layout as
    :class:`SyncUnroller`: the first group's environments are columns ``0..B1-1`` and the
    second's follow, with the second's ``env_id`` shifted by ``B1`` (so a group's ids
    continue the first's, as they would in one batched environment).

    Args:
        envs: the two groups' environments.
        policy: the policy that acts (called once per group per step, each group with its
            own recurrent and transformer state).
        unroll_length: environment steps per environment per call.
        initial_collect_steps: uniformly random actions :meth:`collect` takes first, over
            both groups.
    """

    def __init__(
        self,
        *,
        envs: tuple[AlfEnvironment, AlfEnvironment],
        policy: Policy,
        unroll_length: int,
        initial_collect_steps: int = 0,
    ) -> None:
        super().__init__(initial_collect_steps=initial_collect_steps)
        if len(envs) != 2:
            raise ValueError(f"DoubleBufferedUnroller needs two environments, got {len(envs)}")
        for env in envs:
            if not env.steps_in_background:
                raise ValueError(
                    "double buffering needs environments that step in the background "
                    "(vectorization_mode 'envpool' or 'subprocess'); "
                    f"{type(env).__name__} steps in the calling thread, so the groups "
                    "could not overlap"
                )
        self._groups = tuple(
            SyncUnroller(env=env, policy=policy, unroll_length=unroll_length) for env in envs
        )
        self.policy = policy
        self.unroll_length = unroll_length
        self._id_shift = envs[0].batch_size
        self.episodes = _CombinedEpisodes(self._groups)
        self._initial_collect_steps_left = 0

    @property
    def envs(self) -> tuple[AlfEnvironment, AlfEnvironment]:
        """The two groups' environments."""
        return tuple(group.env for group in self._groups)

    @property
    def batch_size(self) -> int:
        """Environments of both groups."""
        return sum(group.batch_size for group in self._groups)

    @property
    def steps_per_unroll(self) -> int:
        """Environment steps taken by one call of :meth:`unroll`."""
        return self.unroll_length * self.batch_size

    @property
    def num_old_rows(self) -> int:
        """As :attr:`SyncUnroller.num_old_rows` (the same for both groups)."""
        return self._groups[0].num_old_rows

    @property
    def initial_collect_steps_left(self) -> int:
        """Uniformly random actions still to take, over both groups (as
        :attr:`SyncUnroller.initial_collect_steps_left`)."""
        return self._initial_collect_steps_left

    @initial_collect_steps_left.setter
    def initial_collect_steps_left(self, steps: int) -> None:
        self._initial_collect_steps_left = steps
        # Each group's share, so that the same rows are random as in one batched env.
        for group in self._groups:
            group.initial_collect_steps_left = math.ceil(steps * group.batch_size / self.batch_size)

    @property
    def on_step(self) -> Callable[[], None] | None:
        """Called after every environment step of either group."""
        return self._groups[0].on_step

    @on_step.setter
    def on_step(self, callback: Callable[[], None] | None) -> None:
        for group in self._groups:
            group.on_step = callback

    @torch.no_grad()
    def unroll(self, num_steps: int | None = None) -> Experience:
        """Runs ``num_steps`` (default ``unroll_length``) steps of both groups and
        returns their trajectories side by side (see the class docstring)."""
        num_steps = self.unroll_length if num_steps is None else num_steps
        with self.policy.session():
            return self._unroll(num_steps)

    def _unroll(self, num_steps: int) -> Experience:
        first, second = self._groups
        first_rows = first._begin_call()
        second_rows = second._begin_call()
        in_flight = [False, False]  # a step started and not yet received, per group
        try:
            first._send()
            in_flight[0] = True
            for k in range(num_steps):
                second._send()  # the second group steps while the policy acts for the first
                in_flight[1] = True
                in_flight[0] = False
                first._receive(first_rows)
                if k + 1 < num_steps:
                    first._send()  # and the first steps while the policy acts for the second
                    in_flight[0] = True
                in_flight[1] = False
                second._receive(second_rows)
        except BaseException:
            # Leave no step in flight: the environments stay usable (or closable).
            for group, pending in zip(self._groups, in_flight, strict=True):
                if pending:
                    try:
                        group.env.step_wait()
                    except Exception:  # noqa: BLE001 - the first error is the one to raise
                        pass
            raise
        first_exp = first._end_call(first_rows)
        second_exp = second._end_call(second_rows)
        second_exp = second_exp._replace(env_id=second_exp.env_id + self._id_shift)
        return nest.map_structure(lambda a, b: torch.cat((a, b), dim=1), first_exp, second_exp)

    def close(self) -> None:
        """Closes both groups' environments."""
        try:
            self._groups[0].close()
        finally:
            self._groups[1].close()
