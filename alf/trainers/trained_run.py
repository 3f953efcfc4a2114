"""Rebuilding a trained run for acting: its evaluation environment and its algorithm with
a checkpoint's parameters (what ``alf.bin.play`` and ``alf.bin.export`` load)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from alf import config as alf_config
from alf.environments import create_environment
from alf.errors import UserError
from alf.run_dir import layout
from alf.run_dir.checkpoints import (
    RunCheckpoint,
    read_checkpoint,
    read_checkpoint_file,
    restore_algorithm,
)
from alf.trainers.algorithm_builder import build_algorithm
from alf.trainers.trainer_config import TrainerConfig

__all__ = ["RunDirError", "check_run_dir", "load_trained_run", "read_run_checkpoint"]


class RunDirError(UserError, ValueError):
    """A ``root_dir`` that is not the directory of a training run."""


def check_run_dir(root_dir: str) -> str:
    """The path of ``root_dir``'s ``config.gin``.

    Raises:
        RunDirError: ``root_dir`` does not exist or holds no ``config.gin``.
    """
    if not os.path.isdir(root_dir):
        raise RunDirError(f"root_dir '{root_dir}' does not exist")
    conf_path = os.path.join(root_dir, layout.CONFIG_FILE)
    if not os.path.isfile(conf_path):
        raise RunDirError(
            f"'{conf_path}' not found: is '{root_dir}' the root_dir of a training run?"
        )
    return conf_path


def read_run_checkpoint(root_dir: str, checkpoint: int | str | None = None) -> RunCheckpoint:
    """The checkpoint ``checkpoint`` names: an iteration of the run in ``root_dir``, a
    checkpoint file's path, or None for the run's newest.

    Raises:
        CheckpointError: no such checkpoint, or it cannot be read (naming the file).
    """
    if isinstance(checkpoint, str):
        return read_checkpoint_file(os.path.abspath(os.path.expanduser(checkpoint)))
    return read_checkpoint(root_dir, checkpoint)


def load_trained_run(
    root_dir: str,
    *,
    checkpoint: int | str | None = None,
    seed: int | None = None,
    render_mode: str | None = None,
    conf_params: Sequence[str] = (),
) -> tuple[Any, Any]:
    """Rebuilds a run's evaluation environment (one env) and its algorithm from
    ``root_dir/config.gin``, with the parameters and data-transformer statistics of a
    checkpoint. The configurables the config names must be registered
    (``alf.configurables.import_configurables()``, as the command-line tools do).

    Args:
        root_dir: the run's directory.
        checkpoint: the iteration of one of the run's checkpoints, or the path of a
            checkpoint file; None: the run's newest.
        seed: the environment's seed.
        render_mode: Gymnasium's ``render_mode`` of the environment.
        conf_params: gin bindings applied after ``config.gin``.

    Returns:
        ``(env, algorithm)``, the algorithm on the CPU; the caller closes ``env``.

    Raises:
        RunDirError: ``root_dir`` is not a run's directory.
        CheckpointError: the checkpoint is missing, unreadable or does not fit.
    """
    conf_path = check_run_dir(root_dir)
    with open(conf_path) as f:
        alf_config.load_config_text(f.read(), conf_params)
    config = TrainerConfig()
    run_checkpoint = read_run_checkpoint(root_dir, checkpoint)
    if config.torch_num_threads:
        torch.set_num_threads(config.torch_num_threads)
    env = create_environment(
        num_parallel_environments=1, seed=seed, render_mode=render_mode, for_evaluation=True
    )
    try:
        algorithm = build_algorithm(config, env)
        # Only the module's tensors (parameters and statistics): no optimizer state.
        restore_algorithm(algorithm, run_checkpoint, with_optimizer=False)
    except BaseException:
        env.close()
        raise
    return env, algorithm
