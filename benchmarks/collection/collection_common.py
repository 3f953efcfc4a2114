"""Shared by the modules of ``collection.py``: the CartPole workload of sections 1 and 2
and the timing helpers its workers use.

Nothing here imports torch, ALF or any environment package at import time, so the parent
process (which imports this module through ``collection.py``) stays light.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

CARTPOLE = "CartPole-v1"
"""Environment of sections 1 (raw env steps/s) and 2 (sampler-only steps/s)."""

RAW_NUM_ENVS = 16
"""Environment count of section 1, and the sampler count compared with its raw rate."""


def rate_loop(step: Callable[[], None], steps_per_call: int, seconds: float,
              warmup_s: float, chunk: int = 20) -> dict[str, float]:
    """Calls ``step`` for ``warmup_s``, then counts calls over ``seconds`` of wall time."""
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        for _ in range(chunk):
            step()
    calls = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(chunk):
            step()
        calls += chunk
        now = time.perf_counter()
        if now >= end:
            break
    elapsed = now - start
    return {"steps_per_s": calls * steps_per_call / elapsed, "calls": calls,
            "measured_s": elapsed}


def timed(fn: Callable[..., Any], sink: list[float],
          cpu_sink: list[float] | None = None) -> Callable[..., Any]:
    """``fn`` wrapped to append each call's wall time (seconds) to ``sink`` and, if
    given, the CPU time of the calling thread to ``cpu_sink``."""
    clock, cpu_clock = time.perf_counter, time.thread_time

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        tick, cpu_tick = clock(), cpu_clock()
        try:
            return fn(*args, **kwargs)
        finally:
            sink.append(clock() - tick)
            if cpu_sink is not None:
                cpu_sink.append(cpu_clock() - cpu_tick)

    return wrapper


def quiet_warnings() -> None:
    """Silences the float64-bounds and MuJoCo deprecation chatter of the envs."""
    import warnings

    warnings.filterwarnings("ignore", message=".*precision lowered.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
