"""``TrainingReport``: what the training loop tells the user about itself as it goes."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
from absl import logging

from alf.errors import TrainingError
from alf.trainers.agent_groups import GroupReturns
from alf.trainers.evaluator import EvalResult
from alf.unrollers.episode_tracker import SUCCESS_WINDOW, CompletedEpisodes
from alf.utils.distributed import DistributedContext
from alf.utils.summary import SummaryLogger

__all__ = [
    "DivergenceGuard",
    "SessionClock",
    "RateWindow",
    "TrainingDivergedError",
    "TrainingReport",
    "format_duration",
    "write_eval_summary",
]


class SessionClock:
    """Wall-clock seconds of a run's training over all its sessions: those of the
    earlier sessions plus, while :meth:`start` ed, this one's.

    Args:
        earlier_s: seconds of the earlier sessions (from the resumed checkpoint).
    """

    def __init__(self, *, earlier_s: float = 0.0) -> None:
        self.earlier_s = earlier_s
        self._started: float | None = None

    def start(self) -> None:
        """Starts counting this session."""
        self._started = time.monotonic()

    def stop(self) -> None:
        """Adds this session's seconds so far to :attr:`earlier_s` and stops counting."""
        self.earlier_s = self.seconds
        self._started = None

    @property
    def seconds(self) -> float:
        """The seconds so far."""
        if self._started is None:
            return self.earlier_s
        return self.earlier_s + time.monotonic() - self._started


class TrainingDivergedError(TrainingError, RuntimeError):
    """Too many consecutive iterations had every update skipped for a non-finite loss."""


class DivergenceGuard:
    """Stops a run whose last ``limit`` iterations all had every update skipped for a
    non-finite loss (``TrainerConfig.max_consecutive_skipped_iterations``).

    Args:
        limit: consecutive fully skipped iterations that stop the run.
        checkpoint_dir: where the last good checkpoint is (named in the error).
    """

    def __init__(self, *, limit: int, checkpoint_dir: str) -> None:
        self.limit = limit
        self.checkpoint_dir = checkpoint_dir
        self._in_a_row = 0

    def check(self, stats: dict[str, Any]) -> None:
        """Counts an iteration's statistics (``skipped`` 1.0: nothing was learned).

        Raises:
            TrainingDivergedError: the limit is reached.
        """
        self._in_a_row = self._in_a_row + 1 if stats.get("skipped") == 1.0 else 0
        if self._in_a_row >= self.limit:
            raise TrainingDivergedError(
                f"Every update of the last {self._in_a_row} iterations had a non-finite "
                f"loss; stopping. The checkpoints in {self.checkpoint_dir} are kept (none is "
                "ever written with non-finite values)."
            )


def _eval_scalars(result: EvalResult, prefix: str = "") -> dict[str, float]:
    """An evaluation's summary scalars, their names prefixed by ``prefix``."""
    scalars = {
        "average_return": result.average_return,
        "return_std": float(np.std(result.returns)),
        "average_episode_length": result.average_episode_length,
        # Only when some were cut (TrainerConfig.max_eval_episode_steps).
        **({"cut_episodes": result.num_cut_episodes} if result.num_cut_episodes else {}),
    }
    if result.success_rate is not None:  # goal environments: info["is_success"]
        scalars["success_rate"] = result.success_rate
    return {prefix + name: value for name, value in scalars.items()}


def _episodes(result: EvalResult) -> dict[str, list]:
    episodes = {
        "returns": [float(r) for r in result.returns],
        "lengths": [int(n) for n in result.lengths],
        "cut": [bool(c) for c in result.cut],
    }
    if result.success_rate is not None:  # NaN (unknown) as None: valid JSON
        episodes["successes"] = [None if s != s else float(s) for s in result.successes]
    return episodes


_NO_OTHERS: Mapping[str, EvalResult] = MappingProxyType({})


def write_eval_summary(
    summary: SummaryLogger,
    result: EvalResult,
    counters: dict[str, Any],
    *,
    summary_step: int,
    others: Mapping[str, EvalResult] = _NO_OTHERS,
    extra_scalars: Mapping[str, float] = MappingProxyType({}),
) -> None:
    """Writes an evaluation's average return and episode length (with the run's
    ``counters``: iteration, env steps, times) and logs it.

    Args:
        summary: the run's summary writer.
        result: the trained policy's evaluation (``eval/average_return``...).
        counters: iteration, env steps and times.
        summary_step: the summaries' x-axis value.
        others: the evaluations of the run's other policies, by name
            (``eval/<name>/average_return``...; ``policies`` in ``evaluations.jsonl``).
        extra_scalars: more figures of the evaluation (``eval/<name>``), e.g. a
            self-play run's win rates against fixed opponents.
    """
    scalars = _eval_scalars(result)
    for name, other in others.items():
        scalars.update(_eval_scalars(other, f"{name}/"))
    scalars.update(extra_scalars)
    summary.write(
        "eval",
        scalars,
        counters,
        env_steps=summary_step,
        iteration=counters["iteration"],
    )
    record = {**counters, **_episodes(result)}
    if others:
        record["policies"] = {name: _episodes(other) for name, other in others.items()}
    summary.write_episodes(record)
    rate = result.success_rate
    logging.info(
        "Evaluation at iteration %d (%d env steps): average return %.2f over %d episodes%s",
        counters["iteration"],
        counters["env_steps"],
        result.average_return,
        len(result.returns),
        "" if rate is None else f", success rate {rate:.2f}",
    )


RATE_WINDOW_S = 60.0
"""Seconds of recent progress the console's rate and ETA are measured over."""


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` (hours unbounded), e.g. ``0:04:03``."""
    total = max(0, int(round(seconds)))
    hours, rest = divmod(total, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class RateWindow:
    """Environment steps and iterations per second over the last ``window_s`` seconds,
    measured from the samples given to :meth:`add`.

    :meth:`restart` forgets everything before the newest sample: the trainer calls it
    when training begins after an off-policy run's random warm-up, whose steps are far
    faster than training steps and would make the rate (and ETA) wrong for minutes.

    Args:
        now: the time of the first sample.
        env_steps: the run's environment steps then.
        iteration: the run's iteration then.
        window_s: seconds of samples kept (at least this span is measured over).
        resolution_s: samples closer than this to the previous one replace it.
    """

    def __init__(
        self,
        *,
        now: float,
        env_steps: int,
        iteration: int,
        window_s: float = RATE_WINDOW_S,
        resolution_s: float = 0.25,
    ) -> None:
        self.window_s = window_s
        self.resolution_s = resolution_s
        self._samples: collections.deque[tuple[float, int, int]] = collections.deque(
            [(now, env_steps, iteration)]
        )

    def add(self, now: float, env_steps: int, iteration: int) -> None:
        """Records the run's counts at time ``now``."""
        samples = self._samples
        if len(samples) >= 2 and now - samples[-2][0] < self.resolution_s:
            samples[-1] = (now, env_steps, iteration)
        else:
            samples.append((now, env_steps, iteration))
        # Keep one sample at or before the window's start, so the span is >= window_s.
        while len(samples) > 2 and samples[1][0] <= now - self.window_s:
            samples.popleft()

    def restart(self) -> None:
        """Measures from the newest sample on."""
        self._samples = collections.deque([self._samples[-1]])

    def rates(self) -> tuple[float, float] | None:
        """``(env steps per second, iterations per second)``, or None before two
        samples."""
        if len(self._samples) < 2:
            return None
        (t0, steps0, it0), (t1, steps1, it1) = self._samples[0], self._samples[-1]
        span = t1 - t0
        if span <= 0:
            return None
        return (steps1 - steps0) / span, (it1 - it0) / span


class TrainingReport:
    """Collects the rates and episodes of the iterations of one session, and reports them:
    :meth:`write_summary` (the train summary, from every rank's figures) and
    :meth:`print_progress` (a console line).

    The console line's rate and ETA are measured over the last :data:`RATE_WINDOW_S`
    seconds of wall time (evaluations and checkpoints included), and only since training
    began: iterations that collected without training (an off-policy run's random
    warm-up, ``TrainerConfig.initial_collect_steps``) are much faster, so while they last
    the ETA is ``n/a``, and once training starts they are not counted.

    Args:
        summary: where rank 0 writes (None on the other ranks).
        distributed: this rank's context (None: a single process).
        start_iteration: the iteration the session started from.
        start_env_steps: the run's environment steps when the session started.
        groups: each agent's group of a multi-agent run whose agents form several
            (:func:`~alf.trainers.agent_groups.summary_groups`): the train summary also
            has each group's ``<group>/average_return`` (None: only the overall one).
        clock: the time source of the console line (seconds; for tests).
    """

    def __init__(
        self,
        *,
        summary: SummaryLogger | None,
        distributed: DistributedContext | None,
        start_iteration: int,
        start_env_steps: int,
        groups: tuple[str, ...] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.summary = summary
        self.distributed = distributed
        self.start_iteration = start_iteration
        self.start_env_steps = start_env_steps
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=100)
        self.recent_lengths: collections.deque[int] = collections.deque(maxlen=100)
        self.recent_successes: collections.deque[float] = collections.deque(
            maxlen=SUCCESS_WINDOW
        )
        """The known successes (goal environments) of the last episodes that had one."""
        self.group_returns = None if groups is None else GroupReturns(groups=groups)
        self._window_steps = 0
        self._window_time = 0.0
        self._clock = clock
        self._last_print = clock()
        self._rates = RateWindow(
            now=self._last_print, env_steps=start_env_steps, iteration=start_iteration
        )
        self._training = False  # whether an iteration of this session trained yet
        self._restart_rates = False

    def add_iteration(
        self,
        steps: int,
        elapsed_s: float,
        episodes: CompletedEpisodes,
        *,
        trained: bool = True,
    ) -> None:
        """Counts an iteration of this rank: its env steps, time and finished episodes
        (:meth:`~alf.unrollers.Collector.pop_episodes`); ``trained``: whether it trained
        (False: it only collected, e.g. random warm-up)."""
        self._window_steps += steps
        self._window_time += elapsed_s
        self.recent_returns.extend(episodes.returns)
        self.recent_lengths.extend(episodes.lengths)
        self.recent_successes.extend(s for s in episodes.successes if s == s)  # known ones
        if self.group_returns is not None and episodes.returns:
            self.group_returns.add(episodes.returns, episodes.env_ids)
        if trained and not self._training:
            self._training = True
            self._restart_rates = True

    def write_summary(
        self,
        iteration: int,
        scalars: dict[str, Any],
        record: dict[str, Any],
        *,
        env_steps: int,
        clipped_actions: int,
        dropped_episodes: int | None = None,
    ) -> None:
        """Writes the train summary: ``scalars`` plus the env steps per second, clipped
        actions, (when not None) episodes dropped for non-finite data, and average
        return and episode length over all ranks (the last 100 episodes of each; with
        ``groups``, each group's ``<group>/average_return`` too, over the last 100 episodes
        of the group on each rank; in goal environments ``success_rate``, over the last
        :data:`~alf.unrollers.episode_tracker.SUCCESS_WINDOW` known successes of each
        rank), and ``record`` plus ``fps`` (and ``fps_per_rank``) as
        the ``progress.jsonl`` line, at the run's ``env_steps``. In a data-parallel run
        every rank must call it (it gathers the ranks' figures); rank 0 writes."""
        groups = self.group_returns
        local = [
            self._window_steps / max(self._window_time, 1e-9),
            sum(self.recent_returns),
            sum(self.recent_lengths),
            len(self.recent_returns),
            clipped_actions,
            dropped_episodes or 0,
            sum(self.recent_successes),
            len(self.recent_successes),
            *(groups.figures() if groups is not None else ()),
        ]
        self._window_steps, self._window_time = 0, 0.0
        if self.distributed is None:
            per_rank = [local]
        else:
            per_rank = self.distributed.all_gather(local, what="the train summary")
        if self.summary is None:
            return
        totals = [sum(column) for column in zip(*per_rank, strict=True)]
        fps, returns, lengths, episodes, clipped, dropped, successes, known, *group_figures = (
            totals
        )
        scalars = {**scalars, "env_steps_per_second": fps, "clipped_actions": clipped}
        if dropped_episodes is not None:
            scalars["dropped_nonfinite_episodes"] = dropped
        if episodes:
            scalars["average_return"] = returns / episodes
            scalars["average_episode_length"] = lengths / episodes
        if known:  # goal environments: info["is_success"]
            scalars["success_rate"] = successes / known
        if groups is not None:
            scalars.update(groups.scalars(group_figures))
        record = {**record, "fps": round(fps, 1)}
        if self.distributed is not None:
            record["fps_per_rank"] = [round(row[0], 1) for row in per_rank]
        self.summary.write("train", scalars, record, env_steps=env_steps, iteration=iteration)

    def print_progress(
        self,
        iteration: int,
        env_steps: int,
        *,
        elapsed_s: float,
        interval_s: float,
        num_env_steps: int,
        num_iterations: int,
    ) -> str | None:
        """Logs :meth:`progress_line` if ``interval_s`` has passed since the last line;
        returns the line (None if not yet). Call it after every iteration (it also
        samples the rate)."""
        now = self._clock()
        line = self.progress_line(
            iteration,
            env_steps,
            elapsed_s=elapsed_s,
            num_env_steps=num_env_steps,
            num_iterations=num_iterations,
            now=now,
        )
        if now - self._last_print < interval_s:
            return None
        self._last_print = now
        logging.info("%s", line)
        return line

    def progress_line(
        self,
        iteration: int,
        env_steps: int,
        *,
        elapsed_s: float,
        num_env_steps: int,
        num_iterations: int,
        now: float | None = None,
    ) -> str:
        """Samples the rate at ``now`` and returns the console line, e.g. ``iteration 120
        | env steps 245760 (24.6%) | 1012 steps/s | return 1234.56 | elapsed 0:04:03 |
        ETA 0:12:25`` (this rank's recent returns; ``elapsed_s``: the run's wall time
        over all sessions)."""
        now = self._clock() if now is None else now
        if self._restart_rates:
            self._restart_rates = False
            self._rates.restart()
        self._rates.add(now, env_steps, iteration)
        step_rate, iteration_rate = self._rates.rates() or (0.0, 0.0)
        fractions = []
        etas = []
        if num_env_steps > 0:
            fractions.append(env_steps / num_env_steps)
            if step_rate > 0:
                etas.append(max(num_env_steps - env_steps, 0) / step_rate)
        if num_iterations > 0:
            fractions.append(iteration / num_iterations)
            if iteration_rate > 0:
                etas.append(max(num_iterations - iteration, 0) / iteration_rate)
        done = min(1.0, max(fractions, default=0.0))
        eta = format_duration(min(etas)) if etas and self._training else "n/a"
        ret = f"{np.mean(self.recent_returns):.2f}" if self.recent_returns else "n/a"
        return (
            f"iteration {iteration} | env steps {env_steps} ({100 * done:.1f}%) | "
            f"{step_rate:.0f} steps/s | return {ret} | elapsed {format_duration(elapsed_s)}"
            f" | ETA {eta}"
        )
