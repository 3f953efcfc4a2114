"""Rebuilding a trained run for acting: its evaluation environment and its algorithm with
a checkpoint's parameters (what ``alf.bin.play`` and ``alf.bin.export`` load)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alf.environments import create_environment
from alf.environments.pettingzoo_games import configured_game
from alf.run_dir.checkpoints import RunCheckpoint, read_run_checkpoint, restore_algorithm
from alf.run_dir.layout import check_run_dir
from alf.saved_config import load_saved_config
from alf.trainers.algorithm_builder import build_algorithm
from alf.trainers.trainer_config import TrainerConfig
from alf.utils.threads import set_cpu_threads

__all__ = ["load_trained_run"]


def load_trained_run(
    root_dir: str,
    *,
    checkpoint: int | str | RunCheckpoint | None = None,
    seed: int | None = None,
    render_mode: str | None = None,
    conf_params: Sequence[str] = (),
    trusted_modules: Sequence[str] = (),
) -> tuple[Any, Any]:
    """Rebuilds a run's evaluation environment (one env; one game of a multi-agent
    game) and its algorithm from
    ``root_dir/config.gin``, with the parameters and data-transformer statistics of a
    checkpoint. The configurables the config names must be registered
    (``alf.configurables.import_configurables()``, as the command-line tools do). The
    run's ``TrainerConfig.torch_num_threads``, when set, becomes the thread count of
    torch and numpy's BLAS for the whole process (:func:`alf.utils.threads.set_cpu_threads`).

    Args:
        root_dir: the run's directory.
        checkpoint: the iteration of one of the run's checkpoints, the path of a
            checkpoint file, or one already read; None: the run's newest.
        seed: the environment's seed.
        render_mode: Gymnasium's ``render_mode`` of the environment.
        conf_params: gin bindings applied after ``config.gin``.
        trusted_modules: modules the run's config may import (the user's own
            configurables); ``config.gin`` is read as data (:mod:`alf.saved_config`).

    Returns:
        ``(env, algorithm)``, the algorithm on the CPU; the caller closes ``env``.

    Raises:
        RunDirError: ``root_dir`` is not a run's directory.
        UntrustedConfigError: ``config.gin`` asks for more than bindings of registered
            configurables (an import of an untrusted module, dynamic registration).
        CheckpointError: the checkpoint is missing, unreadable or does not fit.
    """
    conf_path = check_run_dir(root_dir)
    load_saved_config(conf_path, conf_params, trusted_modules=trusted_modules)
    config = TrainerConfig()
    run_checkpoint = (
        checkpoint
        if isinstance(checkpoint, RunCheckpoint)
        else read_run_checkpoint(root_dir, checkpoint)
    )
    if config.torch_num_threads:
        set_cpu_threads(config.torch_num_threads)
    # One game: one row, or one row per agent of a simultaneous multi-agent game.
    game = configured_game()
    rows = len(game.agents) if game is not None and not game.turn_based else 1
    env = create_environment(
        num_parallel_environments=rows, seed=seed, render_mode=render_mode, for_evaluation=True
    )
    try:
        algorithm = build_algorithm(config, env)
        # Only the module's tensors (parameters and statistics): no optimizer state.
        restore_algorithm(algorithm, run_checkpoint, with_optimizer=False)
    except BaseException:
        env.close()
        raise
    return env, algorithm
