"""Tests of alf.tensor_specs.sample_uniform."""

import numpy as np
import pytest
import torch

from alf.tensor_specs import BoundedTensorSpec, sample_uniform

# Chi-square critical values at p = 0.001 for 2 and 4 degrees of freedom.
CHI2_CRIT = {2: 13.816, 4: 18.467}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _chi_square(counts, expected):
    counts = np.asarray(counts, dtype=np.float64)
    return float(((counts - expected) ** 2 / expected).sum())


def test_discrete_covers_every_value_uniformly():
    """Discrete(3) over 3000 draws hits 0, 1 and 2 about 1000 times each (chi-square at
    p=0.001) and nothing else."""
    spec = BoundedTensorSpec((), torch.int64, 0, 2)
    x = sample_uniform(spec, 3000)
    assert x.shape == (3000,) and x.dtype == torch.int64
    counts = torch.bincount(x, minlength=3)
    assert len(counts) == 3
    assert _chi_square(counts, 1000.0) < CHI2_CRIT[2]
    assert (counts > 850).all()


def test_discrete_with_offset_and_array_bounds():
    """Per-dimension integer bounds (one of them a single value) are inclusive at both
    ends and uniform within."""
    spec = BoundedTensorSpec((3,), torch.int64, np.array([-3, 5, 10]), np.array([1, 5, 11]))
    x = sample_uniform(spec, 5000)
    assert x.shape == (5000, 3)
    assert (x[:, 1] == 5).all()
    assert set(x[:, 2].tolist()) == {10, 11}
    counts = torch.bincount(x[:, 0] + 3, minlength=5)
    assert len(counts) == 5
    assert _chi_square(counts, 1000.0) < CHI2_CRIT[4]


def test_discrete_never_out_of_range():
    """Many draws from small ranges never leave ``[minimum, maximum]``."""
    spec = BoundedTensorSpec((4,), torch.int64, np.array([0, -1, 2, 0]), np.array([1, 0, 3, 0]))
    x = sample_uniform(spec, 200_000)
    low, high = torch.tensor([0, -1, 2, 0]), torch.tensor([1, 0, 3, 0])
    assert (x >= low).all() and (x <= high).all()
    assert torch.equal(x.min(0).values, low) and torch.equal(x.max(0).values, high)


def test_continuous_array_bounds_per_dimension():
    """Floats stay in ``[low, high]`` per dimension and spread over the whole range."""
    low = np.array([-1.0, 0.0, 100.0, -1e-3], dtype=np.float32)
    high = np.array([1.0, 0.5, 101.0, 1e-3], dtype=np.float32)
    spec = BoundedTensorSpec((4,), torch.float32, low, high)
    x = sample_uniform(spec, 20_000)
    assert x.shape == (20_000, 4) and x.dtype == torch.float32
    lo, hi = torch.from_numpy(low), torch.from_numpy(high)
    assert (x >= lo).all() and (x <= hi).all()
    width = hi - lo
    assert (x.min(0).values - lo < 0.01 * width).all()
    assert (hi - x.max(0).values < 0.01 * width).all()
    mean = (x - lo) / width
    assert torch.allclose(mean.mean(0), torch.full((4,), 0.5), atol=0.02)


def test_continuous_scalar_bounds_broadcast_over_shape():
    """Scalar bounds apply to every element of a matrix-shaped spec."""
    spec = BoundedTensorSpec((2, 3), torch.float32, -2.0, 5.0)
    x = sample_uniform(spec, 1000)
    assert x.shape == (1000, 2, 3)
    assert (x >= -2.0).all() and (x <= 5.0).all()
    assert x.std() > 1.5


@pytest.mark.parametrize(
    "dtype, low, high",
    [
        (torch.int64, 0, 9),
        (torch.int32, -4, 4),
        (torch.uint8, 0, 255),
        (torch.bool, 0, 1),
        (torch.float32, -1.0, 1.0),
        (torch.float64, -1.0, 1.0),
    ],
)
def test_dtype_is_preserved(dtype, low, high):
    """The sample has the spec's dtype, and its values stay within its bounds."""
    spec = BoundedTensorSpec((2,), dtype, low, high)
    x = sample_uniform(spec, 2000)
    assert x.dtype == dtype and x.shape == (2000, 2)
    as_float = x.double()
    assert (as_float >= low).all() and (as_float <= high).all()
    if not dtype.is_floating_point:
        assert as_float.min() == low and as_float.max() == high


def test_nest_of_specs():
    """A nest of specs gives the same nest of ``[batch, ...]`` samples."""
    spec = {
        "move": BoundedTensorSpec((2,), torch.float32, -1.0, 1.0),
        "pick": (BoundedTensorSpec((), torch.int64, 0, 3),),
    }
    x = sample_uniform(spec, 7)
    assert set(x) == {"move", "pick"} and isinstance(x["pick"], tuple)
    assert x["move"].shape == (7, 2) and x["pick"][0].shape == (7,)


@pytest.mark.parametrize(
    "low, high",
    [
        (-np.inf, 1.0),
        (0.0, np.inf),
        (np.array([0.0, -np.inf]), np.array([1.0, 1.0])),
        (np.array([0.0, 0.0]), np.array([1.0, np.nan])),
    ],
    ids=["inf-low", "inf-high", "one-inf-dim", "nan-high"],
)
def test_unbounded_spec_raises(low, high):
    """Infinite (or NaN) bounds cannot be sampled uniformly: ValueError."""
    spec = BoundedTensorSpec((2,), torch.float32, low, high)
    with pytest.raises(ValueError):
        sample_uniform(spec, 4)
    with pytest.raises(ValueError):
        sample_uniform({"ok": BoundedTensorSpec((), torch.int64, 0, 1), "bad": spec}, 4)


def _largest_rand(shape, dtype=torch.float32, **kwargs):
    """What ``torch.rand`` can return at most: ``1 - 2^-53`` in float64."""
    return torch.full(shape, 1.0 - 2.0**-53, dtype=dtype)


def test_discrete_largest_draw_stays_at_maximum(monkeypatch):
    """The largest value ``torch.rand`` can give maps to ``maximum``, not beyond."""
    monkeypatch.setattr(torch, "rand", _largest_rand)
    spec = BoundedTensorSpec((2,), torch.int64, np.array([0, -5]), np.array([2, 1000]))
    assert torch.equal(sample_uniform(spec, 3), torch.tensor([[2, 1000]] * 3))


def test_continuous_largest_draw_stays_within_maximum(monkeypatch):
    """Even the largest draw (which float32 rounds up) stays at or below ``maximum``."""
    monkeypatch.setattr(torch, "rand", _largest_rand)
    spec = BoundedTensorSpec((), torch.float32, -1.0, 1.0)
    assert (sample_uniform(spec, 3) <= 1.0).all()
