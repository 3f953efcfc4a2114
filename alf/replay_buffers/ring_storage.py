"""Ring storage of per-environment steps, the memory under :class:`ReplayBuffer`.

Every environment ``e`` owns a ring of ``max_length`` slots and an absolute write counter
``pos[e]``: step number ``p`` of ``e`` lives in slot ``p % max_length``, and ``e`` holds
the steps ``[max(0, pos[e] - max_length), pos[e])``. Storage is preallocated from the
data spec, one ``[num_envs, max_length, *shape]`` tensor per field. Slot ``s`` of
environment ``e`` is also addressed by its flat index ``e * max_length + s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optree
import torch

from alf import nest
from alf.replay_buffers.spec_description import (
    ReplayBufferError,
    SpecDescription,
    describe_spec,
    dtype_name,
    leaf_paths,
    show_field,
    spec_differences,
)
from alf.tensor_specs import TensorSpec

__all__ = ["RingStorage", "as_index_tensor", "check_ring_size"]


def as_index_tensor(name: str, value: Any) -> torch.Tensor:
    """``value`` as a flat int64 tensor of indices.

    Args:
        name: what ``value`` is, for the error message.
        value: a tensor, sequence or scalar of integers.

    Returns:
        A 1-D int64 tensor.

    Raises:
        ReplayBufferError: if ``value`` holds floats, complex numbers or bools.
    """
    tensor = torch.as_tensor(value)
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise ReplayBufferError(f"{name} must hold integers, got dtype {tensor.dtype}")
    return tensor.reshape(-1).to(torch.int64)


def check_ring_size(*, num_envs: int, max_length: int) -> None:
    """Checks the dimensions of a ring storage.

    Args:
        num_envs: number of environments, >= 1.
        max_length: capacity in steps per environment, >= 1.

    Raises:
        ReplayBufferError: naming the first argument out of range.
    """
    if num_envs < 1:
        raise ReplayBufferError(f"num_envs must be >= 1, got {num_envs}")
    if max_length < 1:
        raise ReplayBufferError(f"max_length must be >= 1, got {max_length}")


class RingStorage:
    """Preallocated per-environment rings of steps with absolute write counters.

    It checks and writes rows, reads sequences back time-major, and saves and restores
    its contents (the ``num_envs``, ``max_length``, ``spec``, ``positions`` and
    ``storage`` entries of a :class:`ReplayBuffer` checkpoint state).

    Args:
        data_spec: nest of :class:`TensorSpec` of one step of one environment.
        num_envs: number of environments.
        max_length: capacity in steps per environment.

    Raises:
        ReplayBufferError: on a size below 1, or a spec with no field or with ambiguous
            field paths.
    """

    def __init__(self, *, data_spec: nest.Nest, num_envs: int, max_length: int) -> None:
        check_ring_size(num_envs=num_envs, max_length=max_length)
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

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated storage (a full buffer's checkpoint is about this)."""
        return sum(t.numel() * t.element_size() for t in self._storage)

    @property
    def data_spec(self) -> nest.Nest:
        """The nest of :class:`TensorSpec` of one step."""
        return self._data_spec

    @property
    def description(self) -> SpecDescription:
        """The spec as plain data (:func:`describe_spec`)."""
        return self._description

    @property
    def num_envs(self) -> int:
        """Number of environments."""
        return self._num_envs

    @property
    def max_length(self) -> int:
        """Capacity in steps per environment."""
        return self._max_length

    @property
    def positions(self) -> torch.Tensor:
        """The live ``[num_envs]`` int64 write counters (not a copy: do not modify)."""
        return self._pos

    @property
    def total_size(self) -> int:
        """Number of steps currently held, summed over all environments."""
        return int(self._pos.clamp(max=self._max_length).sum())

    def num_steps(self, env_ids: torch.Tensor | Sequence[int] | None = None) -> torch.Tensor:
        """Steps currently held per environment, ``min(pos, max_length)``.

        Args:
            env_ids: the environments to report (default: all, in order).

        Returns:
            An int64 tensor with one count per entry of ``env_ids``.
        """
        held = self._pos.clamp(max=self._max_length)
        if env_ids is not None:
            held = held[self.check_env_ids(env_ids)]
        return held

    def check_env_ids(self, env_ids: Any) -> torch.Tensor:
        """``env_ids`` as a flat int64 tensor, checked to lie in ``[0, num_envs)``.

        Args:
            env_ids: a tensor, sequence or scalar of environment indices.

        Returns:
            A 1-D int64 tensor.

        Raises:
            ReplayBufferError: on non-integer or out-of-range ids.
        """
        env_ids = as_index_tensor("env_ids", env_ids)
        if env_ids.numel():
            low, high = torch.aminmax(env_ids)
            if low < 0 or high >= self._num_envs:
                raise ReplayBufferError(
                    f"env_ids must lie in [0, {self._num_envs}), got {env_ids.tolist()}"
                )
        return env_ids

    def flat_slots(self, env_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Flat indices ``env * max_length + position % max_length`` (broadcasting).

        Args:
            env_ids: environment indices.
            positions: absolute step numbers, broadcastable against ``env_ids``.

        Returns:
            The int64 flat slot of each step.
        """
        return self._env_base[env_ids] + positions % self._max_length

    # ----------------------------------------------------------------- writing

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

    def append(self, batch: nest.Nest, env_ids: torch.Tensor | None = None) -> torch.Tensor | None:
        """Checks ``batch`` completely, then writes row ``i`` as the next step of
        environment ``env_ids[i]`` (see :meth:`ReplayBuffer.add_batch`).

        Args:
            batch: nest matching ``data_spec`` whose leaves are ``[N, *spec.shape]``.
            env_ids: ``[N]`` distinct environment indices; default all in order.

        Returns:
            The ``[N]`` flat slots written, or None when ``N`` is 0.

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
            env_ids = self.check_env_ids(env_ids)
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
            return None
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
        return flat

    def overwrite_newest(self, path: str, value: float | int) -> None:
        """Sets field ``path`` of the newest held step of every environment to ``value``.

        Args:
            path: a field path as named by :func:`describe_spec`.
            value: the value to write.

        Raises:
            ReplayBufferError: if there is no field ``path``.
        """
        if path not in self._paths:
            raise ReplayBufferError(f"No field {show_field(path)}; fields: {self._paths}")
        held = self._pos > 0
        if not bool(held.any()):
            return
        flat = self._env_base[held] + (self._pos[held] - 1) % self._max_length
        self._flat_storage[self._paths.index(path)][flat] = value

    def clear(self) -> None:
        """Sets every write counter to 0 (the memory keeps its now unreachable contents)."""
        self._pos.zero_()

    # ----------------------------------------------------------------- reading

    def gather(self, env: torch.Tensor, start: torch.Tensor, length: int) -> nest.Nest:
        """The steps ``start .. start + length - 1`` of environments ``env``.

        Args:
            env: ``[B]`` environment indices.
            start: ``[B]`` absolute step numbers of the first step of each sequence.
            length: steps per sequence ``T``.

        Returns:
            A time-major nest of ``[T, B, ...]`` tensors.
        """
        steps = start.unsqueeze(0) + torch.arange(length).unsqueeze(1)
        flat = (steps % self._max_length + self._env_base[env].unsqueeze(0)).reshape(-1)
        b = env.shape[0]
        leaves = [
            storage.index_select(0, flat).view(length, b, *storage.shape[1:])
            for storage in self._flat_storage
        ]
        return nest.pack_sequence_as(self._data_spec, leaves)

    def gather_field(self, path: str, env: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Field ``path`` of the steps ``positions`` of environments ``env``.

        Args:
            path: a field path as named by :func:`describe_spec`.
            env: environment indices, of the shape of ``positions``.
            positions: absolute step numbers of held steps.

        Returns:
            A tensor of shape ``positions.shape + field shape``.

        Raises:
            ReplayBufferError: if there is no field ``path``.
        """
        if path not in self._paths:
            raise ReplayBufferError(f"No field {show_field(path)}; fields: {self._paths}")
        storage = self._flat_storage[self._paths.index(path)]
        flat = self._env_base[env] + positions % self._max_length
        return storage.index_select(0, flat.reshape(-1)).view(*flat.shape, *storage.shape[1:])

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
        return self.gather(self._all_envs, self._pos - length, length)

    # ----------------------------------------------------------------- checkpoints

    def checkpoint_state(self) -> dict[str, Any]:
        """The storage's part of a :class:`ReplayBuffer` checkpoint state.

        Returns:
            A dict with ``num_envs``, ``max_length``, ``spec``, ``positions`` (a copy) and
            ``storage`` (path -> the storage's own ``[num_envs, max_length, *shape]``
            tensor), in that order.
        """
        return {
            "num_envs": self._num_envs,
            "max_length": self._max_length,
            "spec": list(self._description),
            "positions": self._pos.clone(),
            "storage": dict(zip(self._paths, self._storage, strict=True)),
        }

    def validate_checkpoint_state(self, state: dict[str, Any]) -> torch.Tensor:
        """Checks the storage's part of ``state`` without changing anything.

        Args:
            state: a dict made by :meth:`ReplayBuffer.checkpoint_state`.

        Returns:
            The saved ``[num_envs]`` int64 write counters.

        Raises:
            ReplayBufferError: naming every difference when ``num_envs``, ``max_length``
                or the fields do not match, or when a key or tensor is missing or
                malformed.
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
        return positions

    def restore_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Copies the saved steps and counters of ``state`` into this storage.

        Args:
            state: a dict already checked by :meth:`validate_checkpoint_state`.
        """
        storage = state["storage"]
        for path, tensor in zip(self._paths, self._storage, strict=True):
            tensor.copy_(storage[path])
        self._pos.copy_(state["positions"])
