"""Offline data: the replay buffers saved in the checkpoints of earlier runs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from alf.replay_buffers.replay_buffer import ReplayBuffer
from alf.replay_buffers.spec_description import describe_spec, spec_differences
from alf.run_dir.checkpoints import CheckpointError, checkpoint_dir, read_checkpoint

__all__ = ["load_offline_buffer", "load_offline_buffers"]


def load_offline_buffer(root_dir: str, data_spec: Any) -> ReplayBuffer:
    """The replay buffer saved in the newest checkpoint of the run in ``root_dir``.

    Raises:
        CheckpointError: no checkpoint, no saved buffer in it, or a buffer whose specs
            differ from ``data_spec`` (each differing field is named).
    """
    if not os.path.isdir(checkpoint_dir(root_dir)):
        raise CheckpointError(f"Offline buffer dir '{root_dir}' holds no checkpoints/ folder")
    checkpoint = read_checkpoint(root_dir)
    path = checkpoint.path
    saved = checkpoint.data
    if saved is None:
        raise CheckpointError(
            f"Checkpoint '{path}' holds no replay buffer: train that run with "
            "ReplayBuffer.enable_checkpoint=True to use it as offline data"
        )
    differences = spec_differences(saved["spec"], describe_spec(data_spec))
    if differences:
        raise CheckpointError(
            f"The replay buffer in '{path}' does not fit this algorithm's experience:\n  "
            + "\n  ".join(differences)
        )
    buffer = ReplayBuffer(
        data_spec=data_spec,
        num_envs=int(saved["num_envs"]),
        max_length=int(saved["max_length"]),
        prioritized=False,  # offline data is sampled uniformly
        enable_checkpoint=False,  # and never saved again
        hindsight=None,  # offline rows are never relabelled (a gin binding must not reach here)
    )
    buffer.load_checkpoint_state(saved)
    return buffer


def load_offline_buffers(root_dirs: Sequence[str], data_spec: Any) -> list[ReplayBuffer]:
    """:func:`load_offline_buffer` for every directory of ``root_dirs``."""
    return [load_offline_buffer(d, data_spec) for d in root_dirs]
