"""User code between iterations: ``TrainerConfig.callbacks``.

A callback is an object with ``on_iteration`` and ``on_evaluation`` methods (subclass
:class:`Callback` and override what you need). The trainer calls them on rank 0 after
every iteration (once the iteration's summary, evaluation and checkpoint are written)
and after every evaluation, with a :class:`TrainingContext`. Returning a string (or
True) asks the run to stop: it checkpoints and ends as ``stopped``, the reason in
``status.json`` and in the last line printed. Bind callbacks in a config::

    TrainerConfig.callbacks = [@StopOnPlateau()]
    StopOnPlateau.patience = 5

An exception raised by a callback is the user's bug: it stops the run with its traceback
(``status.json`` says ``failed``), the checkpoints already written kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from alf.config import configurable, invalid_value

__all__ = ["Callback", "StopOnPlateau", "TrainingContext"]


@dataclass(frozen=True)
class TrainingContext:
    """What a callback sees.

    Attributes:
        root_dir: the run's directory.
        iteration: iterations done so far (over all sessions of the run).
        env_steps: environment steps done so far.
        progress: the fraction of the budget used, in ``[0, 1]``.
        elapsed_s: wall-clock seconds of training, over all sessions.
        stats: this iteration's training statistics (losses and the like) when they
            were recorded (every ``TrainerConfig.summary_interval`` iterations), else
            empty.
        eval_returns: the returns of the episodes of the evaluation just done
            (``on_evaluation``; empty in ``on_iteration``).
    """

    root_dir: str
    iteration: int
    env_steps: int
    progress: float
    elapsed_s: float
    stats: Mapping[str, float] = field(default_factory=dict)
    eval_returns: tuple[float, ...] = ()

    @property
    def eval_average_return(self) -> float | None:
        """The mean of :attr:`eval_returns` (None without an evaluation)."""
        return sum(self.eval_returns) / len(self.eval_returns) if self.eval_returns else None


class Callback:
    """Base of the callbacks: both hooks do nothing; override one or both. A hook that
    returns a non-empty string (the reason) or True stops the run."""

    def on_iteration(self, context: TrainingContext) -> str | bool | None:
        """Called after every iteration."""
        return None

    def on_evaluation(self, context: TrainingContext) -> str | bool | None:
        """Called after every evaluation."""
        return None


@configurable
class StopOnPlateau(Callback):
    """Stops the run when the evaluation return has not improved for ``patience``
    evaluations in a row (early stopping on a plateau).

    Args:
        patience: evaluations without improvement that stop the run (>= 1).
        min_delta: an improvement smaller than this does not count (>= 0).
    """

    def __init__(self, *, patience: int = 5, min_delta: float = 0.0) -> None:
        if patience < 1:
            raise invalid_value("StopOnPlateau.patience", patience, ">= 1")
        if min_delta < 0:
            raise invalid_value("StopOnPlateau.min_delta", min_delta, ">= 0")
        self.patience = patience
        self.min_delta = min_delta
        self.best: float | None = None
        self.stale = 0

    def on_evaluation(self, context: TrainingContext) -> str | None:
        """Counts evaluations without improvement; the reason to stop at ``patience``."""
        value = context.eval_average_return
        if value is None:
            return None
        if self.best is None or value > self.best + self.min_delta:
            self.best, self.stale = value, 0
            return None
        self.stale += 1
        if self.stale < self.patience:
            return None
        return (
            f"StopOnPlateau: no evaluation return above {self.best:.2f} (+{self.min_delta}) "
            f"in the last {self.patience} evaluations"
        )


def run_hook(callbacks: Any, hook: str, context: TrainingContext) -> str | None:
    """Calls ``hook`` of every callback; the first reason to stop (a callback returning
    True is named by its class), or None."""
    reason = None
    for callback in callbacks:
        answer = getattr(callback, hook)(context)
        if answer and reason is None:
            reason = answer if isinstance(answer, str) else f"{type(callback).__name__} asked"
    return reason
