"""Tests of alf.tensor_specs: conversion from gymnasium spaces and zero tensors."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.tensor_specs import BoundedTensorSpec, TensorSpec, from_gym_space, zeros_from_spec


def test_box_float64_becomes_float32_with_bounds():
    space = gym.spaces.Box(low=-2.0, high=np.array([1.0, 2.0, 3.0]), dtype=np.float64)
    spec = from_gym_space(space)
    assert isinstance(spec, BoundedTensorSpec)
    assert spec.shape == (3,)
    assert spec.dtype == torch.float32
    assert not spec.is_discrete
    np.testing.assert_array_equal(spec.minimum, [-2.0, -2.0, -2.0])
    np.testing.assert_array_equal(spec.maximum, [1.0, 2.0, 3.0])
    assert spec.numel == 3


def test_box_uint8_keeps_its_dtype():
    spec = from_gym_space(gym.spaces.Box(0, 255, (4, 4, 3), dtype=np.uint8))
    assert spec.dtype == torch.uint8
    assert spec.shape == (4, 4, 3)
    assert spec.numel == 48
    assert spec.is_discrete


@pytest.mark.parametrize("dtype", [np.int16, np.uint16])
def test_box_other_integer_dtypes_stay_integer(dtype):
    spec = from_gym_space(gym.spaces.Box(0, 10, (2,), dtype=dtype))
    assert not spec.dtype.is_floating_point


def test_discrete_is_scalar_int64_with_num_actions():
    spec = from_gym_space(gym.spaces.Discrete(5))
    assert spec.shape == ()
    assert spec.dtype == torch.int64
    assert spec.is_discrete
    assert spec.minimum == 0 and spec.maximum == 4
    assert spec.num_actions == 5
    shifted = from_gym_space(gym.spaces.Discrete(3, start=2))
    assert (shifted.minimum, shifted.maximum, shifted.num_actions) == (2, 4, 3)


def test_num_actions_needs_scalar_discrete_spec():
    with pytest.raises(ValueError):
        _ = BoundedTensorSpec((2,), torch.float32, -1.0, 1.0).num_actions
    with pytest.raises(ValueError):
        _ = from_gym_space(gym.spaces.MultiDiscrete([2, 3])).num_actions


def test_multi_discrete_and_multi_binary():
    spec = from_gym_space(gym.spaces.MultiDiscrete([3, 4, 2]))
    assert spec.shape == (3,)
    assert spec.dtype == torch.int64
    np.testing.assert_array_equal(spec.minimum, [0, 0, 0])
    np.testing.assert_array_equal(spec.maximum, [2, 3, 1])
    binary = from_gym_space(gym.spaces.MultiBinary(4))
    assert binary.shape == (4,) and binary.dtype == torch.int64
    assert (binary.minimum, binary.maximum) == (0, 1)


def test_dict_and_tuple_become_nests():
    space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (2, 2), dtype=np.uint8),
            "extra": gym.spaces.Tuple(
                (gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32))
            ),
        }
    )
    spec = from_gym_space(space)
    assert isinstance(spec, dict) and set(spec) == {"image", "extra"}
    assert spec["image"].dtype == torch.uint8
    assert isinstance(spec["extra"], tuple) and len(spec["extra"]) == 2
    assert spec["extra"][0].num_actions == 3
    assert spec["extra"][1].shape == (2,) and spec["extra"][1].dtype == torch.float32

    zeros = zeros_from_spec(spec, (5,))
    assert zeros["image"].shape == (5, 2, 2) and zeros["image"].dtype == torch.uint8
    assert zeros["extra"][0].shape == (5,) and zeros["extra"][0].dtype == torch.int64
    assert zeros["extra"][1].shape == (5, 2)
    assert all(bool((z == 0).all()) for z in (zeros["image"], *zeros["extra"]))


def test_unsupported_space_raises_type_error():
    space = gym.spaces.Text(max_length=5)
    with pytest.raises(TypeError, match="Text"):
        from_gym_space(space)


def test_zeros_shapes_and_dtypes():
    spec = TensorSpec((3, 2), torch.int32)
    assert spec.zeros().shape == (3, 2)
    z = spec.zeros((4, 5))
    assert z.shape == (4, 5, 3, 2) and z.dtype == torch.int32 and not z.any()
    scalar = TensorSpec(())
    assert scalar.zeros((7,)).shape == (7,)
    assert scalar.numel == 1
    assert scalar.dtype == torch.float32


def test_bounded_spec_equality_compares_bounds():
    a = BoundedTensorSpec((2,), torch.float32, np.array([-1.0, -1.0]), np.array([1.0, 1.0]))
    b = BoundedTensorSpec((2,), torch.float32, np.array([-1.0, -1.0]), np.array([1.0, 1.0]))
    c = BoundedTensorSpec((2,), torch.float32, np.array([-1.0, -2.0]), np.array([1.0, 1.0]))
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert a != TensorSpec((2,), torch.float32)


def test_bounded_spec_repr_is_one_short_line():
    """Error messages print specs: a board's bounds do not spill over many lines."""
    board = BoundedTensorSpec(
        shape=(6, 7, 2), dtype=torch.int64, minimum=np.zeros((6, 7, 2)), maximum=np.ones((6, 7, 2))
    )
    assert repr(board) == (
        "BoundedTensorSpec(shape=(6, 7, 2), dtype=torch.int64, minimum=0.0, maximum=1.0)"
    )
    ramp = repr(BoundedTensorSpec(shape=(17,), minimum=np.arange(17.0), maximum=np.inf))
    assert "\n" not in ramp and "..." in ramp and "16." in ramp and "maximum=inf" in ramp
