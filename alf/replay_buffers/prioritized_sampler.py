"""Prioritized sampling of sequence starts from a :class:`RingStorage`.

A :class:`SumTree` over all ``num_envs * max_length`` flat slots holds
``priority ** priority_alpha``. A new step gets the largest priority given so far
(starting at 1.0 and never lowered, so a run of small priorities does not starve new
steps) and replaces the priority of the step it overwrites. A sequence is sampled by its
start slot with probability proportional to its priority^alpha among the *valid* starts
(see :mod:`alf.replay_buffers.sequence_sampler`): starts drawn too close to the head are
redrawn for a few vectorized rounds, and any still left are drawn from the tree with the
invalid slots temporarily set to 0, so the result is exact either way.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from alf.replay_buffers.ring_storage import RingStorage, as_index_tensor
from alf.replay_buffers.sequence_sampler import not_enough_steps_error, valid_start_counts
from alf.replay_buffers.spec_description import ReplayBufferError
from alf.replay_buffers.sum_tree import SumTree

__all__ = ["PrioritizedSampler", "check_priority_exponent"]

_REJECTION_ROUNDS = 4
"""Rounds of redrawing prioritized starts that are too close to the write head before
falling back to masking those slots out of the sum tree."""


def check_priority_exponent(name: str, value: float) -> None:
    """Checks a priority exponent (``priority_alpha`` or ``priority_beta``).

    Args:
        name: the argument's name, for the error message.
        value: the exponent, finite and >= 0.

    Raises:
        ReplayBufferError: if ``value`` is negative, infinite or NaN.
    """
    if not (value >= 0 and math.isfinite(value)):
        raise ReplayBufferError(f"{name} must be finite and >= 0, got {value}")


class PrioritizedSampler:
    """The priorities of the steps of a :class:`RingStorage`, and sampling by them (a
    :class:`~alf.replay_buffers.sampler.Sampler`).

    Args:
        storage: the storage whose steps are sampled; this sampler reads its write
            counters and must be told of every write through :meth:`record_new`.
        priority_alpha: exponent applied to priorities (0 gives uniform sampling).

    Raises:
        ReplayBufferError: if ``priority_alpha`` is negative or not finite.
    """

    def __init__(self, *, storage: RingStorage, priority_alpha: float) -> None:
        check_priority_exponent("priority_alpha", priority_alpha)
        self._storage = storage
        self._max_length = storage.max_length
        self._alpha = float(priority_alpha)
        self._max_priority = 1.0
        self._tree = SumTree(capacity=storage.num_envs * storage.max_length)

    prioritized = True
    """Sampling by priority."""

    @property
    def max_priority(self) -> float:
        """The priority (before ``alpha``) that new steps get."""
        return self._max_priority

    def record_new(self, flat: torch.Tensor) -> None:
        """Gives the newly written flat slots ``flat`` (distinct) the max priority.

        Args:
            flat: ``[n]`` flat slots as returned by :meth:`RingStorage.append`.
        """
        value = torch.full((flat.numel(),), self._max_priority**self._alpha, dtype=torch.float64)
        self._tree._assign_unique(flat, value)

    def clear(self) -> None:
        """Sets every priority to 0 and the max priority to 1."""
        self._max_priority = 1.0
        self._tree.reset()

    # ----------------------------------------------------------------- sampling

    def _starts(
        self, flat: torch.Tensor, batch_length: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Env, absolute position and validity as a sequence start of slots ``flat``."""
        env = flat // self._max_length
        slot = flat - env * self._max_length
        last = self._storage.positions[env] - 1
        position = last - (last - slot) % self._max_length
        valid = position <= last + 1 - batch_length
        return env, position, valid

    def _invalid_start_slots(self, batch_length: int) -> torch.Tensor:
        """Flat slots of the held steps too close to the head to start a sequence."""
        pos = self._storage.positions
        back = torch.arange(1, batch_length)
        steps = pos.unsqueeze(1) - back.unsqueeze(0)  # [E, T-1]
        held = self._storage.num_steps()
        keep = steps >= (pos - held).unsqueeze(1)
        flat = self._storage.flat_slots(torch.arange(pos.numel()).unsqueeze(1), steps)
        return flat[keep]

    def _sample_starts(
        self, batch_size: int, batch_length: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        tree = self._tree
        zero_error = ReplayBufferError(
            f"ReplayBuffer: every start of a held sequence of {batch_length} steps has "
            "priority 0, so none can be sampled"
        )
        if not tree.total > 0:
            raise zero_error
        flat = tree.sample(batch_size, generator)
        if batch_length == 1:
            env, start, _ = self._starts(flat, 1)
            return env, start, flat
        env, start, valid = self._starts(flat, batch_length)
        for _ in range(_REJECTION_ROUNDS):
            if bool(valid.all()):
                return env, start, flat
            redo = (~valid).nonzero().squeeze(1)
            flat[redo] = tree.sample(redo.numel(), generator)
            env, start, valid = self._starts(flat, batch_length)
        if not bool(valid.all()):
            # Exact fallback: draw the rest with the invalid starts' priorities set to 0.
            redo = (~valid).nonzero().squeeze(1)
            masked = self._invalid_start_slots(batch_length)
            saved = tree.get(masked)
            tree._assign_unique(masked, torch.zeros_like(saved))
            try:
                if not tree.total > 0:
                    raise zero_error
                flat[redo] = tree.sample(redo.numel(), generator)
            finally:
                tree._assign_unique(masked, saved)
            env, start, valid = self._starts(flat, batch_length)
        return env, start, flat

    def sample(
        self,
        *,
        batch_size: int,
        batch_length: int,
        beta: float,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draws ``batch_size`` valid starts by priority, with replacement.

        Args:
            batch_size: number of sequences.
            batch_length: steps per sequence.
            beta: exponent of the importance weights.
            generator: random generator (torch's default one if None).

        Returns:
            ``[batch_size]`` env ids, absolute start positions and float32 importance
            weights ``(q_i / min_j q_j) ** -beta`` (``q`` the sampled priority^alpha).

        Raises:
            ReplayBufferError: when no environment holds ``batch_length`` steps or every
                valid start has priority 0.
        """
        if int(valid_start_counts(self._storage, batch_length).max()) == 0:
            raise not_enough_steps_error(self._storage, batch_length)
        env, start, flat = self._sample_starts(batch_size, batch_length, generator)
        q = self._tree.get(flat)
        weights = (q / q.min()).pow(-beta).to(torch.float32)
        return env, start, weights

    # ----------------------------------------------------------------- priorities

    def update_priority(
        self, env_ids: torch.Tensor, positions: torch.Tensor, priorities: torch.Tensor
    ) -> int:
        """Sets the priorities of the steps ``(env_ids, positions)`` that are still held.

        See :meth:`ReplayBuffer.update_priority`.

        Args:
            env_ids: ``[n]`` environment of each entry.
            positions: ``[n]`` absolute step numbers.
            priorities: ``[n]`` new priorities, finite and >= 0 (before ``alpha``).

        Returns:
            The number of entries applied.

        Raises:
            ReplayBufferError: if the lengths differ, an env id is out of range or a
                priority is negative or not finite.
        """
        env_ids = self._storage.check_env_ids(env_ids)
        positions = as_index_tensor("positions", positions)
        priorities = torch.as_tensor(priorities).detach().to("cpu", torch.float64).reshape(-1)
        if not env_ids.numel() == positions.numel() == priorities.numel():
            raise ReplayBufferError(
                f"update_priority needs as many env_ids, positions and priorities, got "
                f"{env_ids.numel()}, {positions.numel()} and {priorities.numel()}"
            )
        good = (priorities >= 0) & (priorities < math.inf)
        if not bool(good.all()):
            raise ReplayBufferError(
                f"priorities must be finite and >= 0, got {priorities[~good][:5].tolist()}"
            )
        pos = self._storage.positions[env_ids]
        held = (positions < pos) & (positions >= pos - self._max_length) & (positions >= 0)
        env_ids, positions, priorities = env_ids[held], positions[held], priorities[held]
        applied = env_ids.numel()
        if applied:
            flat = self._storage.flat_slots(env_ids, positions)
            self._tree.update(flat, priorities.pow(self._alpha))
            self._max_priority = max(self._max_priority, float(priorities.max()))
        return applied

    # ----------------------------------------------------------------- checkpoints

    def checkpoint_state(self) -> dict[str, Any]:
        """The sampler's part of a :class:`ReplayBuffer` checkpoint state.

        Returns:
            ``max_priority`` and ``priorities`` (a copy of the sum tree's leaves, i.e.
            priority^alpha per flat slot ``env * max_length + slot``, float64).
        """
        return {"max_priority": self._max_priority, "priorities": self._tree.leaf_values()}

    def load_checkpoint_state(self, state: dict[str, Any], *, positions: torch.Tensor) -> None:
        """Restores the priorities of ``state``, checked before anything changes.

        Saved priorities are re-exponentiated if ``state["priority_alpha"]`` differs
        from this sampler's; a state without priorities (a uniform buffer's) gives every
        held step priority 1.

        Args:
            state: a :class:`ReplayBuffer` checkpoint state (or this sampler's own
                :meth:`checkpoint_state`).
            positions: the (checked) write counters of the steps it holds.

        Raises:
            ReplayBufferError: if the saved priorities are malformed.
        """
        leaves = self._restored_priorities(state, positions)
        self._max_priority = float(state.get("max_priority", 1.0))
        self._tree.reset(leaves)

    def _restored_priorities(self, state: dict[str, Any], positions: torch.Tensor) -> torch.Tensor:
        """The checked sum-tree leaves for loading ``state``, without changing anything."""
        saved = state.get("priorities")
        if saved is None:
            held = positions.clamp(max=self._max_length)
            mask = torch.arange(self._max_length).unsqueeze(0) < held.unsqueeze(1)
            return mask.reshape(-1).to(torch.float64)
        capacity = self._tree.capacity
        if not (isinstance(saved, torch.Tensor) and saved.shape == (capacity,)):
            raise ReplayBufferError(f"The saved priorities must be a [{capacity}] tensor")
        saved = saved.to(torch.float64)
        if not bool(((saved >= 0) & (saved < math.inf)).all()):
            raise ReplayBufferError("The saved priorities must be finite and >= 0")
        saved_alpha = float(state.get("priority_alpha", self._alpha))
        if saved_alpha == self._alpha:
            return saved
        if saved_alpha == 0:
            return (saved > 0).to(torch.float64)
        return saved.pow(self._alpha / saved_alpha)
