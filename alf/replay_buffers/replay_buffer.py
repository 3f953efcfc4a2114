"""A replay buffer of per-environment rings, sampled as time-major sequences.

:class:`ReplayBuffer` composes a :class:`~alf.replay_buffers.ring_storage.RingStorage`
(the rings, their write counters and their checkpoint state) with a
:class:`~alf.replay_buffers.sampler.Sampler` of sequence starts (which keeps its own
state, e.g. priorities): a
:class:`~alf.replay_buffers.sequence_sampler.UniformSampler` or a
:class:`~alf.replay_buffers.prioritized_sampler.PrioritizedSampler`. The buffer checks
sizes and gathers the sampled steps; what to draw is the sampler's alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from alf import nest
from alf.config import configurable
from alf.data_structures import BatchInfo
from alf.replay_buffers.hindsight import HindsightRelabeller
from alf.replay_buffers.prioritized_sampler import check_priority_exponent
from alf.replay_buffers.ring_storage import RingStorage, check_ring_size
from alf.replay_buffers.sampler import Sampler, make_sampler
from alf.replay_buffers.sequence_sampler import check_sequence_args
from alf.replay_buffers.spec_description import (
    ReplayBufferError,
    describe_spec,
    spec_differences,
)

__all__ = ["ReplayBuffer", "ReplayBufferError", "describe_spec", "spec_differences"]


@configurable
class ReplayBuffer:
    """Fixed-capacity storage of experience from ``num_envs`` environments.

    Each call of :meth:`add_batch` appends one step to each of the environments it names
    (environments may be out of step with one another). :meth:`get_batch` samples
    sequences of consecutive steps of one environment, never crossing its write head,
    uniformly or by priority.

    Prioritized mode keeps a :class:`SumTree` over all ``num_envs * max_length`` slots
    holding ``priority ** priority_alpha``. A new step gets the largest priority given so
    far (starting at 1.0 and never lowered, so a run of small priorities does not starve
    new steps) and replaces the priority of the step it overwrites. A sequence is sampled
    by its start slot with probability proportional to its priority^alpha among the
    *valid* starts (those with ``batch_length`` held steps from there on): starts drawn
    too close to the head are redrawn for a few vectorized rounds, and any still left
    are drawn from the tree with the invalid slots temporarily set to 0, so the result is
    exact either way.

    Args:
        data_spec: nest (namedtuples, dicts, tuples) of :class:`TensorSpec` of one step
            of one environment (no batch dimension).
        num_envs: number of environments.
        max_length: capacity in steps per environment.
        prioritized: sample by priority instead of uniformly.
        priority_alpha: exponent applied to priorities (0 gives uniform sampling).
        priority_beta: exponent of the importance weights (0: all weights 1); can be
            changed at any time through :attr:`priority_beta`.
        enable_checkpoint: whether the trainer should include this buffer in its
            checkpoints (:meth:`checkpoint_state` works either way). Off by default: a
            full buffer is written with every checkpoint, :attr:`nbytes` each (e.g.
            about 0.2 GB for 1M MuJoCo Hopper transitions, several GB for Atari frames),
            times ``TrainerConfig.num_checkpoints`` on disk. Without it, a resumed run
            starts with an empty buffer (the trainer warns) and updates again once it
            holds ``TrainerConfig.initial_collect_steps`` new steps.
        hindsight: relabels every sampled batch with goals achieved later in its
            episodes (:class:`~alf.replay_buffers.hindsight.HindsightRelabeller`, HER;
            goal-conditioned environments only); None: batches are returned as stored.

    Raises:
        ReplayBufferError: a size or exponent out of range; ``hindsight`` on data that is
            not goal-conditioned (:class:`~alf.replay_buffers.hindsight.HindsightError`).
    """

    def __init__(
        self,
        *,
        data_spec: nest.Nest,
        num_envs: int,
        max_length: int = 100_000,
        prioritized: bool = False,
        priority_alpha: float = 0.6,
        priority_beta: float = 0.4,
        enable_checkpoint: bool = False,
        hindsight: HindsightRelabeller | None = None,
    ) -> None:
        check_ring_size(num_envs=num_envs, max_length=max_length)
        check_priority_exponent("priority_alpha", priority_alpha)
        if hindsight is not None:
            hindsight.check_spec(data_spec)
        self._hindsight = hindsight
        self._storage = RingStorage(data_spec=data_spec, num_envs=num_envs, max_length=max_length)
        self._alpha = float(priority_alpha)
        self.priority_beta = priority_beta
        self._enable_checkpoint = bool(enable_checkpoint)
        self._sampler = make_sampler(
            storage=self._storage, prioritized=prioritized, priority_alpha=priority_alpha
        )

    # ----------------------------------------------------------------- properties

    @property
    def data_spec(self) -> nest.Nest:
        """The nest of :class:`TensorSpec` of one step."""
        return self._storage.data_spec

    @property
    def num_envs(self) -> int:
        """Number of environments."""
        return self._storage.num_envs

    @property
    def max_length(self) -> int:
        """Capacity in steps per environment."""
        return self._storage.max_length

    @property
    def prioritized(self) -> bool:
        """Whether sampling is by priority."""
        return self._sampler.prioritized

    @property
    def sampler(self) -> Sampler:
        """The sampler of sequence starts (uniform or prioritized)."""
        return self._sampler

    @property
    def hindsight(self) -> HindsightRelabeller | None:
        """The relabeller of sampled batches (HER), or None."""
        return self._hindsight

    @property
    def priority_beta(self) -> float:
        """The exponent of the importance weights; may be set at any time."""
        return self._beta

    @priority_beta.setter
    def priority_beta(self, value: float) -> None:
        check_priority_exponent("priority_beta", value)
        self._beta = float(value)

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated storage (a full buffer's checkpoint is about this)."""
        return self._storage.nbytes

    @property
    def enable_checkpoint(self) -> bool:
        """Whether the trainer should save this buffer with its checkpoints."""
        return self._enable_checkpoint

    @property
    def positions(self) -> torch.Tensor:
        """A copy of the ``[num_envs]`` int64 write counters (steps ever added per env)."""
        return self._storage.positions.clone()

    @property
    def total_size(self) -> int:
        """Number of steps currently held, summed over all environments."""
        return self._storage.total_size

    def num_steps(self, env_ids: torch.Tensor | Sequence[int] | None = None) -> torch.Tensor:
        """Steps currently held per environment, ``min(pos, max_length)``.

        Args:
            env_ids: the environments to report (default: all, in order).

        Returns:
            An int64 tensor with one count per entry of ``env_ids``; its sum over all
            environments is :attr:`total_size`.
        """
        return self._storage.num_steps(env_ids)

    # ----------------------------------------------------------------- adding

    def add_batch(self, batch: nest.Nest, env_ids: torch.Tensor | None = None) -> None:
        """Appends one step to each of the environments ``env_ids``.

        The batch is checked completely before anything is written. A leaf whose dtype
        differs from its spec is cast when ``torch.can_cast`` allows it (the same kind or
        a wider one: float64 -> float32, int -> float, bool -> int; int64 -> int32 too);
        float into an integer field, or anything into bool, is refused.

        Args:
            batch: nest matching ``data_spec`` whose leaves are ``[N, *spec.shape]``;
                row ``i`` is the next step of environment ``env_ids[i]``.
            env_ids: ``[N]`` distinct environment indices; default all environments in
                order (then ``N`` must be ``num_envs``).

        Raises:
            ReplayBufferError: naming the field for a missing or extra field, a wrong
                shape or a dtype that cannot be stored without loss; or for bad env_ids.
        """
        flat = self._storage.append(batch, env_ids)
        if flat is not None:
            self._sampler.record_new(flat)

    # ----------------------------------------------------------------- sampling

    def get_batch(
        self,
        batch_size: int,
        batch_length: int,
        generator: torch.Generator | None = None,
        *,
        anchor: int = 0,
    ) -> tuple[nest.Nest, BatchInfo]:
        """Samples ``batch_size`` sequences of ``batch_length`` consecutive held steps.

        Each sequence lies within one environment and starts at a position ``p`` in
        ``[max(0, pos - max_length), pos - batch_length]``, so it never crosses the
        write head. Uniform mode draws every valid ``(env, start)`` pair with equal
        probability (with replacement); prioritized mode draws a start with probability
        ``P(i)`` proportional to its priority^alpha among the valid starts.

        ``importance_weights`` are ``(N * P(i)) ** -beta`` divided by their maximum over
        the batch (``N`` the number of valid starts), so the largest weight in a batch is
        1; after that normalisation they equal ``(q_i / min_j q_j) ** -beta`` with
        ``q = priority^alpha`` of the sampled starts. Uniform mode gives all ones.

        Args:
            batch_size: number of sequences ``B``.
            batch_length: steps per sequence ``T``, in ``[1, max_length]``.
            generator: random generator (torch's default one if None).
            anchor: with :attr:`hindsight`: the row of each sequence whose transition
                relabelled goals follow (the first row a loss is computed on), in
                ``[0, batch_length)``.

        Returns:
            A time-major nest of ``[T, B, ...]`` tensors (relabelled, with
            :attr:`hindsight`) and a :class:`BatchInfo` with each sequence's env id and
            absolute start position.

        Raises:
            ReplayBufferError: on bad sizes, when no environment holds ``batch_length``
                steps, or (prioritized) when every valid start has priority 0.
        """
        check_sequence_args(
            batch_size=batch_size, batch_length=batch_length, max_length=self.max_length
        )
        env, start, weights = self._sampler.sample(
            batch_size=batch_size,
            batch_length=batch_length,
            beta=self._beta,
            generator=generator,
        )
        data = self._storage.gather(env, start, batch_length)
        if self._hindsight is not None:
            if not 0 <= anchor < batch_length:
                raise ReplayBufferError(
                    f"anchor must be in [0, batch_length={batch_length}), got {anchor}"
                )
            data = self._hindsight.relabel(
                self._storage, data, env=env, start=start, anchor=anchor, generator=generator
            )
        return data, BatchInfo(env_ids=env, positions=start, importance_weights=weights)

    def update_priority(
        self,
        env_ids: torch.Tensor,
        positions: torch.Tensor,
        priorities: torch.Tensor,
    ) -> int:
        """Sets the priorities of the sequences starting at ``(env_ids, positions)``.

        Entries whose step is no longer held (overwritten since it was sampled) or was
        never written are ignored silently. If a step appears more than once, its last
        priority wins. The largest priority applied becomes the priority of new steps if
        it exceeds the previous one.

        Args:
            env_ids: ``[n]`` environment of each entry (as in :class:`BatchInfo`).
            positions: ``[n]`` absolute step numbers (as in :class:`BatchInfo`).
            priorities: ``[n]`` new priorities, finite and >= 0 (before ``alpha``).

        Returns:
            The number of entries applied.

        Raises:
            ReplayBufferError: if the buffer is not prioritized, the lengths differ, an
                env id is out of range or a priority is negative or not finite.
        """
        return self._sampler.update_priority(env_ids, positions, priorities)

    def overwrite_newest(self, path: str, value: float | int) -> None:
        """Sets field ``path`` (as named by :func:`describe_spec`) of the newest held step
        of every environment to ``value``.

        The trainer uses it after restoring a buffer, to mark each environment's last
        stored step as the end (truncation) of its episode: the restarted environments
        begin new episodes, which must not read as continuations of the stored ones.
        """
        self._storage.overwrite_newest(path, value)

    # ----------------------------------------------------------------- whole buffer

    def gather_all(self) -> nest.Nest:
        """Every held step, oldest first, as a time-major nest ``[T, num_envs, ...]``.

        Raises:
            ReplayBufferError: if the environments hold different numbers of steps.
        """
        return self._storage.gather_all()

    def clear(self) -> None:
        """Forgets every step: counters to 0, priorities to 0, the max priority to 1.

        The storage is not zeroed; its old contents are simply no longer reachable.
        """
        self._storage.clear()
        self._sampler.clear()

    # ----------------------------------------------------------------- checkpoints

    def checkpoint_state(self) -> dict[str, Any]:
        """The buffer's contents as plain data for ``torch.save``.

        Loadable with ``torch.load(weights_only=True)``: it holds only tensors, dicts,
        lists, tuples, str, int, float, bool and None. The storage tensors are the
        buffer's own (not copies): save the state before adding more steps.

        Returns:
            A dict with ``num_envs``, ``max_length``, ``spec`` (:func:`describe_spec`),
            ``positions`` (``[num_envs]`` int64), ``storage`` (path -> ``[num_envs,
            max_length, *shape]`` tensor), ``prioritized``, ``priority_alpha``,
            ``max_priority`` and ``priorities`` (the sum tree's leaves, i.e. priority^alpha
            per flat slot ``env * max_length + slot``, float64; None when uniform).
        """
        return {
            "version": 1,
            **self._storage.checkpoint_state(),
            "prioritized": self._sampler.prioritized,
            "priority_alpha": self._alpha,
            **self._sampler.checkpoint_state(),
        }

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restores a state made by :meth:`checkpoint_state`, exactly.

        The state is checked completely before anything changes. Priorities follow the
        saved ones when both buffers are prioritized (re-exponentiated if
        ``priority_alpha`` changed); a uniform state loaded into a prioritized buffer gives
        every held step priority 1.

        Raises:
            ReplayBufferError: naming every difference when ``num_envs``, ``max_length``
                or the fields (path: saved shape/dtype vs expected; missing or extra
                fields) do not match, or when a key or tensor is missing or malformed.
        """
        positions = self._storage.validate_checkpoint_state(state)
        self._sampler.load_checkpoint_state(state, positions=positions)  # checks first
        self._storage.restore_checkpoint_state(state)  # cannot fail once validated
