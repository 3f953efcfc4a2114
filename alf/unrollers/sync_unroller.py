"""``SyncUnroller``: steps one batched environment in the learner's process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from alf import nest
from alf.algorithms.policy import Policy, PolicyState
from alf.data_structures import Experience, TimeStep
from alf.environments.alf_environment import AlfEnvironment
from alf.tensor_specs import BoundedTensorSpec, action_mask_key, sample_uniform
from alf.unrollers.collector import UnrollingCollector
from alf.unrollers.episode_tracker import EpisodeTracker

__all__ = ["SyncUnroller"]


def _random_action_mask(observation: Any, action_spec: Any) -> torch.Tensor | None:
    """The invalid-action mask that the initial random actions must respect: the
    observation's :func:`~alf.tensor_specs.action_mask_key` entry for a scalar discrete
    action (None otherwise)."""
    key = action_mask_key()
    if not (isinstance(observation, dict) and key in observation):
        return None
    if isinstance(action_spec, BoundedTensorSpec) and action_spec.is_discrete:
        return observation[key] if action_spec.shape == () else None
    return None


class SyncUnroller(UnrollingCollector):
    """Collects ``unroll_length`` steps per call with the policy's exploring steps
    (:meth:`~alf.algorithms.policy.Policy.explore_step`): the
    :class:`~alf.unrollers.Collector` of one batched environment in this process.

    Each call returns a ``[h + unroll_length + 1, B]`` :class:`Experience` of raw time
    steps, where ``h`` is the ``history_length`` of the algorithm's data transformers
    (0 without frame stacking). Row ``h + k`` is the ``k``-th step of this call; its
    last row is the step reached after the last action, with the policy's response to
    it; that response is really taken, as row ``h`` of the next call, so consecutive
    trajectories overlap by ``h + 1`` rows and no computation is wasted (the first call
    pads its ``h`` history rows with copies of its first row). :meth:`new_rows` drops
    the :attr:`num_old_rows` repeated rows (for replay buffers, which store each step
    once).

    The policy transforms each time step for the algorithm (and moves it to the
    policy's device); the experience keeps it raw, on the host.

    With an environment that steps in the background
    (:attr:`~alf.environments.AlfEnvironment.steps_in_background`: EnvPool, subprocess
    workers), each step is started with ``env.step_async`` and collected with
    ``env.step_wait``, and in between the previous time step is recorded (its episode
    statistics and its experience row), so that this bookkeeping overlaps the
    environments' step. Other environments are stepped with ``env.step``.

    While :attr:`initial_collect_steps_left` is positive, actions are drawn uniformly from the
    action space instead (the policy's step still runs, for its state and info): the
    initial collection of off-policy training. It counts environment steps (over all
    environments) from the next action executed, and is used up as actions are
    executed. :meth:`collect` sets it from ``initial_collect_steps`` and uses that up over
    its calls.

    Args:
        env: the batched environment.
        policy: the policy that acts.
        unroll_length: environment steps per environment per call.
        initial_collect_steps: uniformly random actions :meth:`collect` takes first, over
            all environments.
    """

    def __init__(
        self,
        *,
        env: AlfEnvironment,
        policy: Policy,
        unroll_length: int,
        initial_collect_steps: int = 0,
    ) -> None:
        super().__init__(initial_collect_steps=initial_collect_steps)
        if unroll_length < 1:
            raise ValueError(f"unroll_length must be >= 1, got {unroll_length}")
        self.env = env
        self.policy = policy
        self.unroll_length = unroll_length
        self.episodes = EpisodeTracker(batch_size=env.batch_size)
        self._history = policy.history_length
        self._state: PolicyState | None = None
        self._tail: list[Experience] | None = None  # the last h + 1 rows
        self._action: Any = None  # the actions chosen for the last time step
        # The time step :meth:`_respond` answered last, with its action, info and state,
        # until :meth:`_settle` records it.
        self._unsettled: tuple[TimeStep, Any, Any, Any] | None = None
        self._num_old_rows = 0
        self.initial_collect_steps_left = 0
        self._rows_this_call = 0
        self.on_step: Callable[[], None] | None = None
        """Called after every environment step (e.g. an actor's heartbeat)."""

    @property
    def batch_size(self) -> int:
        """Number of environments."""
        return self.env.batch_size

    @property
    def envs(self) -> tuple[AlfEnvironment]:
        """``(env,)``, as :attr:`DoubleBufferedUnroller.envs`."""
        return (self.env,)

    @property
    def steps_per_unroll(self) -> int:
        """Environment steps taken by one call of :meth:`unroll`."""
        return self.unroll_length * self.env.batch_size

    def _respond(self, time_step: TimeStep) -> None:
        """Chooses the actions for ``time_step`` and leaves the step to :meth:`_settle`."""
        step = self.policy.explore_step(time_step, self._state)
        self._state = step.next_state
        action = step.action
        # The action of the k-th row of this call is executed k * B env steps from now.
        executed_in = self._rows_this_call * self.env.batch_size
        self._rows_this_call += 1
        if executed_in < self.initial_collect_steps_left:
            action = sample_uniform(
                self.env.action_spec(),
                self.env.batch_size,
                mask=_random_action_mask(time_step.observation, self.env.action_spec()),
            )
        self._action = action
        self._unsettled = (time_step, action, step.info, step.state)

    def _settle(self, rows: list[Experience]) -> None:
        """Records the time step :meth:`_respond` last answered, if not yet done: its
        episode statistics and its experience row (appended to ``rows``). Deferred from
        :meth:`_respond` so that it runs while the environments step in the background
        (between ``step_async`` and ``step_wait``)."""
        if self._unsettled is None:
            return
        time_step, action, info, state = self._unsettled
        self._unsettled = None
        self.episodes.update(time_step)
        rows.append(Experience.from_time_step(time_step, action, info, state))

    @torch.no_grad()
    def unroll(self, num_steps: int | None = None) -> Experience:
        """Runs ``num_steps`` (default ``unroll_length``) steps and returns the
        ``[num_steps + 1, B]`` trajectory."""
        num_steps = self.unroll_length if num_steps is None else num_steps
        with self.policy.session():
            rows = self._begin_call()
            if getattr(self.env, "steps_in_background", False):
                for _ in range(num_steps):
                    self._send()
                    self._receive(rows)
            else:
                for _ in range(num_steps):
                    self._settle(rows)
                    self._take(self.env.step(self._action))
        return self._end_call(rows)

    def _begin_call(self) -> list[Experience]:
        """Starts a call of :meth:`unroll`: the rows it returns so far (the repeated
        ones; on the first call, the reset step and its history padding)."""
        first_call = self._tail is None
        # Row h of a later call was chosen by the previous one: count from the next row.
        self._rows_this_call = 0 if first_call else 1
        self._num_old_rows = self._history + (0 if first_call else 1)
        self._unsettled = None  # (left over only by a call that raised)
        if first_call:
            time_step = self.env.reset()
            self._state = self.policy.initial_state(self.env.batch_size, greedy=False)
            self._respond(time_step)
            first_row: list[Experience] = []
            self._settle(first_row)
            self._tail = first_row * (self._history + 1)
        return list(self._tail)

    def _send(self) -> None:
        """Starts the environments' step with the last chosen actions."""
        self.env.step_async(self._action)

    def _receive(self, rows: list[Experience]) -> None:
        """Records the previous time step (:meth:`_settle`, while the environments
        step), waits for the step :meth:`_send` started and chooses the next actions.
        The step is waited for even if recording fails: none is left in flight."""
        try:
            self._settle(rows)
        finally:
            time_step = self.env.step_wait()
        self._take(time_step)

    def _take(self, time_step: TimeStep) -> None:
        """Takes in the environments' new step: chooses the next actions."""
        if self.on_step is not None:
            self.on_step()
        self._respond(time_step)

    def _end_call(self, rows: list[Experience]) -> Experience:
        """Ends a call of :meth:`unroll`: records the last time step, keeps the rows the
        next call repeats and stacks ``rows`` into the ``[len(rows), B]`` trajectory."""
        self._settle(rows)
        self._tail = rows[len(rows) - self._history - 1 :]
        return nest.stack(rows)

    @property
    def random_actions(self) -> bool:
        """Whether the next executed action is a random one."""
        return self.initial_collect_steps_left > 0

    @property
    def num_old_rows(self) -> int:
        """Leading rows of the last :meth:`unroll` result that are not new steps: the
        history rows, plus the repeated row on every call but the first."""
        return self._num_old_rows

    def new_rows(self, exp: Experience) -> Experience:
        """The rows of :meth:`unroll`'s last result not returned by an earlier call."""
        if self._num_old_rows == 0:
            return exp
        return nest.map_structure(lambda x: x[self._num_old_rows :], exp)

    def close(self) -> None:
        """Closes the environment (idempotent)."""
        self.env.close()
