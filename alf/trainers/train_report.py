"""``TrainingReport``: what the training loop tells the user about itself as it goes."""

from __future__ import annotations

import collections
import time
from typing import Any

import numpy as np
from absl import logging

from alf.utils.distributed import DistributedContext
from alf.utils.summary import SummaryLogger

__all__ = ["TrainingReport"]


class TrainingReport:
    """Collects the rates and episodes of the iterations of one session, and reports them:
    :meth:`write_summary` (the train summary, from every rank's figures) and
    :meth:`print_progress` (a console line).

    Args:
        summary: where rank 0 writes (None on the other ranks).
        distributed: this rank's context (None: a single process).
        start_iteration: the iteration the session started from.
        start_env_steps: the run's environment steps when the session started.
    """

    def __init__(
        self,
        *,
        summary: SummaryLogger | None,
        distributed: DistributedContext | None,
        start_iteration: int,
        start_env_steps: int,
    ) -> None:
        self.summary = summary
        self.distributed = distributed
        self.start_iteration = start_iteration
        self.start_env_steps = start_env_steps
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=100)
        self.recent_lengths: collections.deque[int] = collections.deque(maxlen=100)
        self._window_steps = 0
        self._window_time = 0.0
        self._session_start = time.monotonic()
        self._last_print = self._session_start

    def add_iteration(
        self, steps: int, elapsed_s: float, returns: list[float], lengths: list[int]
    ) -> None:
        """Counts an iteration of this rank: its env steps, time and finished episodes."""
        self._window_steps += steps
        self._window_time += elapsed_s
        self.recent_returns.extend(returns)
        self.recent_lengths.extend(lengths)

    def write_summary(
        self,
        iteration: int,
        scalars: dict[str, Any],
        record: dict[str, Any],
        *,
        clipped_actions: int,
    ) -> None:
        """Writes the train summary: ``scalars`` plus the env steps per second, clipped
        actions and average return and episode length over all ranks (the last 100
        episodes of each), and ``record`` plus ``fps`` (and ``fps_per_rank``) as the
        ``progress.jsonl`` line. In a data-parallel run every rank must call it (it
        gathers the ranks' figures); rank 0 writes."""
        local = [
            self._window_steps / max(self._window_time, 1e-9),
            sum(self.recent_returns),
            sum(self.recent_lengths),
            len(self.recent_returns),
            clipped_actions,
        ]
        self._window_steps, self._window_time = 0, 0.0
        if self.distributed is None:
            per_rank = [local]
        else:
            per_rank = self.distributed.all_gather(local, what="the train summary")
        if self.summary is None:
            return
        totals = [sum(column) for column in zip(*per_rank, strict=True)]
        fps, returns, lengths, episodes, clipped = totals
        scalars = {**scalars, "env_steps_per_second": fps, "clipped_actions": clipped}
        if episodes:
            scalars["average_return"] = returns / episodes
            scalars["average_episode_length"] = lengths / episodes
        record = {**record, "fps": round(fps, 1)}
        if self.distributed is not None:
            record["fps_per_rank"] = [round(row[0], 1) for row in per_rank]
        self.summary.write("train", iteration, scalars, record)

    def print_progress(
        self,
        iteration: int,
        env_steps: int,
        *,
        interval_s: float,
        num_env_steps: int,
        num_iterations: int,
    ) -> None:
        """Logs ``iteration | env steps | steps/s | return | ETA`` if ``interval_s`` has
        passed since the last line (this rank's returns)."""
        now = time.monotonic()
        if now - self._last_print < interval_s:
            return
        self._last_print = now
        session_s = max(now - self._session_start, 1e-9)
        rate = (env_steps - self.start_env_steps) / session_s
        ret = f"{np.mean(self.recent_returns):.2f}" if self.recent_returns else "n/a"
        eta = ""
        if num_env_steps > 0 and rate > 0:
            eta = f" | ETA {max(num_env_steps - env_steps, 0) / rate:.0f}s"
        elif num_iterations > 0 and iteration > self.start_iteration:
            per_iter = session_s / (iteration - self.start_iteration)
            eta = f" | ETA {per_iter * (num_iterations - iteration):.0f}s"
        logging.info(
            "iteration %d | env steps %d | %.0f steps/s | return %s%s",
            iteration,
            env_steps,
            rate,
            ret,
            eta,
        )
