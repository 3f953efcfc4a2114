"""The pure parts of ``benchmarks/collection/pixel_profile.py``: its statistics, the
training run's progress records and the report (no environment is stepped)."""

from __future__ import annotations

import math
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks.collection.pixel_profile_report import (  # noqa: E402
    iteration_parts,
    queue_summary,
    report,
    round_ratios,
    shares,
    summarize,
)


def test_summarize_skips_empty_contenders():
    stats = summarize({"raw": [3.0, 1.0, 2.0], "learn": []})
    assert stats == {"raw": {"min": 1.0, "median": 2.0, "max": 3.0, "rounds": 3}}


def test_round_ratios_are_raw_over_sampler_microseconds():
    # the sampler at 4x raw's microseconds per step runs at 25% of its rate
    assert round_ratios([100.0, 50.0], [400.0, 100.0]) == [0.25, 0.5]
    with pytest.raises(ValueError):
        round_ratios([1.0], [1.0, 2.0])


def test_shares_sum_to_one_and_survive_zero():
    assert shares({"a": 1.0, "b": 3.0}) == {"a": 0.25, "b": 0.75}
    assert shares({"a": 0.0}) == {"a": 0.0}


def test_iteration_parts_take_the_breakdown_and_the_learner():
    parts = iteration_parts({"read": 8.0, "learn": 900.0, "raw": 1.0},
                            {"env": 100.0, "policy": 400.0, "write": 2.0, "other": 20.0})
    assert sum(parts.values()) == pytest.approx(1430.0)
    assert parts["learner: learn (fwd/bwd/Adam)"] == 900.0


def _record(iteration: int, wait: float, env_steps: int, elapsed: float) -> dict:
    return {"iteration": iteration, "env_steps": env_steps, "elapsed_s": elapsed,
            "train/async/learner_wait_fraction": wait, "train/async/policy_lag_mean": 1.0}


def test_queue_summary_skips_start_up_and_evaluations():
    records = [_record(1, 0.9, 1024, 10.0), {"iteration": 1, "average_return": -21.0},
               _record(2, 0.1, 2048, 30.0), _record(3, 0.3, 3072, 40.0)]
    q = queue_summary(records, skip=1)
    assert q["records"] == 2
    assert q["learner_wait_fraction"] == pytest.approx(0.2)
    assert q["policy_lag_mean"] == 1.0
    assert q["env_steps_per_s"] == pytest.approx(1024 / 10.0)
    assert queue_summary(records[:2], skip=1) == {}


def test_report_reads_a_result():
    times = {"raw": [100.0, 120.0], "sampler": [400.0, 600.0], "learn": [900.0]}
    results = {
        "machine": {"nproc": 2, "cpu_model": "x"},
        "uptime_start": "up", "uptime_end": "up",
        "worker": {
            "settings": {"env_name": "Pong", "envs_per_actor": 4, "num_envs": 8,
                         "num_actors": 2, "unroll_length": 128, "fragments_per_iteration": 2},
            "envpool_num_threads": {"raw": 0, "alf": 0}, "torch_num_threads": 1,
            "times_us": times,
            "breakdown_us": {"env": [50.0], "policy": [300.0], "write": [1.0], "other": [9.0]},
        },
        "train": {"rc": 0, "wall_s": 60.0, "uptime": "up", "last": {"env_steps": 3072},
                  "summary": {"records": 2.0, "learner_wait_fraction": 0.05,
                              "policy_lag_mean": 1.5, "env_steps_per_s": math.nan}},
    }
    text = report(results)
    assert "median 22.5% (target >= 50%: NOT met)" in text
    assert "learner waiting for fragments" in text and "5.0%" in text


def test_raw_vizdoom_steps_the_preset_envs_and_resets_them():
    """The raw contender of a VizDoom config: the preset's environments (frame skip,
    resize) stepped in turn, each reset when its episode ends."""
    pytest.importorskip("vizdoom")
    from benchmarks.collection.pixel_profile import _raw_pool

    raw = _raw_pool("VizdoomBasic-v1", 2, "vizdoom")
    try:
        assert len(raw.envs) == 2 and raw.config == {"num_threads": None}
        assert raw.envs[0].observation_space["screen"].shape == (3, 72, 128)
        resets = []
        for i, env in enumerate(raw.envs):
            reset = env.reset
            env.reset = lambda i=i, reset=reset, **kw: (resets.append(i), reset(**kw))[1]
        for _ in range(80):  # Basic times out after 300 tics = 75 steps: both reset
            raw.step([0, 0])
        assert sorted(resets) == [0, 1]
    finally:
        raw.close()
