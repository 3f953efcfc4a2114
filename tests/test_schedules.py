"""Tests of alf.utils.schedules."""

import pytest

from alf.utils.schedules import (
    ConstantSchedule,
    CosineSchedule,
    LinearSchedule,
    Schedule,
    as_schedule,
)


def test_constant_schedule():
    schedule = ConstantSchedule(value=3)
    assert isinstance(schedule.value, float)
    assert [schedule(p) for p in (0.0, 0.5, 1.0, 7.0)] == [3.0] * 4


def test_linear_schedule_interpolates_and_clamps():
    schedule = LinearSchedule(start=1.0, end=0.2)
    assert schedule(0.0) == pytest.approx(1.0)
    assert schedule(0.5) == pytest.approx(0.6)
    assert schedule(1.0) == pytest.approx(0.2)
    assert schedule(-1.0) == pytest.approx(1.0)
    assert schedule(2.0) == pytest.approx(0.2)


def test_linear_schedule_defaults_to_decay_to_zero():
    schedule = LinearSchedule(start=4.0)
    assert schedule(0.25) == pytest.approx(3.0)
    assert schedule(1.0) == 0.0


def test_as_schedule_wraps_numbers_and_passes_schedules():
    wrapped = as_schedule(5)
    assert isinstance(wrapped, ConstantSchedule) and wrapped(0.9) == 5.0
    linear = LinearSchedule(start=1.0)
    assert as_schedule(linear) is linear


def test_as_schedule_rejects_plain_callables():
    with pytest.raises(TypeError):
        as_schedule(lambda p: p)


def test_base_schedule_is_abstract():
    with pytest.raises(NotImplementedError):
        Schedule()(0.0)


def test_cosine_schedule_anneals_slowly_at_both_ends_and_clamps():
    schedule = CosineSchedule(start=1.0, end=0.2, until=0.5)
    assert schedule(0.0) == pytest.approx(1.0)
    assert schedule(0.25) == pytest.approx(0.6)
    assert schedule(0.5) == pytest.approx(0.2)
    assert schedule(1.0) == pytest.approx(0.2) and schedule(-1.0) == pytest.approx(1.0)
    assert 1.0 - schedule(0.05) < schedule(0.25) - schedule(0.30)
    with pytest.raises(ValueError, match="until"):
        CosineSchedule(start=1.0, until=0.0)
