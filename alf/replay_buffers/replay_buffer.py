"""A replay buffer of per-environment rings, sampled as time-major sequences.

Every environment ``e`` owns a ring of ``max_length`` slots and an absolute write counter
``pos[e]``: step number ``p`` of ``e`` lives in slot ``p % max_length``, and ``e`` holds
the steps ``[max(0, pos[e] - max_length), pos[e])``. Storage is preallocated from the
data spec, one ``[num_envs, max_length, *shape]`` tensor per field.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optree
import torch

from alf import nest
from alf.config import configurable
from alf.data_structures import BatchInfo
from alf.replay_buffers.spec_description import (
    ReplayBufferError,
    describe_spec,
    dtype_name,
    leaf_paths,
    show_field,
    spec_differences,
)
from alf.replay_buffers.sum_tree import SumTree
from alf.tensor_specs import TensorSpec

__all__ = ["ReplayBuffer", "ReplayBufferError", "describe_spec", "spec_differences"]

_REJECTION_ROUNDS = 4
"""Rounds of redrawing prioritized starts that are too close to the write head before
falling back to masking those slots out of the sum tree."""


def _as_index_tensor(name: str, value: Any) -> torch.Tensor:
    tensor = torch.as_tensor(value)
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise ReplayBufferError(f"{name} must hold integers, got dtype {tensor.dtype}")
    return tensor.reshape(-1).to(torch.int64)


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
            checkpoints (:meth:`checkpoint_state` works either way).
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
    ) -> None:
        if num_envs < 1:
            raise ReplayBufferError(f"num_envs must be >= 1, got {num_envs}")
        if max_length < 1:
            raise ReplayBufferError(f"max_length must be >= 1, got {max_length}")
        if not (priority_alpha >= 0 and math.isfinite(priority_alpha)):
            raise ReplayBufferError(f"priority_alpha must be finite and >= 0, got {priority_alpha}")
        self._description = describe_spec(data_spec)
        self._paths = [path for path, _, _ in self._description]
        if not self._paths:
            raise ReplayBufferError("data_spec holds no TensorSpec: there is nothing to store")
        if len(set(self._paths)) != len(self._paths):
            raise ReplayBufferError(f"data_spec has ambiguous field paths: {self._paths}")
        self._data_spec = data_spec
        self._specs: list[TensorSpec] = nest.flatten(data_spec)
        self._treespec = optree.tree_structure(data_spec, namespace="alf")
        self._num_envs = int(num_envs)
        self._max_length = int(max_length)
        self._storage = [
            torch.zeros((self._num_envs, self._max_length, *spec.shape), dtype=spec.dtype)
            for spec in self._specs
        ]
        # The same memory with (env, slot) flattened, for index_copy_/index_select.
        self._flat_storage = [s.view(-1, *s.shape[2:]) for s in self._storage]
        self._pos = torch.zeros(self._num_envs, dtype=torch.int64)
        self._all_envs = torch.arange(self._num_envs)
        self._env_base = self._all_envs * self._max_length
        self._lossless: dict[tuple[torch.dtype, torch.dtype], bool] = {}
        self._prioritized = bool(prioritized)
        self._alpha = float(priority_alpha)
        self.priority_beta = priority_beta
        self._enable_checkpoint = bool(enable_checkpoint)
        self._max_priority = 1.0
        self._tree = SumTree(capacity=self._num_envs * self._max_length) if prioritized else None

    # ----------------------------------------------------------------- properties

    @property
    def data_spec(self) -> nest.Nest:
        """The nest of :class:`TensorSpec` of one step."""
        return self._data_spec

    @property
    def num_envs(self) -> int:
        """Number of environments."""
        return self._num_envs

    @property
    def max_length(self) -> int:
        """Capacity in steps per environment."""
        return self._max_length

    @property
    def prioritized(self) -> bool:
        """Whether sampling is by priority."""
        return self._prioritized

    @property
    def priority_alpha(self) -> float:
        """The exponent applied to priorities."""
        return self._alpha

    @property
    def priority_beta(self) -> float:
        """The exponent of the importance weights; may be set at any time."""
        return self._beta

    @priority_beta.setter
    def priority_beta(self, value: float) -> None:
        if not (value >= 0 and math.isfinite(value)):
            raise ReplayBufferError(f"priority_beta must be finite and >= 0, got {value}")
        self._beta = float(value)

    @property
    def enable_checkpoint(self) -> bool:
        """Whether the trainer should save this buffer with its checkpoints."""
        return self._enable_checkpoint

    @property
    def positions(self) -> torch.Tensor:
        """A copy of the ``[num_envs]`` int64 write counters (steps ever added per env)."""
        return self._pos.clone()

    @property
    def total_size(self) -> int:
        """Number of steps currently held, summed over all environments."""
        return int(self._pos.clamp(max=self._max_length).sum())

    def num_steps(self, env_ids: torch.Tensor | Sequence[int] | None = None) -> torch.Tensor:
        """Steps currently held per environment, ``min(pos, max_length)``.

        Args:
            env_ids: the environments to report (default: all, in order).

        Returns:
            An int64 tensor with one count per entry of ``env_ids``; its sum over all
            environments is :attr:`total_size`.
        """
        held = self._pos.clamp(max=self._max_length)
        if env_ids is not None:
            held = held[self._check_env_ids(env_ids)]
        return held

    # ----------------------------------------------------------------- adding

    def _check_env_ids(self, env_ids: Any) -> torch.Tensor:
        env_ids = _as_index_tensor("env_ids", env_ids)
        if env_ids.numel():
            low, high = torch.aminmax(env_ids)
            if low < 0 or high >= self._num_envs:
                raise ReplayBufferError(
                    f"env_ids must lie in [0, {self._num_envs}), got {env_ids.tolist()}"
                )
        return env_ids

    def _structure_error(self, batch: nest.Nest) -> ReplayBufferError:
        try:
            got = leaf_paths(batch)
        except Exception:  # an unflattenable batch: report its structure only
            got = []
        missing = [p for p in self._paths if p not in got]
        extra = [p for p in got if p not in self._paths]
        parts = []
        if missing:
            parts.append("missing field(s) " + ", ".join(show_field(p) for p in missing))
        if extra:
            parts.append("unexpected field(s) " + ", ".join(show_field(p) for p in extra))
        if not parts:
            structure = optree.tree_structure(batch, namespace="alf")
            parts.append(f"containers differ: got {structure}, expected {self._treespec}")
        return ReplayBufferError(
            "ReplayBuffer.add_batch: the batch does not match data_spec: " + "; ".join(parts)
        )

    def _can_store(self, src: torch.dtype, dst: torch.dtype) -> bool:
        key = (src, dst)
        if key not in self._lossless:
            self._lossless[key] = torch.can_cast(src, dst)
        return self._lossless[key]

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
        leaves, treespec = optree.tree_flatten(batch, namespace="alf")
        if treespec != self._treespec:
            raise self._structure_error(batch)
        if env_ids is None:
            n = self._num_envs
        else:
            env_ids = self._check_env_ids(env_ids)
            n = env_ids.numel()
            if n > 1 and int(torch.bincount(env_ids, minlength=self._num_envs).max()) > 1:
                raise ReplayBufferError(
                    f"env_ids must be distinct within one add_batch call, got {env_ids.tolist()}"
                )
        checked = []
        for path, spec, leaf in zip(self._paths, self._specs, leaves, strict=True):
            if not isinstance(leaf, torch.Tensor):
                try:
                    leaf = torch.as_tensor(leaf)
                except (TypeError, ValueError, RuntimeError) as e:
                    raise ReplayBufferError(
                        f"ReplayBuffer.add_batch: field {show_field(path)} is not a tensor: {e}"
                    ) from None
            if leaf.shape != (n, *spec.shape):
                raise ReplayBufferError(
                    f"ReplayBuffer.add_batch: field {show_field(path)} has shape "
                    f"{tuple(leaf.shape)}, expected {(n, *spec.shape)} "
                    f"([N, *spec.shape] with N={n})"
                )
            if leaf.dtype != spec.dtype and not self._can_store(leaf.dtype, spec.dtype):
                raise ReplayBufferError(
                    f"ReplayBuffer.add_batch: field {show_field(path)} has dtype "
                    f"{dtype_name(leaf.dtype)}, which cannot be stored without loss in its "
                    f"{dtype_name(spec.dtype)} spec"
                )
            checked.append(leaf)
        if n == 0:
            return
        if env_ids is None:
            flat = self._env_base + self._pos % self._max_length
        else:
            flat = self._env_base[env_ids] + self._pos[env_ids] % self._max_length
        for storage, spec, leaf in zip(self._flat_storage, self._specs, checked, strict=True):
            storage.index_copy_(0, flat, leaf.to(device=storage.device, dtype=spec.dtype))
        if env_ids is None:
            self._pos += 1
        else:
            self._pos[env_ids] += 1
        if self._tree is not None:
            value = torch.full((n,), self._max_priority**self._alpha, dtype=torch.float64)
            self._tree._assign_unique(flat, value)

    # ----------------------------------------------------------------- sampling

    def _gather(self, env: torch.Tensor, start: torch.Tensor, length: int) -> nest.Nest:
        """``[length, B, ...]`` nest of the steps ``start .. start+length-1`` of ``env``."""
        steps = start.unsqueeze(0) + torch.arange(length).unsqueeze(1)
        flat = (steps % self._max_length + self._env_base[env].unsqueeze(0)).reshape(-1)
        b = env.shape[0]
        leaves = [
            storage.index_select(0, flat).view(length, b, *storage.shape[1:])
            for storage in self._flat_storage
        ]
        return nest.pack_sequence_as(self._data_spec, leaves)

    def _check_batch_args(self, batch_size: int, batch_length: int) -> None:
        if batch_size < 1:
            raise ReplayBufferError(f"batch_size must be >= 1, got {batch_size}")
        if not 1 <= batch_length <= self._max_length:
            raise ReplayBufferError(
                f"batch_length must be in [1, max_length={self._max_length}], got {batch_length}"
            )

    def _not_enough_error(self, batch_length: int) -> ReplayBufferError:
        held = int(self._pos.clamp(max=self._max_length).max())
        return ReplayBufferError(
            f"ReplayBuffer holds at most {held} steps per environment; cannot sample "
            f"sequences of {batch_length} steps"
        )

    def get_batch(
        self, batch_size: int, batch_length: int, generator: torch.Generator | None = None
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

        Returns:
            A time-major nest of ``[T, B, ...]`` tensors and a :class:`BatchInfo` with
            each sequence's env id and absolute start position.

        Raises:
            ReplayBufferError: on bad sizes, when no environment holds ``batch_length``
                steps, or (prioritized) when every valid start has priority 0.
        """
        self._check_batch_args(batch_size, batch_length)
        held = self._pos.clamp(max=self._max_length)
        counts = (held - (batch_length - 1)).clamp(min=0)
        if self._tree is None:
            cum = counts.cumsum(0)
            total = int(cum[-1])
            if total == 0:
                raise self._not_enough_error(batch_length)
            r = torch.randint(total, (batch_size,), generator=generator)
            env = torch.searchsorted(cum, r, right=True)
            # start = oldest held step of env + (r - number of pairs of the envs before)
            start = r + (self._pos - held - cum + counts)[env]
            weights = torch.ones(batch_size)
        else:
            if int(counts.max()) == 0:
                raise self._not_enough_error(batch_length)
            env, start, flat = self._sample_prioritized(batch_size, batch_length, generator)
            q = self._tree.get(flat)
            weights = (q / q.min()).pow(-self._beta).to(torch.float32)
        data = self._gather(env, start, batch_length)
        return data, BatchInfo(env_ids=env, positions=start, importance_weights=weights)

    def _starts(
        self, flat: torch.Tensor, batch_length: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Env, absolute position and validity as a sequence start of slots ``flat``."""
        env = flat // self._max_length
        slot = flat - env * self._max_length
        last = self._pos[env] - 1
        position = last - (last - slot) % self._max_length
        valid = position <= last + 1 - batch_length
        return env, position, valid

    def _invalid_start_slots(self, batch_length: int) -> torch.Tensor:
        """Flat slots of the held steps too close to the head to start a sequence."""
        back = torch.arange(1, batch_length)
        steps = self._pos.unsqueeze(1) - back.unsqueeze(0)  # [E, T-1]
        held = self._pos.clamp(max=self._max_length)
        keep = steps >= (self._pos - held).unsqueeze(1)
        flat = steps % self._max_length + self._env_base.unsqueeze(1)
        return flat[keep]

    def _sample_prioritized(
        self, batch_size: int, batch_length: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        tree = self._tree
        assert tree is not None
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
        if self._tree is None:
            raise ReplayBufferError(
                "update_priority needs a prioritized ReplayBuffer (prioritized=True); "
                "this one samples uniformly"
            )
        env_ids = self._check_env_ids(env_ids)
        positions = _as_index_tensor("positions", positions)
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
        pos = self._pos[env_ids]
        held = (positions < pos) & (positions >= pos - self._max_length) & (positions >= 0)
        env_ids, positions, priorities = env_ids[held], positions[held], priorities[held]
        applied = env_ids.numel()
        if applied:
            flat = self._env_base[env_ids] + positions % self._max_length
            self._tree.update(flat, priorities.pow(self._alpha))
            self._max_priority = max(self._max_priority, float(priorities.max()))
        return applied

    def overwrite_newest(self, path: str, value: float | int) -> None:
        """Sets field ``path`` (as named by :func:`describe_spec`) of the newest held step
        of every environment to ``value``.

        The trainer uses it after restoring a buffer, to mark each environment's last
        stored step as the end (truncation) of its episode: the restarted environments
        begin new episodes, which must not read as continuations of the stored ones.
        """
        if path not in self._paths:
            raise ReplayBufferError(f"No field {show_field(path)}; fields: {self._paths}")
        held = self._pos > 0
        if not bool(held.any()):
            return
        flat = self._env_base[held] + (self._pos[held] - 1) % self._max_length
        self._flat_storage[self._paths.index(path)][flat] = value

    # ----------------------------------------------------------------- whole buffer

    def gather_all(self) -> nest.Nest:
        """Every held step, oldest first, as a time-major nest ``[T, num_envs, ...]``.

        Raises:
            ReplayBufferError: if the environments hold different numbers of steps.
        """
        held = self._pos.clamp(max=self._max_length)
        if bool((held != held[0]).any()):
            raise ReplayBufferError(
                "gather_all needs every environment to hold the same number of steps, "
                f"but they hold {held.tolist()}"
            )
        length = int(held[0])
        return self._gather(self._all_envs, self._pos - length, length)

    def clear(self) -> None:
        """Forgets every step: counters to 0, priorities to 0, the max priority to 1.

        The storage is not zeroed; its old contents are simply no longer reachable.
        """
        self._pos.zero_()
        self._max_priority = 1.0
        if self._tree is not None:
            self._tree.reset()

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
            "num_envs": self._num_envs,
            "max_length": self._max_length,
            "spec": list(self._description),
            "positions": self._pos.clone(),
            "storage": dict(zip(self._paths, self._storage, strict=True)),
            "prioritized": self._prioritized,
            "priority_alpha": self._alpha,
            "max_priority": self._max_priority,
            "priorities": self._tree.leaf_values() if self._tree is not None else None,
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
        required = ("num_envs", "max_length", "spec", "positions", "storage")
        missing = [k for k in required if k not in state]
        if missing:
            raise ReplayBufferError(f"Not a ReplayBuffer state: missing key(s) {missing}")
        problems = []
        if state["num_envs"] != self._num_envs:
            problems.append(f"num_envs: saved {state['num_envs']} vs expected {self._num_envs}")
        if state["max_length"] != self._max_length:
            problems.append(
                f"max_length: saved {state['max_length']} vs expected {self._max_length}"
            )
        problems += spec_differences(state["spec"], self._description)
        if problems:
            raise ReplayBufferError(
                "The saved replay buffer does not fit this one:\n  " + "\n  ".join(problems)
            )
        storage = state["storage"]
        for path, tensor in zip(self._paths, self._storage, strict=True):
            saved = storage.get(path) if isinstance(storage, dict) else None
            if not isinstance(saved, torch.Tensor):
                raise ReplayBufferError(
                    f"The saved replay buffer has no tensor for {show_field(path)}"
                )
            if saved.shape != tensor.shape or saved.dtype != tensor.dtype:
                raise ReplayBufferError(
                    f"The saved tensor of {show_field(path)} has shape {tuple(saved.shape)} and "
                    f"dtype {dtype_name(saved.dtype)}, expected {tuple(tensor.shape)} and "
                    f"{dtype_name(tensor.dtype)}"
                )
        positions = state["positions"]
        if not (
            isinstance(positions, torch.Tensor)
            and positions.shape == (self._num_envs,)
            and positions.dtype == torch.int64
            and bool((positions >= 0).all())
        ):
            raise ReplayBufferError(
                f"The saved positions must be a [{self._num_envs}] int64 tensor of counters >= 0"
            )
        priorities = None
        if self._tree is not None:
            priorities = self._restored_priorities(state, positions)
        for path, tensor in zip(self._paths, self._storage, strict=True):
            tensor.copy_(storage[path])
        self._pos.copy_(positions)
        if self._tree is not None:
            self._max_priority = float(state.get("max_priority", 1.0))
            self._tree.reset(priorities)

    def _restored_priorities(self, state: dict[str, Any], positions: torch.Tensor) -> torch.Tensor:
        """The sum-tree leaves for a prioritized buffer loading ``state``."""
        saved = state.get("priorities")
        if saved is None:
            held = positions.clamp(max=self._max_length)
            mask = torch.arange(self._max_length).unsqueeze(0) < held.unsqueeze(1)
            return mask.reshape(-1).to(torch.float64)
        capacity = self._num_envs * self._max_length
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
