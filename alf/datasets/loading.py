"""A dataset as an algorithm's offline data: checked against its specs, then held as a
:class:`~alf.replay_buffers.DatasetBuffer` in the ``[T+1, B]`` experience layout.

Each episode of ``T`` transitions becomes ``T + 1`` rows: FIRST, MID..., LAST; the
reward of row ``t`` is the one received on arriving at observation ``t`` (0 at FIRST);
the last row's discount is 0 when the episode terminated and 1 when it was truncated
(time limit, or the end of the data: values bootstrap there). An episode whose last
step is neither terminated nor truncated (a dataset cut mid-episode) counts as
truncated. Fields a dataset does not hold (``rollout_info``, ``state``) are zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from alf import nest
from alf.data_structures import Experience
from alf.datasets.minari_format import DatasetError, DatasetInfo, Episode, read_episodes, read_info
from alf.replay_buffers import DatasetBuffer, ReplayBufferError
from alf.replay_buffers.spec_description import leaf_paths
from alf.tensor_specs import BoundedTensorSpec, TensorSpec, UnsupportedSpaceError, from_gym_space

__all__ = ["LoadedDataset", "check_spaces", "load_dataset", "load_datasets"]


@dataclass(frozen=True)
class LoadedDataset:
    """A dataset loaded as offline data.

    Attributes:
        info: its metadata.
        buffer: its episodes in the experience layout.
        raw_nbytes: bytes of its arrays as read (observations, actions, rewards,
            terminations, truncations), the figure ``buffer.nbytes`` compares with.
    """

    info: DatasetInfo
    buffer: DatasetBuffer
    raw_nbytes: int


def _where(kind: str, path: str) -> str:
    return kind + "".join(f"[{part!r}]" for part in path.split(".") if part) if path else kind


def _bounds_equal(a: Any, b: Any, shape: tuple[int, ...]) -> bool:
    x = np.broadcast_to(np.asarray(a, dtype=np.float64), shape)
    y = np.broadcast_to(np.asarray(b, dtype=np.float64), shape)
    return bool(np.allclose(x, y, rtol=1e-6, atol=0.0, equal_nan=True))


def _leaf_mismatch(kind: str, path: str, got: TensorSpec, want: TensorSpec) -> str | None:
    where = _where(kind, path)
    if tuple(got.shape) != tuple(want.shape):
        return f"{where} has shape {tuple(got.shape)}, the run's has {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"{where} has dtype {got.dtype}, the run's has {want.dtype}"
    if isinstance(got, BoundedTensorSpec) and isinstance(want, BoundedTensorSpec):
        shape = tuple(want.shape)
        for name in ("minimum", "maximum"):
            mine, theirs = getattr(got, name), getattr(want, name)
            if not _bounds_equal(mine, theirs, shape):
                return (
                    f"{where} has {name} {np.asarray(mine).tolist()}, the run's has "
                    f"{np.asarray(theirs).tolist()}"
                )
    return None


def _first_mismatch(kind: str, space: Any, spec: Any) -> str | None:
    """The first difference of a dataset's ``space`` from the run's ``spec``, or None."""
    try:
        converted = from_gym_space(space)
    except UnsupportedSpaceError as err:
        return f"{kind} space {space} cannot be used: {err}"
    got_paths, want_paths = leaf_paths(converted), leaf_paths(spec)
    if got_paths != want_paths:
        return (
            f"{kind} has the fields {[_where(kind, p) for p in got_paths]}, the run's has "
            f"{[_where(kind, p) for p in want_paths]}"
        )
    for path, got, want in zip(got_paths, nest.flatten(converted), nest.flatten(spec), strict=True):
        mismatch = _leaf_mismatch(kind, path, got, want)
        if mismatch:
            return mismatch
    return None


def check_spaces(info: DatasetInfo, *, observation_spec: Any, action_spec: Any) -> None:
    """Checks a dataset's spaces against a run's raw observation spec and action spec.

    Raises:
        DatasetError: one line naming the dataset and the first field that differs
            (structure, shape, dtype or bounds of an observation or action field).
    """
    for kind, space, spec in (
        ("observation", info.observation_space, observation_spec),
        ("action", info.action_space, action_spec),
    ):
        mismatch = _first_mismatch(kind, space, spec)
        if mismatch:
            raise DatasetError(f"dataset '{info.name}' does not fit the run: {mismatch}")


def _check_fillable(name: str, data_spec: Experience) -> None:
    """Fields a dataset lacks are zeros: refused for a field whose bounds exclude 0."""
    for field in ("rollout_info", "state"):
        spec = getattr(data_spec, field)
        for path, leaf in zip(leaf_paths(spec), nest.flatten(spec), strict=True):
            if isinstance(leaf, BoundedTensorSpec) and not (
                np.all(np.asarray(leaf.minimum) <= 0) and np.all(np.asarray(leaf.maximum) >= 0)
            ):
                raise DatasetError(
                    f"dataset '{name}': the algorithm's experience field "
                    f"'{field}{'.' + path if path else ''}' is not in datasets, and zeros "
                    f"do not fit its spec {leaf}: this algorithm cannot learn from a dataset"
                )


def _tensors(data: Any, spec: Any) -> Any:
    def convert(array: Any, leaf: TensorSpec) -> torch.Tensor:
        return torch.as_tensor(np.asarray(array)).to(leaf.dtype)

    if isinstance(spec, TensorSpec):
        return convert(data, spec)
    return nest.map_structure(convert, _as_structure(data, spec), spec)


def _as_structure(data: Any, spec: Any) -> Any:
    """Minari's Tuple data as a tuple and Dict data as a dict, like ``spec``."""
    if isinstance(spec, dict):
        return {key: _as_structure(data[key], sub) for key, sub in spec.items()}
    if isinstance(spec, tuple):
        return tuple(_as_structure(data[i], sub) for i, sub in enumerate(spec))
    return data


def _named_leaves(kind: str, data: Any, spec: Any) -> list[tuple[str, Any]]:
    data = _as_structure(data, spec)
    if isinstance(spec, TensorSpec):
        return [(kind, data)]
    return [
        (_where(kind, p), leaf)
        for p, leaf in zip(leaf_paths(spec), nest.flatten(data), strict=True)
    ]


def _check_episode(name: str, index: int, episode: Episode, data_spec: Experience) -> None:
    """Non-finite values, and a termination before the episode's end."""
    fields = [
        *_named_leaves("observations", episode.observations, data_spec.observation),
        *_named_leaves("actions", episode.actions, data_spec.action),
        ("rewards", episode.rewards),
    ]
    for field, leaf in fields:
        array = np.asarray(leaf)
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            step = int(np.argwhere(~np.isfinite(array))[0][0])
            raise DatasetError(
                f"dataset '{name}': episode {index} holds a NaN or infinite value in "
                f"'{field}' (at step {step})"
            )
    early = np.flatnonzero(episode.terminations[:-1])
    if len(early):
        raise DatasetError(
            f"dataset '{name}': episode {index} terminates at step {int(early[0])}, before "
            f"its last step ({episode.length - 1})"
        )


def load_dataset(
    name: str, *, data_spec: Experience, observation_spec: Any, action_spec: Any
) -> LoadedDataset:
    """Reads the dataset ``name`` (a directory or a Minari dataset id) into a
    :class:`DatasetBuffer` of ``data_spec``.

    Args:
        name: the dataset.
        data_spec: the algorithm's ``experience_spec()``.
        observation_spec: the run's raw observation spec (with bounds).
        action_spec: the run's action spec (with bounds).

    Raises:
        DatasetError: a missing or half-written dataset, spaces that differ from the
            run's, a NaN or infinite entry, a malformed episode, or an experience field
            that cannot be zero-filled (each one line naming the dataset and culprit).
    """
    info = read_info(name)
    check_spaces(info, observation_spec=observation_spec, action_spec=action_spec)
    _check_fillable(name, data_spec)
    if info.total_steps < 1:
        raise DatasetError(f"dataset '{name}' holds no transition")
    buffer = DatasetBuffer(data_spec=data_spec, num_rows=info.total_steps + info.total_episodes)
    raw = 0
    for index, episode in enumerate(read_episodes(info)):
        if episode.length < 1:
            continue
        _check_episode(name, index, episode, data_spec)
        raw += episode.nbytes
        try:
            buffer.add_episode(
                observation=_tensors(episode.observations, data_spec.observation),
                action=_tensors(episode.actions, data_spec.action),
                reward=torch.as_tensor(np.asarray(episode.rewards)),
                terminated=bool(episode.terminations[-1]),
            )
        except ReplayBufferError as err:
            raise DatasetError(f"dataset '{name}': episode {index}: {err}") from None
    if buffer.total_size < 2:
        raise DatasetError(f"dataset '{name}' holds no complete transition")
    return LoadedDataset(info=info, buffer=buffer, raw_nbytes=raw)


def load_datasets(
    names: Sequence[str], *, data_spec: Experience, observation_spec: Any, action_spec: Any
) -> list[LoadedDataset]:
    """:func:`load_dataset` of every one of ``names``, in order."""
    return [
        load_dataset(
            n, data_spec=data_spec, observation_spec=observation_spec, action_spec=action_spec
        )
        for n in names
    ]
