"""``SyncUnroller``: steps one batched environment in the learner's process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import AlgStep, Experience, StepType, TimeStep
from alf.environments.alf_environment import AlfEnvironment
from alf.tensor_specs import sample_uniform
from alf.unrollers.episode_tracker import EpisodeTracker

__all__ = ["SyncUnroller", "reset_state_on_first"]


def reset_state_on_first(state: Any, step_type: torch.Tensor) -> Any:
    """Zeroes the recurrent state of the environments whose step is FIRST."""
    if not nest.flatten(state):  # stateless: nothing to do on this per-step path
        return state
    return nest.zero_rows(state, step_type != StepType.FIRST)


class SyncUnroller:
    """Collects ``unroll_length`` steps per call with ``algorithm.rollout_step``.

    Each call returns a ``[unroll_length + 1, B]`` :class:`Experience`. Its last row is
    the step reached after the last action, with the algorithm's response to it; that
    response is really taken, as the first row of the next call, so consecutive
    trajectories overlap by one row and no computation is wasted.
    :meth:`new_rows` drops that repeated row (for replay buffers, which store each step
    once).

    While :attr:`num_random_steps` is positive, actions are drawn uniformly from the
    action space instead (the algorithm's ``rollout_step`` still runs, for its state and
    info): the initial collection of off-policy training. It counts environment steps
    (over all environments) from the next action executed, and is used up as actions are
    executed.

    Args:
        env: the batched environment.
        algorithm: supplies ``rollout_step`` and ``rollout_state_spec``.
        unroll_length: environment steps per environment per call.
    """

    def __init__(self, *, env: AlfEnvironment, algorithm: RLAlgorithm, unroll_length: int) -> None:
        if unroll_length < 1:
            raise ValueError(f"unroll_length must be >= 1, got {unroll_length}")
        self.env = env
        self.algorithm = algorithm
        self.unroll_length = unroll_length
        self.episodes = EpisodeTracker(batch_size=env.batch_size)
        self._row: Experience | None = None
        self._policy_step: AlgStep | None = None
        self._first_row_is_new = True
        self.num_random_steps = 0
        self._rows_this_call = 0
        self.on_step: Callable[[], None] | None = None
        """Called after every environment step (e.g. an actor's heartbeat)."""

    @property
    def batch_size(self) -> int:
        """Number of environments."""
        return self.env.batch_size

    @property
    def steps_per_unroll(self) -> int:
        """Environment steps taken by one call of :meth:`unroll`."""
        return self.unroll_length * self.env.batch_size

    def _respond(self, time_step: TimeStep, state: Any) -> Experience:
        state = reset_state_on_first(state, time_step.step_type)
        self._policy_step = self.algorithm.rollout_step(time_step, state)
        # The action of the k-th row of this call is executed k * B env steps from now.
        executed_in = self._rows_this_call * self.env.batch_size
        self._rows_this_call += 1
        if executed_in < self.num_random_steps:
            action = sample_uniform(self.env.action_spec(), self.env.batch_size)
            self._policy_step = self._policy_step._replace(output=action)
        return Experience.from_time_step(
            time_step, self._policy_step.output, self._policy_step.info, state
        )

    @torch.no_grad()
    def unroll(self, num_steps: int | None = None) -> Experience:
        """Runs ``num_steps`` (default ``unroll_length``) steps and returns the
        ``[num_steps + 1, B]`` trajectory."""
        num_steps = self.unroll_length if num_steps is None else num_steps
        self._first_row_is_new = self._row is None
        # Row 0 of a later call was chosen by the previous one: count from row 1.
        self._rows_this_call = 0 if self._row is None else 1
        if self._row is None:
            time_step = self.env.reset()
            self.episodes.update(time_step)
            state = self.algorithm.zero_state(
                self.algorithm.rollout_state_spec, self.env.batch_size
            )
            self._row = self._respond(time_step, state)
        rows = [self._row]
        for _ in range(num_steps):
            time_step = self.env.step(self._policy_step.output)
            if self.on_step is not None:
                self.on_step()
            self.episodes.update(time_step)
            rows.append(self._respond(time_step, self._policy_step.state))
        self._row = rows[-1]
        return nest.stack(rows)

    @property
    def random_actions(self) -> bool:
        """Whether the next executed action is a random one."""
        return self.num_random_steps > 0

    @property
    def first_row_is_new(self) -> bool:
        """Whether row 0 of the last :meth:`unroll` result is new (the first call's)."""
        return self._first_row_is_new

    def new_rows(self, exp: Experience) -> Experience:
        """The rows of :meth:`unroll`'s last result not returned by an earlier call
        (all but the first, except on the first call)."""
        if self._first_row_is_new:
            return exp
        return nest.map_structure(lambda x: x[1:], exp)

    def close(self) -> None:
        """Closes the environment."""
        self.env.close()
