"""Tests of alf.data_structures."""

import pytest
import torch

from alf import nest
from alf.data_structures import AlgStep, Experience, LossInfo, StepType, TimeStep


def _time_step():
    return TimeStep(
        step_type=torch.tensor([StepType.FIRST, StepType.MID, StepType.LAST], dtype=torch.int32),
        reward=torch.tensor([0.0, 1.0, 2.0]),
        discount=torch.tensor([1.0, 1.0, 0.0]),
        observation={"pos": torch.arange(6.0).reshape(3, 2)},
        prev_action=torch.tensor([0, 1, 1]),
        env_id=torch.arange(3),
    )


def test_step_type_values_are_distinct():
    assert len({StepType.FIRST, StepType.MID, StepType.LAST}) == 3


def test_is_first_and_is_last():
    ts = _time_step()
    assert ts.is_first().tolist() == [True, False, False]
    assert ts.is_last().tolist() == [False, False, True]
    assert ts.env_info == ()


def test_alg_step_defaults_are_empty():
    step = AlgStep()
    assert step.output == () and step.state == () and step.info == ()
    assert nest.flatten(step) == []


def test_experience_round_trip_with_time_step():
    ts = _time_step()
    action = torch.tensor([1, 0, 1])
    exp = Experience.from_time_step(ts, action, rollout_info={"v": torch.ones(3)})
    assert exp.action is action
    assert exp.state == ()
    assert torch.equal(exp.rollout_info["v"], torch.ones(3))
    back = exp.to_time_step()
    assert isinstance(back, TimeStep)
    for field in ("step_type", "reward", "discount", "prev_action", "env_id"):
        assert getattr(back, field) is getattr(ts, field)
    assert back.observation is ts.observation


def test_experience_is_a_nest_of_tensors():
    exp = Experience.from_time_step(_time_step(), torch.zeros(3))
    sliced = nest.map_structure(lambda t: t[1:], exp)
    assert isinstance(sliced, Experience)
    assert sliced.observation["pos"].shape == (2, 2)
    assert sliced.rollout_info == ()


def test_loss_info_default_extra_is_empty():
    info = LossInfo(loss=torch.tensor(1.0))
    assert info.extra == {}


def test_loss_info_default_extra_is_not_shared():
    # The default is an immutable empty mapping, so it can never leak between instances.
    first = LossInfo(loss=torch.tensor(1.0))
    with pytest.raises(TypeError):
        first.extra["leak"] = torch.tensor(0.0)
    assert dict(LossInfo(loss=torch.tensor(2.0)).extra) == {}
