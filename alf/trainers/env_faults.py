"""What the trainer does when collection fails while the learner is healthy: an
environment that raises or hangs (:class:`~alf.environments.env_guard.EnvironmentCallError`,
``TrainerConfig.env_timeout_s``) or an async actor that fails or is killed
(:class:`~alf.unrollers.async_unroller.ActorError`).

Such a failure still ends the run with exit status 3 and one line, but first the learner,
whose parameters are those of the last completed iteration, writes a final checkpoint
(:func:`checkpoint_healthy_learner`), so that a resumed run loses nothing it trained.
The same holds when a file of the run directory other than a checkpoint cannot be
written (:class:`~alf.run_dir.layout.RunDirWriteError`: ``progress.jsonl``, a summary,
``config.gin``; disk full, permissions): :func:`checkpoint_after_write_failure`.

A call hung in C code cannot be interrupted: the watchdog's ``on_stuck`` hook
(:func:`abandon_stuck_run`) then checkpoints from the watchdog's thread, records
``status.json`` ``failed`` with the line, prints it, and the watchdog ends the process
with status 3.
"""

from __future__ import annotations

import sys
import traceback
from typing import TYPE_CHECKING

from absl import logging

from alf.environments.env_guard import CallWatchdog, EnvironmentCallError
from alf.errors import EXIT_TRAINING_ERROR
from alf.run_dir import layout
from alf.run_dir.checkpoints import Checkpointer
from alf.unrollers.async_unroller import ActorError

if TYPE_CHECKING:
    from alf.trainers.rl_trainer import RLTrainer

__all__ = [
    "COLLECTION_FAILURES",
    "abandon_stuck_run",
    "checkpoint_after_write_failure",
    "checkpoint_healthy_learner",
    "start_env_watchdog",
]

COLLECTION_FAILURES = (EnvironmentCallError, ActorError)
"""Failures of collection or evaluation that leave the learner healthy."""

ERROR_PREFIX = "alf.bin.train: error: "
"""How the line of a run ended by the watchdog starts (as ``alf.bin.train`` prints it)."""


def checkpoint_healthy_learner(trainer: RLTrainer, failed: str = "Collection") -> None:
    """Writes a checkpoint of the trainer's last completed iteration unless there is
    one already, nothing was trained, or the run is data-parallel (a checkpoint is a
    collective there). A failure to write it is logged, never raised: the caller is
    already handling the error that stopped the run. ``failed`` names what failed (for
    the log line)."""
    if trainer.distributed is not None or not trainer.is_main or trainer.iteration == 0:
        return
    try:
        if trainer.checkpointer.latest_step() == trainer.iteration:
            return
        path = trainer.save_checkpoint()
        logging.info("%s failed; the learner's checkpoint is written: %s", failed, path)
    except Exception as err:  # noqa: BLE001 - the run's own error is the one to report
        logging.warning("Could not write a final checkpoint: %s", err)


def checkpoint_after_write_failure(trainer: RLTrainer, err: BaseException) -> None:
    """The training loop raised ``err``: if it is a
    :class:`~alf.run_dir.layout.RunDirWriteError` of a file other than a checkpoint
    (``progress.jsonl``, a summary, ``config.gin``), the learner is healthy and writes its
    final checkpoint (:func:`checkpoint_healthy_learner`) if ``checkpoints/`` can still be
    written. A failed checkpoint write is not tried again."""
    if isinstance(err, layout.RunDirWriteError) and not _raised_by_checkpoint_write(err):
        checkpoint_healthy_learner(trainer, failed="Writing the run directory")


def _raised_by_checkpoint_write(err: BaseException) -> bool:
    """Whether ``err`` was raised inside :meth:`Checkpointer.save`."""
    save = Checkpointer.save.__code__
    return any(frame.f_code is save for frame, _ in traceback.walk_tb(err.__traceback__))


def abandon_stuck_run(trainer: RLTrainer, message: str) -> None:
    """The watchdog's hook for a call that hangs in C code (called from its thread; the
    process ends after it): final checkpoint, trackers marked failed, ``status.json``
    ``failed`` with ``message``, and ``message`` printed as the one error line."""
    checkpoint_healthy_learner(trainer)
    try:
        if trainer.summary is not None:
            trainer.summary.mark_failed()
            trainer.summary.flush()
        if trainer.is_main:
            layout.write_status(
                trainer.root_dir,
                layout.RunStatus.FAILED,
                error=message,
                exit_code=EXIT_TRAINING_ERROR,
            )
    finally:
        print(ERROR_PREFIX + message, file=sys.stderr, flush=True)


def start_env_watchdog(trainer: RLTrainer) -> CallWatchdog | None:
    """Times every ``reset`` and ``step`` of the trainer's own environments (training,
    evaluation) with ``TrainerConfig.env_timeout_s`` (None: no watchdog). Environments
    stepped elsewhere (async actors, subprocess workers, EnvPool's threads) have their
    own timeouts."""
    timeout_s = trainer.config.env_timeout_s
    if timeout_s is None:
        return None
    envs = [trainer.env, trainer.eval_env, *getattr(trainer.unroller, "envs", ())]
    watched = []
    for env in envs:
        if env is not None and hasattr(env, "watch_calls") and env not in watched:
            watched.append(env)
    if not watched:
        return None
    watchdog = CallWatchdog(
        timeout_s=timeout_s, on_stuck=lambda message: abandon_stuck_run(trainer, message)
    )
    for env in watched:
        env.watch_calls(watchdog)
    return watchdog
