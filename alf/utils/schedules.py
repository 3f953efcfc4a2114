"""Schedules: values that change with training progress (0 at the start, 1 at the end).

Progress is the fraction of the run's budget (``num_env_steps`` or ``num_iterations``)
that has been used, so a schedule needs no knowledge of the budget itself.
"""

from __future__ import annotations

import math

from alf.config import configurable

__all__ = ["ConstantSchedule", "CosineSchedule", "LinearSchedule", "Schedule", "as_schedule"]


class Schedule:
    """A value as a function of training progress in ``[0, 1]``."""

    def __call__(self, progress: float) -> float:
        raise NotImplementedError


@configurable
class ConstantSchedule(Schedule):
    """Always ``value``."""

    def __init__(self, *, value: float) -> None:
        self.value = float(value)

    def __call__(self, progress: float) -> float:
        return self.value

    def __repr__(self) -> str:
        return f"ConstantSchedule({self.value})"


@configurable
class LinearSchedule(Schedule):
    """Moves linearly from ``start`` at progress 0 to ``end`` at progress ``until``,
    then stays at ``end``.

    Args:
        start: value at the start of training.
        end: value at the end of the ramp (default 0, i.e. linear decay).
        until: progress (fraction of the budget) at which ``end`` is reached; e.g. 0.1
            for an exploration rate that decays over the first tenth of the run.
    """

    def __init__(self, *, start: float, end: float = 0.0, until: float = 1.0) -> None:
        if not 0.0 < until <= 1.0:
            raise ValueError(f"LinearSchedule.until must be in (0, 1], got {until}")
        self.start = float(start)
        self.end = float(end)
        self.until = float(until)

    def __call__(self, progress: float) -> float:
        progress = min(max(progress / self.until, 0.0), 1.0)
        return self.start + (self.end - self.start) * progress

    def __repr__(self) -> str:
        return f"LinearSchedule({self.start}, {self.end}, until={self.until})"


@configurable
class CosineSchedule(Schedule):
    """Cosine annealing: from ``start`` at progress 0 to ``end`` at progress ``until``
    along half a cosine period (slow at both ends), then stays at ``end``; e.g. the
    actor learning rate of IQL (``torch.optim.lr_scheduler.CosineAnnealingLR`` over the
    whole run, with ``end`` its ``eta_min``).

    Args:
        start: value at the start of training.
        end: value at ``until`` (default 0).
        until: progress (fraction of the budget) at which ``end`` is reached.
    """

    def __init__(self, *, start: float, end: float = 0.0, until: float = 1.0) -> None:
        if not 0.0 < until <= 1.0:
            raise ValueError(f"CosineSchedule.until must be in (0, 1], got {until}")
        self.start = float(start)
        self.end = float(end)
        self.until = float(until)

    def __call__(self, progress: float) -> float:
        progress = min(max(progress / self.until, 0.0), 1.0)
        return self.end + (self.start - self.end) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def __repr__(self) -> str:
        return f"CosineSchedule({self.start}, {self.end}, until={self.until})"


def as_schedule(value: float | Schedule) -> Schedule:
    """Wraps a plain number in a :class:`ConstantSchedule`."""
    if isinstance(value, Schedule):
        return value
    if callable(value):
        raise TypeError(f"Expected a number or a Schedule, got {value!r}")
    return ConstantSchedule(value=float(value))
