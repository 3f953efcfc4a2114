"""Datasets of episodes for offline RL, in Minari's format: writing them, reading them (a
directory or a Minari dataset id) and holding them as an algorithm's offline data
(:class:`~alf.replay_buffers.DatasetBuffer`); see ``docs/offline.md``."""

from alf.datasets.loading import LoadedDataset, check_spaces, load_dataset, load_datasets
from alf.datasets.minari_format import (
    DatasetError,
    DatasetInfo,
    DatasetWriter,
    Episode,
    default_dataset_id,
    locate_dataset,
    minari_datasets_path,
    read_episodes,
    read_info,
)

__all__ = [
    "DatasetError",
    "DatasetInfo",
    "DatasetWriter",
    "Episode",
    "LoadedDataset",
    "check_spaces",
    "default_dataset_id",
    "load_dataset",
    "load_datasets",
    "locate_dataset",
    "minari_datasets_path",
    "read_episodes",
    "read_info",
]
