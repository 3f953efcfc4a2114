"""Run summaries: TensorBoard event files, ``progress.jsonl`` and experiment trackers."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from absl import logging

from alf.run_dir import layout
from alf.run_dir.metadata import RunSettings, record_run_start, stored_tracker_info
from alf.utils.trackers import Tracker, TrackerSettings, create_trackers

__all__ = [
    "RunLoggingSettings",
    "SummaryLogger",
    "record_operative_config",
    "start_run_logging",
    "truncate_progress_log",
]


def truncate_progress_log(path: str, last_iteration: int) -> None:
    """Drops lines of ``progress.jsonl`` written after ``last_iteration`` (on resume those
    iterations are trained again); an unreadable trailing line is dropped too."""
    if not os.path.isfile(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("iteration", 0) <= last_iteration:
                kept.append(json.dumps(record))
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


class SummaryLogger:
    """Writes scalars to TensorBoard (``train/`` and ``eval/`` under ``root_dir``) and to
    the experiment trackers against the run's environment steps, and one JSON object per
    summary to ``root_dir/progress.jsonl``.

    Args:
        root_dir: the run's directory.
        purge_step: on resume, TensorBoard events at or after this step (env steps, as
            every scalar is written) are discarded.
        trackers: started experiment trackers; they are finished by :meth:`close`. One
            that fails to log is warned about and dropped (training goes on).
    """

    def __init__(
        self,
        root_dir: str,
        *,
        purge_step: int | None = None,
        trackers: Sequence[Tracker] = (),
    ) -> None:
        self._trackers = list(trackers)
        self._failed = False
        self._root_dir = root_dir
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._writers = {}
            for group in ("train", "eval"):
                self._writers[group] = SummaryWriter(
                    os.path.join(root_dir, group), purge_step=purge_step
                )
            path = os.path.join(root_dir, layout.PROGRESS_FILE)
            self._progress = open(path, "a")  # noqa: SIM115
        except BaseException:
            # Writers already open would write their event files again at exit, after
            # a failed start has cleaned root_dir up.
            for writer in getattr(self, "_writers", {}).values():
                writer.close()
            self._each_tracker("finish", lambda tracker: tracker.finish(failed=True))
            raise

    @property
    def trackers(self) -> list[Tracker]:
        """The trackers still being written to."""
        return list(self._trackers)

    def tracker_info(self) -> dict[str, dict[str, Any]]:
        """``{name: run id and the like}`` of the trackers, for ``run_info.json``."""
        return {tracker.name: tracker.info() for tracker in self._trackers}

    def write(
        self,
        group: str,
        scalars: dict[str, Any],
        record: dict[str, Any],
        *,
        env_steps: int,
        iteration: int,
    ) -> None:
        """Writes ``scalars`` and the ``iteration`` under ``group/`` at step ``env_steps``
        (TensorBoard and trackers), and appends ``record`` plus the scalars (named
        ``group/name``) as one line of ``progress.jsonl``. Scalars may be numbers or 0-d
        tensors."""
        writer = self._writers[group]
        line = dict(record)
        with self._writing(os.path.join(self._root_dir, group)):
            for name, value in scalars.items():
                value = float(value)
                writer.add_scalar(f"{group}/{name}", value, env_steps)
                line[f"{group}/{name}"] = value
            writer.add_scalar(f"{group}/iteration", iteration, env_steps)
        with self._writing(self._progress.name):
            self._progress.write(json.dumps(line) + "\n")
            self._progress.flush()
        if self._trackers:
            logged = {key: value for key, value in line.items() if key.startswith(f"{group}/")}
            logged[f"{group}/iteration"] = iteration
            self._each_tracker("log", lambda tracker: tracker.log_scalars(logged, step=env_steps))

    def write_episodes(self, record: dict[str, Any]) -> None:
        """Appends one evaluation's record (counters and per-episode ``returns``,
        ``lengths``, ``cut``) as a line of ``evaluations.jsonl``."""
        path = os.path.join(self._root_dir, layout.EVALUATIONS_FILE)
        with self._writing(path), open(path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def text(self, tag: str, text: str) -> None:
        """Writes a text summary (e.g. the operative config) to TensorBoard."""
        with self._writing(os.path.join(self._root_dir, "train")):
            self._writers["train"].add_text(tag, f"<pre>{text}</pre>")

    @contextlib.contextmanager
    def _writing(self, path: str) -> Iterator[None]:
        """Turns a failed write of ``path`` (disk full, permissions) into one
        :class:`~alf.run_dir.layout.RunDirWriteError` naming it."""
        try:
            yield
        except OSError as err:
            raise layout.RunDirWriteError(
                f"cannot write '{path}': {layout.describe_write_failure(err)}"
            ) from err

    @contextlib.contextmanager
    def _unless_failed(self) -> Iterator[None]:
        """Ignores a failed write once the run has failed (its error is reported)."""
        try:
            yield
        except OSError:
            if not self._failed:
                raise

    def mark_failed(self) -> None:
        """Training raised: :meth:`close` ends the trackers' runs as failed."""
        self._failed = True

    def flush(self) -> None:
        """Writes everything buffered to disk."""
        for group, writer in self._writers.items():
            with self._writing(os.path.join(self._root_dir, group)):
                writer.flush()
        with self._writing(self._progress.name):
            self._progress.flush()

    def close(self) -> None:
        """Flushes and closes every file, and finishes the trackers' runs. After a failed
        run (:meth:`mark_failed`) a file that cannot be flushed is closed anyway."""
        for group, writer in self._writers.items():
            with self._writing(os.path.join(self._root_dir, group)), self._unless_failed():
                writer.close()
        with self._writing(self._progress.name), self._unless_failed():
            self._progress.close()
        failed = self._failed
        self._each_tracker("finish", lambda tracker: tracker.finish(failed=failed))
        self._trackers = []

    def _each_tracker(self, what: str, call: Callable[[Tracker], None]) -> None:
        for tracker in list(self._trackers):
            try:
                call(tracker)
            except Exception as err:  # a tracker must not stop the training
                logging.warning(
                    "The %s tracker failed to %s (%s: %s); it gets nothing more from this run",
                    tracker.name,
                    what,
                    type(err).__name__,
                    err,
                )
                self._trackers.remove(tracker)


def record_operative_config(root_dir: str, summary: SummaryLogger) -> None:
    """After a run's first iteration: the operative config (every binding used, defaults
    included) to ``config.gin`` and TensorBoard, and a warning naming the bindings
    nothing used."""
    from alf import config as alf_config

    operative = alf_config.operative_config_str()
    try:
        layout.write_config(root_dir, operative)
    except OSError as err:
        path = os.path.join(root_dir, layout.CONFIG_FILE)
        raise layout.RunDirWriteError(
            f"cannot write '{path}': {layout.describe_write_failure(err)}"
        ) from err
    summary.text("config", operative)
    unused = alf_config.inoperative_bindings()
    if unused:
        logging.warning("These config bindings were never used by the run: %s", ", ".join(unused))


class RunLoggingSettings(TrackerSettings, RunSettings, Protocol):
    """What :func:`start_run_logging` reads from the run's settings: the trackers' and
    ``run_info.json``'s (``TrainerConfig`` has them)."""


def start_run_logging(
    root_dir: str,
    *,
    config: RunLoggingSettings,
    purge_step: int,
    resumed_from: tuple[int, int] | None,
    device: Any,
    world_size: int = 1,
) -> SummaryLogger:
    """Starts what a run session writes about itself (on rank 0): the trackers ``config``
    (a ``TrainerConfig``) enables, with the gin bindings logged to them as the run's
    config, the :class:`SummaryLogger`, and the session's record in ``run_info.json``
    (:func:`~alf.run_dir.metadata.record_run_start`).

    Args:
        root_dir: the run directory.
        config: the run's ``TrainerConfig``.
        purge_step: TensorBoard events at or after this step are discarded.
        resumed_from: ``(iteration, env_steps)`` of the resumed checkpoint (None: a
            fresh start); the trackers' runs recorded in ``run_info.json`` continue.
        device: the training device.
        world_size: ranks of a data-parallel run.

    Raises:
        alf.utils.trackers.TrackerError: a tracker could not start.
    """
    from alf import config as alf_config

    trackers = create_trackers(
        config,
        root_dir=root_dir,
        previous=stored_tracker_info(root_dir) if resumed_from is not None else None,
        params=alf_config.current_bindings(),
    )
    summary = SummaryLogger(root_dir, purge_step=purge_step, trackers=trackers)
    try:
        record_run_start(
            root_dir,
            config=config,
            device=device,
            world_size=world_size,
            resumed_from=resumed_from,
            trackers=summary.tracker_info(),
        )
    except BaseException:
        summary.mark_failed()
        summary.close()
        raise
    return summary
