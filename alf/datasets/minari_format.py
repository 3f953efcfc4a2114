"""Datasets of episodes in Minari's format: the one module that reads and writes them.

A dataset is a directory ``DIR`` holding ``data/metadata.json`` and the episodes'
arrays (``data/main_data.hdf5``, Minari's HDF5 storage), the layout of a dataset in
Minari's local datasets path (``$MINARI_DATASETS_PATH/<dataset id>/data``, by default
``~/.minari/datasets``), so a dataset ALF writes is a Minari dataset, and one Minari
(or another tool) wrote is read by ALF. An episode of ``T`` transitions holds ``T + 1``
observations, ``T`` actions, rewards, terminations and truncations.

``metadata.json`` holds Minari's keys (``dataset_id``, ``minari_version``,
``total_episodes``, ``total_steps``, the serialized ``observation_space`` and
``action_space``, the Gymnasium ``env_spec``) and, when known, the reference returns of
D4RL's normalised score: ``ref_min_score`` (a uniformly random policy's average return,
:attr:`DatasetInfo.random_return`) and ``ref_max_score`` (an expert's,
:attr:`DatasetInfo.expert_return`), the keys Minari's own ``get_normalized_score``
reads. ALF adds ``alf``: how the data was made (source, run, checkpoint, policy,
noise, seed, the environment's ALF name, how the references were found).

A dataset is written to ``DIR.tmp-<pid>`` and renamed to ``DIR`` once complete
(:class:`DatasetWriter`): a killed writer never leaves a ``DIR`` that looks complete.
``minari`` (with ``h5py``) is the ``[offline]`` extra; it is imported when a dataset is
read or written.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from alf import nest
from alf.errors import UserError, install_hint
from alf.run_dir.layout import pid_alive

__all__ = [
    "ALF_KEY",
    "DATA_DIR",
    "METADATA_FILE",
    "DatasetError",
    "DatasetInfo",
    "DatasetWriter",
    "Episode",
    "default_dataset_id",
    "locate_dataset",
    "minari_datasets_path",
    "read_episodes",
    "read_info",
]

DATA_DIR = "data"
"""The folder of a dataset directory that holds its files (Minari's layout)."""
METADATA_FILE = "metadata.json"
"""Minari's metadata file, in :data:`DATA_DIR`."""
ALF_KEY = "alf"
"""The ``metadata.json`` entry of what ALF records about how the data was made."""
_DATA_FORMAT = "hdf5"
_REQUIRED_KEYS = ("total_episodes", "total_steps", "data_format")
_TMP_RE = re.compile(r"^(?P<name>.+)\.tmp-(?P<pid>\d+)$")


class DatasetError(UserError, ValueError):
    """A dataset that cannot be read or written, or does not fit the run: one line
    naming the dataset and the culprit (a field, an episode, a file)."""


def _minari() -> Any:
    """The ``minari`` package, or a :class:`DatasetError` saying how to install it."""
    try:
        import minari
    except ImportError as err:
        raise DatasetError(
            f"datasets need the minari package ({err}): {install_hint('offline')}"
        ) from None
    return minari


def minari_datasets_path() -> str:
    """Minari's local datasets folder: ``$MINARI_DATASETS_PATH``, or
    ``~/.minari/datasets`` (not created here)."""
    path = os.environ.get("MINARI_DATASETS_PATH")
    return path or os.path.join(os.path.expanduser("~"), ".minari", "datasets")


def default_dataset_id(out: str) -> str:
    """The Minari dataset id of a dataset written to ``out`` without one:
    ``alf/<name>-v0`` from the directory's name (characters Minari's ids do not take
    become ``_``; a name ending in ``-v<N>`` keeps its version)."""
    name = re.sub(r"[^-\w]", "_", os.path.basename(os.path.normpath(out))) or "dataset"
    return f"alf/{name}" if re.search(r"-v\d+$", name) else f"alf/{name}-v0"


@dataclass(frozen=True)
class Episode:
    """One episode's arrays (numpy; observations and actions nested like their space).

    Attributes:
        observations: ``[T + 1, ...]``: the first observation to the last.
        actions: ``[T, ...]``: the action taken at each of the first ``T``.
        rewards: ``[T]``: ``rewards[t]`` received for ``actions[t]``.
        terminations: ``[T]`` bool: the episode reached a terminal state there.
        truncations: ``[T]`` bool: the episode was cut there (time limit, end of data).
    """

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray

    @property
    def length(self) -> int:
        """Transitions ``T``."""
        return int(len(self.rewards))

    @property
    def episode_return(self) -> float:
        """The sum of the rewards."""
        return float(np.sum(self.rewards, dtype=np.float64))

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays (the dataset's raw size is their sum over episodes)."""
        leaves = [
            *nest.flatten(self.observations),
            *nest.flatten(self.actions),
            self.rewards,
            self.terminations,
            self.truncations,
        ]
        return sum(int(np.asarray(a).nbytes) for a in leaves)


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset's metadata (read without its episodes).

    Attributes:
        name: the dataset as it was named (a directory or a Minari dataset id).
        path: the folder holding ``metadata.json`` and the data file.
        dataset_id: Minari's id of it.
        total_episodes: episodes it holds.
        total_steps: transitions it holds.
        observation_space: the Gymnasium observation space of its episodes.
        action_space: the Gymnasium action space.
        env_id: the Gymnasium id of its environment (from ``env_spec``; None if unknown).
        random_return: a uniformly random policy's average return (``ref_min_score``).
        expert_return: an expert policy's average return (``ref_max_score``).
        made_by: what ALF recorded about how it was made (empty for other tools').
    """

    name: str
    path: str
    dataset_id: str
    total_episodes: int
    total_steps: int
    observation_space: gym.Space
    action_space: gym.Space
    env_id: str | None = None
    random_return: float | None = None
    expert_return: float | None = None
    made_by: dict[str, Any] = field(default_factory=dict)

    @property
    def has_references(self) -> bool:
        """Whether both reference returns are known (D4RL-normalised scores)."""
        return self.random_return is not None and self.expert_return is not None

    def normalized_score(self, value: float) -> float:
        """``100 * (value - random_return) / (expert_return - random_return)``.

        Raises:
            DatasetError: the references are not both known, or equal.
        """
        if not self.has_references or self.expert_return == self.random_return:
            raise DatasetError(
                f"dataset '{self.name}' records no usable reference returns (random "
                f"{self.random_return}, expert {self.expert_return})"
            )
        span = float(self.expert_return) - float(self.random_return)
        return 100.0 * (value - float(self.random_return)) / span

    def summary(self) -> dict[str, Any]:
        """What a run records about the dataset it trained on (plain data)."""
        return {
            "name": self.name,
            "path": self.path,
            "dataset_id": self.dataset_id,
            "env_id": self.env_id,
            "episodes": self.total_episodes,
            "steps": self.total_steps,
            "random_return": self.random_return,
            "expert_return": self.expert_return,
        }


def _data_dir(path: str) -> str | None:
    """The folder of ``path`` holding ``metadata.json`` (``path/data`` or ``path``)."""
    for candidate in (os.path.join(path, DATA_DIR), path):
        if os.path.isfile(os.path.join(candidate, METADATA_FILE)):
            return candidate
    return None


def locate_dataset(name: str) -> str:
    """The data folder of the dataset ``name``: a directory, or else the id of a dataset
    in Minari's local datasets path (nothing is downloaded).

    Raises:
        DatasetError: no such directory or dataset, or a directory without metadata (a
            dataset not, or only half, written).
    """
    path = os.path.abspath(os.path.expanduser(name))
    if os.path.isdir(path):
        found = _data_dir(path)
        if found is None:
            raise DatasetError(
                f"dataset '{name}' is incomplete or not a dataset: no "
                f"{DATA_DIR}/{METADATA_FILE} in it (a dataset being written is in "
                f"'{os.path.basename(path)}.tmp-<pid>' until it is complete)"
            )
        return found
    minari_path = os.path.join(minari_datasets_path(), name)
    if os.path.isdir(minari_path):
        found = _data_dir(minari_path)
        if found is not None:
            return found
        raise DatasetError(
            f"Minari dataset '{name}' in '{minari_path}' is incomplete: no "
            f"{DATA_DIR}/{METADATA_FILE}"
        )
    raise DatasetError(
        f"dataset '{name}' not found: no such directory, and no Minari dataset of that id "
        f"in '{minari_datasets_path()}' (MINARI_DATASETS_PATH; ALF downloads nothing: "
        f"'minari download {name}' fetches a published one)"
    )


def _space(metadata: dict[str, Any], key: str, name: str) -> gym.Space:
    from minari.serialization import deserialize_space

    text = metadata.get(key)
    if text is None:
        env_spec = metadata.get("env_spec")
        if env_spec is None:
            raise DatasetError(f"dataset '{name}': metadata.json has no {key} nor env_spec")
        env = gym.make(gym.envs.registration.EnvSpec.from_json(env_spec))
        try:
            return getattr(env, key)
        finally:
            env.close()
    try:
        return deserialize_space(json.loads(text) if isinstance(text, str) else text)
    except (KeyError, ValueError, TypeError, NotImplementedError) as err:
        raise DatasetError(f"dataset '{name}': its {key} cannot be read ({err})") from None


def _env_id(metadata: dict[str, Any]) -> str | None:
    text = metadata.get("env_spec")
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text).get("id")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _reference(metadata: dict[str, Any], key: str) -> float | None:
    value = metadata.get(key)
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


def read_info(name: str) -> DatasetInfo:
    """The metadata of the dataset ``name`` (a directory or a Minari dataset id).

    Raises:
        DatasetError: the dataset is missing, half-written (metadata without its data
            file, or metadata lacking Minari's keys), or its spaces cannot be read.
    """
    _minari()
    path = locate_dataset(name)
    meta_path = os.path.join(path, METADATA_FILE)
    try:
        with open(meta_path) as f:
            metadata = json.load(f)
    except (OSError, ValueError) as err:
        raise DatasetError(f"dataset '{name}': '{meta_path}' cannot be read ({err})") from None
    if not isinstance(metadata, dict):
        raise DatasetError(f"dataset '{name}': '{meta_path}' is not a JSON object")
    missing = [k for k in _REQUIRED_KEYS if k not in metadata]
    if missing:
        raise DatasetError(
            f"dataset '{name}' is incomplete: '{meta_path}' lacks {', '.join(missing)}"
        )
    data_format = metadata["data_format"]
    if data_format == _DATA_FORMAT and not os.path.isfile(os.path.join(path, "main_data.hdf5")):
        raise DatasetError(
            f"dataset '{name}' is incomplete: '{path}' has metadata but no data file main_data.hdf5"
        )
    made_by = metadata.get(ALF_KEY)
    return DatasetInfo(
        name=name,
        path=path,
        dataset_id=str(metadata.get("dataset_id", "")),
        total_episodes=int(metadata["total_episodes"]),
        total_steps=int(metadata["total_steps"]),
        observation_space=_space(metadata, "observation_space", name),
        action_space=_space(metadata, "action_space", name),
        env_id=_env_id(metadata),
        random_return=_reference(metadata, "ref_min_score"),
        expert_return=_reference(metadata, "ref_max_score"),
        made_by=made_by if isinstance(made_by, dict) else {},
    )


def _storage(info: DatasetInfo) -> Any:
    from minari.dataset.minari_storage import MinariStorage

    try:
        return MinariStorage.read(info.path)
    except (ValueError, KeyError, ImportError) as err:
        raise DatasetError(f"dataset '{info.name}' cannot be read: {err}") from None


_READ_BATCH = 64
"""Episodes read per opening of the data file: HDF5 keeps what it read of an open file's
structure, so one opening for a whole dataset of small episodes grows the process by
about 40 kB per episode (200 MB for 5000 episodes), while reopening keeps it flat."""


def _batched_episodes(storage: Any, total: int) -> Iterator[dict[str, Any]]:
    for start in range(0, total, _READ_BATCH):
        yield from storage.get_episodes(range(start, min(start + _READ_BATCH, total)))


def read_episodes(info: DatasetInfo) -> Iterator[Episode]:
    """The dataset's episodes, in order, read one at a time.

    Raises:
        DatasetError: the data file is truncated or unreadable, or holds fewer episodes
            than the metadata lists (a half-written dataset).
    """
    storage = _storage(info)
    count = 0
    try:
        for data in _batched_episodes(storage, info.total_episodes):
            count += 1
            yield Episode(
                observations=data["observations"],
                actions=data["actions"],
                rewards=np.asarray(data["rewards"]),
                terminations=np.asarray(data["terminations"], dtype=bool),
                truncations=np.asarray(data["truncations"], dtype=bool),
            )
    except (OSError, KeyError, ValueError, AssertionError, TypeError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DatasetError(
            f"dataset '{info.name}': episode {count} of {info.total_episodes} cannot be "
            f"read from '{info.path}' ({type(err).__name__}: {reason}): the data file is "
            "truncated or half-written"
        ) from None


def _fsync_tree(path: str) -> None:
    for folder, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())


def _remove_stale_temporaries(out: str) -> None:
    """Removes ``out.tmp-<pid>`` folders of writers that are no longer running."""
    parent, base = os.path.split(os.path.abspath(out))
    if not os.path.isdir(parent):
        return
    for name in os.listdir(parent):
        match = _TMP_RE.match(name)
        if match and match.group("name") == base and not pid_alive(int(match.group("pid"))):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


class DatasetWriter:
    """Writes episodes to a new dataset directory ``out``, atomically.

    Use it as a context manager: episodes go to ``out.tmp-<pid>``; :meth:`commit` writes
    the metadata and renames the folder to ``out``; leaving the block without a commit
    (an error, a signal) removes the temporary folder.

    Args:
        out: the dataset directory to create (it must not exist).
        observation_space: the episodes' Gymnasium observation space.
        action_space: their action space.
        env_spec: the environment's Gymnasium spec (recorded; None: unknown).
        dataset_id: Minari's id of the dataset (default :func:`default_dataset_id`).

    Raises:
        DatasetError: ``out`` exists (a dataset is never overwritten), or its folder
            cannot be written.
    """

    _FLUSH_EPISODES = 64

    def __init__(
        self,
        *,
        out: str,
        observation_space: gym.Space,
        action_space: gym.Space,
        env_spec: Any = None,
        dataset_id: str | None = None,
    ) -> None:
        self._minari = _minari()
        self.out = os.path.abspath(os.path.expanduser(out))
        if os.path.lexists(self.out):
            raise DatasetError(
                f"--out '{out}' exists: a dataset is never overwritten (choose another "
                "directory, or remove that one)"
            )
        self.dataset_id = dataset_id or default_dataset_id(self.out)
        from minari.dataset.minari_dataset import parse_dataset_id

        try:
            parse_dataset_id(self.dataset_id)
        except ValueError as err:
            raise DatasetError(f"dataset id {self.dataset_id!r}: {err}") from None
        _remove_stale_temporaries(self.out)
        self._tmp = f"{self.out}.tmp-{os.getpid()}"
        self._pending: list[Any] = []
        self.episodes = 0
        self.steps = 0
        self.returns: list[float] = []
        try:
            os.makedirs(self._tmp)
            self._storage = self._new_storage(observation_space, action_space, env_spec)
        except OSError as err:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise DatasetError(f"cannot write --out '{out}': {err.strerror or err}") from None

    def _new_storage(self, observation_space: gym.Space, action_space: gym.Space, spec: Any) -> Any:
        from minari.dataset.minari_storage import MinariStorage

        options: dict[str, Any] = {}
        if "jpeg_encoding" in inspect.signature(MinariStorage.new).parameters:
            options["jpeg_encoding"] = False  # images stored exactly
        return MinariStorage.new(
            os.path.join(self._tmp, DATA_DIR),
            observation_space=observation_space,
            action_space=action_space,
            env_spec=spec,
            data_format=_DATA_FORMAT,
            **options,
        )

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()

    def add_episode(self, episode: Episode) -> None:
        """Adds one episode (of at least one transition)."""
        if episode.length < 1:
            return
        from minari.data_collector.episode_buffer import EpisodeBuffer

        self._pending.append(
            EpisodeBuffer(
                observations=episode.observations,
                actions=episode.actions,
                rewards=np.asarray(episode.rewards, dtype=np.float32),
                terminations=np.asarray(episode.terminations, dtype=bool),
                truncations=np.asarray(episode.truncations, dtype=bool),
            )
        )
        self.episodes += 1
        self.steps += episode.length
        self.returns.append(episode.episode_return)
        if len(self._pending) >= self._FLUSH_EPISODES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._storage.update_episodes(self._pending)
            self._pending = []

    def commit(
        self,
        *,
        random_return: float | None = None,
        expert_return: float | None = None,
        made_by: dict[str, Any] | None = None,
        description: str | None = None,
    ) -> DatasetInfo:
        """Writes the metadata and moves the dataset to ``out``.

        Args:
            random_return: a uniformly random policy's average return.
            expert_return: an expert's average return.
            made_by: how the data was made (the ``alf`` entry).
            description: a sentence on the dataset.

        Returns:
            The written dataset's :class:`DatasetInfo`.

        Raises:
            DatasetError: no episode was added, or ``out`` appeared meanwhile.
        """
        if self.episodes == 0:
            raise DatasetError("no episode to write: the dataset would be empty")
        self._flush()
        metadata: dict[str, Any] = {
            "dataset_id": self.dataset_id,
            "minari_version": self._minari.__version__,
            "algorithm_name": " ".join(
                str(made_by[k]) for k in ("algorithm", "policy") if made_by and k in made_by
            )
            or "unknown",
            "description": description or "written by alf.bin.dataset",
            ALF_KEY: made_by or {},
        }
        if random_return is not None:
            metadata["ref_min_score"] = float(random_return)
        if expert_return is not None:
            metadata["ref_max_score"] = float(expert_return)
        self._storage.update_metadata(metadata)
        _fsync_tree(self._tmp)
        if os.path.lexists(self.out):
            raise DatasetError(f"'{self.out}' appeared while the dataset was written")
        os.rename(self._tmp, self.out)
        return read_info(self.out)

    def abort(self) -> None:
        """Removes the temporary folder (nothing once committed)."""
        shutil.rmtree(self._tmp, ignore_errors=True)
