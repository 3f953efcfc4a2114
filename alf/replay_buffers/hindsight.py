"""Hindsight experience replay (HER; Andrychowicz et al. 2017), done as a batch is sampled.

A goal-conditioned environment observes a ``Dict`` with ``observation``,
``achieved_goal`` (what the agent's state achieves) and ``desired_goal`` (what it should
achieve), and rewards a step with ``compute_reward(achieved_goal, desired_goal, info)``
(Gymnasium-Robotics' ``GoalEnv``). A :class:`HindsightRelabeller` set on the
:class:`~alf.replay_buffers.replay_buffer.ReplayBuffer` (``ReplayBuffer.hindsight``)
rewrites sampled sequences: with probability ``relabel_ratio`` a sequence's desired goal
becomes a goal its own episode achieved later, and its rewards are recomputed for it.

The rule, per sampled sequence of ``L`` rows starting at position ``p`` of environment
``e``, with the *anchor* row ``a`` (the first row a loss is computed on: 0, or after the
burn-in and history rows):

* the anchor's episode ends at ``end``: the first LAST step at or after ``p + a``
  (or the newest held step of ``e`` while the episode is still running);
* ``future`` (the default): a position ``f`` uniform in ``[p + a + 1, end]``;
  ``final``: ``f = end``; a sequence whose anchor is the episode's last step keeps its
  goal;
* every row's ``desired_goal`` becomes ``achieved_goal`` of step ``f``, and every row's
  ``reward`` becomes ``reward_fn(achieved_goal of the row, new goal)`` (0 at FIRST rows).
  Step types and discounts are kept as stored, so n-step targets still stop at the
  episode's end (goal environments that *terminate* on success therefore keep the
  original termination: use HER on environments that end by a time limit, as Fetch does).

Nothing is stored: relabelling reads the buffer's ``step_type`` and ``achieved_goal``
fields at sampling time, so a buffer restored from a checkpoint
(``ReplayBuffer.enable_checkpoint``) or a resumed run relabels exactly as before. Offline
buffers are not relabelled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from alf import nest
from alf.config import configurable
from alf.data_structures import StepType
from alf.replay_buffers.ring_storage import RingStorage
from alf.replay_buffers.spec_description import ReplayBufferError
from alf.tensor_specs import TensorSpec

__all__ = ["GoalRewardFn", "HindsightError", "HindsightRelabeller"]

GoalRewardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``reward_fn(achieved_goal [N, *g], desired_goal [N, *g]) -> [N]`` float rewards."""

STRATEGIES = ("future", "final")
"""The goal-selection strategies of :class:`HindsightRelabeller`."""


class HindsightError(ReplayBufferError):
    """Hindsight relabelling set up on data or an environment that is not goal-conditioned."""


@configurable
class HindsightRelabeller:
    """Relabels sampled sequences with goals achieved later in their episodes (HER).

    Set it on the replay buffer, with the environment's reward function::

        ReplayBuffer.hindsight = @HindsightRelabeller()
        HindsightRelabeller.reward_fn = @goal_env_reward()   # the run's env's compute_reward

    Args:
        reward_fn: the environment's reward of an achieved goal for a desired goal,
            batched (see :data:`GoalRewardFn`); ``@goal_env_reward()``
            (:func:`alf.environments.goal_env.goal_env_reward`) wraps the configured
            environment's ``compute_reward``.
        relabel_ratio: the probability that a sampled sequence is relabelled, in
            ``[0, 1]`` (0.8: HER's ``k = 4`` relabelled goals per real one).
        strategy: ``"future"`` (a goal achieved at a uniformly drawn later step of the
            episode) or ``"final"`` (the goal achieved at its last step).
        achieved_goal_key: the observation key of the achieved goal.
        desired_goal_key: the observation key of the desired goal.
        scan_length: steps read per round while looking for an episode's end (a
            vectorized read of ``[batch, scan_length]`` step types; longer episodes take
            more rounds).

    Raises:
        ReplayBufferError: a ratio, strategy or scan length out of range.
    """

    def __init__(
        self,
        *,
        reward_fn: GoalRewardFn | None = None,
        relabel_ratio: float = 0.8,
        strategy: str = "future",
        achieved_goal_key: str = "achieved_goal",
        desired_goal_key: str = "desired_goal",
        scan_length: int = 64,
    ) -> None:
        if not 0.0 <= relabel_ratio <= 1.0:
            raise ReplayBufferError(
                f"HindsightRelabeller.relabel_ratio must be in [0, 1], got {relabel_ratio}"
            )
        if strategy not in STRATEGIES:
            raise ReplayBufferError(
                f"HindsightRelabeller.strategy must be one of {STRATEGIES}, got {strategy!r}"
            )
        if scan_length < 1:
            raise ReplayBufferError(
                f"HindsightRelabeller.scan_length must be >= 1, got {scan_length}"
            )
        if reward_fn is None:
            raise HindsightError(
                "HindsightRelabeller.reward_fn is not set: bind HindsightRelabeller.reward_fn "
                "= @goal_env_reward() (the environment's compute_reward)"
            )
        self.reward_fn = reward_fn
        self.relabel_ratio = float(relabel_ratio)
        self.strategy = strategy
        self.achieved_goal_key = achieved_goal_key
        self.desired_goal_key = desired_goal_key
        self.scan_length = int(scan_length)

    @property
    def achieved_goal_path(self) -> str:
        """The replay-buffer field of the achieved goal."""
        return f"observation.{self.achieved_goal_key}"

    def check_spec(self, data_spec: nest.Nest) -> None:
        """Checks that ``data_spec`` holds what relabelling reads and writes.

        Args:
            data_spec: the replay buffer's spec of one step (an ``Experience`` of specs).

        Raises:
            HindsightError: no ``step_type`` or ``reward`` field, or an observation that
                is not a ``Dict`` with both goal keys of one shape.
        """
        fields = getattr(data_spec, "_fields", ())
        if not {"step_type", "reward", "observation"} <= set(fields):
            raise HindsightError(
                "HindsightRelabeller needs replay data with step_type, reward and "
                f"observation fields (an Experience), got fields {list(fields)}"
            )
        observation = data_spec.observation
        keys = (self.achieved_goal_key, self.desired_goal_key)
        if not isinstance(observation, dict) or not all(k in observation for k in keys):
            got = list(observation) if isinstance(observation, dict) else "not a Dict"
            raise HindsightError(
                "HindsightRelabeller needs a goal-conditioned environment: Dict observations "
                f"with the keys {keys[0]!r} and {keys[1]!r} (Gymnasium-Robotics' GoalEnv); "
                f"this one's keys: {got}"
            )
        achieved, desired = observation[keys[0]], observation[keys[1]]
        if not (isinstance(achieved, TensorSpec) and isinstance(desired, TensorSpec)) or (
            achieved.shape != desired.shape
        ):
            raise HindsightError(
                f"HindsightRelabeller: observation[{keys[0]!r}] and observation[{keys[1]!r}] "
                f"must be tensors of one shape, got {achieved} and {desired}"
            )

    def relabel(
        self,
        storage: RingStorage,
        batch: Any,
        *,
        env: torch.Tensor,
        start: torch.Tensor,
        anchor: int = 0,
        generator: torch.Generator | None = None,
    ) -> Any:
        """Relabels a sampled ``[L, B]`` batch (see the module's rule).

        Args:
            storage: the storage the batch was gathered from.
            batch: the time-major sampled ``Experience`` of ``[L, B, ...]`` tensors.
            env: ``[B]`` environment of each sequence.
            start: ``[B]`` absolute position of each sequence's first row.
            anchor: the row whose transition the future goals follow.
            generator: random generator (torch's default one if None).

        Returns:
            The batch with new ``desired_goal`` and ``reward`` in the relabelled sequences
            (the others' tensors are the sampled ones).
        """
        b = env.shape[0]
        drawn = torch.nonzero(torch.rand(b, generator=generator) < self.relabel_ratio).squeeze(1)
        if drawn.numel() == 0:
            return batch
        here = start[drawn] + anchor
        end = self._episode_end(storage, env[drawn], here)  # only the drawn ones are scanned
        keep = end > here
        chosen, here, end = drawn[keep], here[keep], end[keep]
        if chosen.numel() == 0:
            return batch
        if self.strategy == "future":
            u = torch.rand(chosen.shape[0], generator=generator)
            span = end - here
            future = here + 1 + torch.minimum((u * span).long(), span - 1)
        else:
            future = end
        goal = storage.gather_field(self.achieved_goal_path, env[chosen], future)
        observation = dict(batch.observation)
        achieved = observation[self.achieved_goal_key][:, chosen]
        desired = observation[self.desired_goal_key].clone()
        length = desired.shape[0]
        desired[:, chosen] = goal.unsqueeze(0).expand(length, *goal.shape).to(desired.dtype)
        observation[self.desired_goal_key] = desired
        flat_achieved = achieved.reshape(-1, *achieved.shape[2:])
        flat_goal = desired[:, chosen].reshape(-1, *desired.shape[2:])
        rewards = torch.as_tensor(self.reward_fn(flat_achieved, flat_goal))
        rewards = rewards.to(batch.reward.dtype).reshape(length, -1)
        reward = batch.reward.clone()
        first = batch.step_type[:, chosen] == StepType.FIRST
        reward[:, chosen] = torch.where(first, torch.zeros_like(rewards), rewards)
        return batch._replace(observation=observation, reward=reward)

    def _episode_end(
        self, storage: RingStorage, env: torch.Tensor, here: torch.Tensor
    ) -> torch.Tensor:
        """``[B]`` position of the last step of the episode holding step ``here`` of
        ``env`` (its first LAST at or after ``here``, else the newest held step)."""
        newest = storage.positions[env] - 1
        end = newest.clone()
        todo = torch.arange(env.shape[0])
        steps = torch.arange(self.scan_length)
        offset = 0
        while todo.numel():
            newest_todo = newest[todo].unsqueeze(1)
            pos = here[todo].unsqueeze(1) + offset + steps
            inside = pos <= newest_todo
            step_type = storage.gather_field(
                "step_type", env[todo].unsqueeze(1).expand_as(pos), torch.minimum(pos, newest_todo)
            )
            is_last = (step_type == StepType.LAST) & inside
            found = is_last.any(1)
            first_last = is_last.int().argmax(1)
            end[todo[found]] = pos[found, first_last[found]]
            done = found | (pos[:, -1] >= newest_todo.squeeze(1))
            todo = todo[~done]
            offset += self.scan_length
        return end
