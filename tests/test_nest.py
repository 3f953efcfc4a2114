"""Tests of alf.nest: map/flatten/pack over namedtuples and dicts, stack, structure checks."""

from collections import namedtuple

import pytest
import torch

from alf import nest
from alf.data_structures import AlgStep, TimeStep

Pair = namedtuple("Pair", ["a", "b", "c"])


def _sample():
    return Pair(
        a=torch.tensor([1.0, 2.0]),
        b=None,
        c={"y": torch.tensor([3.0]), "x": (torch.tensor([4, 5]), torch.tensor(6.0))},
    )


def test_flatten_skips_none_and_orders_dict_keys():
    leaves = nest.flatten(_sample())
    assert len(leaves) == 4
    # Dict keys are visited in sorted order, so "x" comes before "y".
    assert torch.equal(leaves[0], torch.tensor([1.0, 2.0]))
    assert torch.equal(leaves[1], torch.tensor([4, 5]))
    assert torch.equal(leaves[2], torch.tensor(6.0))
    assert torch.equal(leaves[3], torch.tensor([3.0]))


def test_flatten_pack_round_trip_keeps_types_and_none():
    x = _sample()
    packed = nest.pack_sequence_as(x, nest.flatten(x))
    assert isinstance(packed, Pair)
    assert packed.b is None
    assert isinstance(packed.c, dict) and set(packed.c) == {"x", "y"}
    assert isinstance(packed.c["x"], tuple)
    for u, v in zip(nest.flatten(packed), nest.flatten(x), strict=True):
        assert u is v


def test_pack_sequence_as_places_leaves_by_flatten_order():
    x = _sample()
    packed = nest.pack_sequence_as(x, [10, 20, 30, 40])
    assert packed == Pair(a=10, b=None, c={"x": (20, 30), "y": 40})


def test_pack_sequence_as_wrong_number_of_leaves_raises():
    with pytest.raises(ValueError):
        nest.pack_sequence_as(_sample(), [1, 2])


def test_map_structure_single_and_multiple_nests():
    x = _sample()
    doubled = nest.map_structure(lambda t: t * 2, x)
    assert isinstance(doubled, Pair) and doubled.b is None
    assert torch.equal(doubled.a, torch.tensor([2.0, 4.0]))
    assert torch.equal(doubled.c["x"][0], torch.tensor([8, 10]))
    summed = nest.map_structure(lambda u, v: u + v, x, doubled)
    assert torch.equal(summed.c["y"], torch.tensor([9.0]))
    assert torch.equal(summed.c["x"][1], torch.tensor(18.0))


def test_map_structure_with_path_gives_dotted_paths():
    x = {"obs": {"pos": torch.zeros(1), "vel": torch.zeros(1)}, "r": torch.zeros(1)}
    paths = nest.map_structure_with_path(lambda path, leaf: path, x)
    assert paths == {"obs": {"pos": "obs.pos", "vel": "obs.vel"}, "r": "r"}


def test_map_structure_over_time_step_with_empty_env_info():
    ts = TimeStep(
        step_type=torch.zeros(3, dtype=torch.int32),
        reward=torch.ones(3),
        discount=torch.ones(3),
        observation={"o": torch.ones(3, 2)},
        prev_action=torch.zeros(3, dtype=torch.int64),
        env_id=torch.arange(3),
    )
    first_two = nest.map_structure(lambda t: t[:2], ts)
    assert isinstance(first_two, TimeStep)
    assert first_two.env_info == ()
    assert first_two.observation["o"].shape == (2, 2)
    assert torch.equal(first_two.env_id, torch.tensor([0, 1]))


def test_stack_adds_a_leading_dimension():
    rows = [
        AlgStep(output=torch.full((2,), float(i)), state=None, info={"v": torch.full((2, 3), i)})
        for i in range(4)
    ]
    stacked = nest.stack(rows)
    assert isinstance(stacked, AlgStep)
    assert stacked.state is None
    assert stacked.output.shape == (4, 2)
    assert stacked.info["v"].shape == (4, 2, 3)
    assert torch.equal(stacked.output[:, 0], torch.arange(4.0))
    stacked1 = nest.stack(rows, dim=1)
    assert stacked1.info["v"].shape == (2, 4, 3)


def test_assert_same_structure_accepts_equal_structures():
    x = _sample()
    nest.assert_same_structure(x, nest.map_structure(lambda t: t + 1, x))


@pytest.mark.parametrize(
    "other",
    [
        Pair(a=1, b=2, c=3),
        Pair(a=torch.zeros(1), b=None, c={"y": 1, "z": (1, 2)}),
        (torch.zeros(1), None, {"y": 1, "x": (1, 2)}),
    ],
)
def test_assert_same_structure_raises_for_different_structures(other):
    with pytest.raises(ValueError, match="different structures"):
        nest.assert_same_structure(_sample(), other)


def test_batch_size():
    assert nest.batch_size({"a": torch.tensor(1.0), "b": torch.zeros(7, 2)}) == 7
    with pytest.raises(ValueError):
        nest.batch_size({"a": torch.tensor(1.0)})
