"""Tests of alf.replay_buffers.SumTree: sums, duplicates, prefix search, sampling, errors."""

import math

import pytest
import torch

from alf.replay_buffers import SumTree, sum_tree

# Upper 0.1% points of the chi-square distribution, by degrees of freedom.
CHI2_CRITICAL_P001 = {4: 18.467, 5: 20.515, 7: 24.322, 9: 27.877}


@pytest.fixture(params=["default", "small"])
def geometry(request, monkeypatch):
    """The default tree, and one with blocks of 4 and a top of at most 8 sums, so that
    even small capacities have many levels to descend."""
    if request.param == "small":
        monkeypatch.setattr(sum_tree, "_FANOUT", 4)
        monkeypatch.setattr(sum_tree, "_TOP_SIZE", 8)
    return request.param


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs.double() / probs.double().sum() * counts.sum()
    return float(((counts.double() - expected) ** 2 / expected).sum())


def test_totals_and_values_after_updates(geometry):
    tree = SumTree(capacity=10)
    assert tree.total == 0.0 and tree.capacity == 10
    tree.update(torch.tensor([0, 3, 9]), torch.tensor([1.5, 2.0, 4.0]))
    assert tree.total == 7.5
    tree.update(torch.tensor([3]), torch.tensor([0.25]))
    assert tree.total == 5.75
    assert tree.get(torch.tensor([0, 3, 9, 5])).tolist() == [1.5, 0.25, 4.0, 0.0]
    tree.update(torch.tensor([0, 9]), 0.0)  # a scalar broadcasts
    assert tree.total == 0.25
    assert tree.leaf_values().dtype == torch.float64


@pytest.mark.parametrize("capacity", [7, 5000, 300_000, 3_000_000])
def test_totals_match_a_reference_over_many_random_updates(capacity, geometry):
    """Capacities of one to three levels (many more in the small geometry); the sums are
    recomputed from the leaves, so they stay exact for integer values."""
    g = torch.Generator().manual_seed(capacity)
    tree = SumTree(capacity=capacity)
    reference = torch.zeros(capacity, dtype=torch.float64)
    for _ in range(50):
        idx = torch.randint(0, capacity, (64,), generator=g)
        vals = torch.randint(0, 100, (64,), generator=g).double()
        tree.update(idx, vals)
        for i, v in zip(idx.tolist(), vals.tolist(), strict=True):  # last write wins
            reference[i] = v
        assert tree.total == float(reference.sum())
    assert torch.equal(tree.leaf_values(), reference)


def test_duplicate_indices_last_write_wins(geometry):
    tree = SumTree(capacity=200)
    tree.update(torch.tensor([3, 3, 150, 3, 150, 7]), torch.tensor([1.0, 2.0, 8.0, 5.0, 0.5, 1.0]))
    assert tree.get(torch.tensor([3, 150, 7])).tolist() == [5.0, 0.5, 1.0]
    assert tree.total == 6.5
    # Many duplicates of one index, then of several.
    idx = torch.tensor([42] * 100)
    tree.update(idx, torch.arange(100.0))
    assert tree.get(torch.tensor([42])).item() == 99.0
    assert tree.total == 6.5 + 99.0


def test_find_on_hand_computed_prefix_sums(geometry):
    tree = SumTree(capacity=10_000)  # leaves spread over several blocks and levels
    #           idx:  0    1    2    70   71   4100  9999
    idx = torch.tensor([0, 1, 2, 70, 71, 4100, 9999])
    tree.update(idx, torch.tensor([1.0, 0.0, 2.0, 0.0, 3.0, 4.0, 0.5]))
    # cumsum before each positive leaf: 0 -> 0, 2 -> 1, 71 -> 3, 4100 -> 6, 9999 -> 10
    u = torch.tensor([0.0, 0.999, 1.0, 2.999, 3.0, 5.999, 6.0, 9.999, 10.0, 10.49])
    expected = [0, 0, 2, 2, 71, 71, 4100, 4100, 9999, 9999]
    assert tree.find(u).tolist() == expected
    assert tree.total == 10.5
    # u is clamped into [0, total): at or past the total gives the last positive leaf,
    # below 0 the first one.
    assert tree.find(torch.tensor([10.5, 1e9, -3.0])).tolist() == [9999, 9999, 0]
    assert tree.find(torch.tensor([[0.5, 3.5]])).shape == (1, 2)


def test_find_agrees_with_a_cumsum_search(geometry):
    g = torch.Generator().manual_seed(1)
    capacity = 1_000_000
    tree = SumTree(capacity=capacity)
    values = torch.zeros(capacity, dtype=torch.float64)
    idx = torch.randint(0, capacity, (3000,), generator=g)
    values[idx] = torch.randint(1, 10, (3000,), generator=g).double()
    tree.reset(values)
    cumsum = values.cumsum(0)
    u = torch.rand(20_000, dtype=torch.float64, generator=g) * cumsum[-1]
    assert torch.equal(tree.find(u), torch.searchsorted(cumsum, u, right=True))


def test_zero_leaves_are_never_returned(geometry):
    g = torch.Generator().manual_seed(2)
    tree = SumTree(capacity=4096 * 3)
    values = torch.rand(4096 * 3, generator=g, dtype=torch.float64)
    values[torch.rand(4096 * 3, generator=g) < 0.7] = 0.0
    values[:64] = 0.0  # a whole block of zeros
    values[-1] = 0.0  # and the last leaf
    tree.reset(values)
    # Boundaries: every prefix sum itself, and values at and above the total.
    cumsum = values.cumsum(0)
    u = torch.cat([cumsum, torch.tensor([0.0, tree.total, tree.total * 2])])
    found = tree.find(u)
    assert bool((values[found] > 0).all())
    assert bool((values[tree.sample(50_000, generator=g)] > 0).all())
    # Tiny values next to large ones.
    tree = SumTree(capacity=3)
    tree.update(torch.tensor([0, 2]), torch.tensor([1e300, 1e-300], dtype=torch.float64))
    assert set(tree.find(torch.linspace(0, 2e300, 101, dtype=torch.float64)).tolist()) <= {0, 2}


def test_sampling_frequencies_match_values(geometry):
    g = torch.Generator().manual_seed(3)
    capacity = 100_000
    tree = SumTree(capacity=capacity)
    idx = torch.tensor([5, 64, 999, 4096, 4097, 50_000, 77_777, 80_000, 99_999, 12])
    vals = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5, 6.0, 7.0, 1.5, 9.0, 2.5])
    tree.update(idx, vals)
    samples = tree.sample(200_000, generator=g)
    assert set(samples.tolist()) <= set(idx.tolist())
    counts = torch.bincount(samples, minlength=capacity)[idx]
    assert _chi_square(counts, vals) < CHI2_CRITICAL_P001[9]
    # The test has power: uniform frequencies would fail it.
    assert _chi_square(counts, torch.ones(10)) > CHI2_CRITICAL_P001[9]


def test_sampling_follows_updates(geometry):
    g = torch.Generator().manual_seed(4)
    tree = SumTree(capacity=8)
    tree.update(torch.arange(8), torch.ones(8))
    tree.update(torch.tensor([0, 1, 2]), torch.tensor([0.0, 0.0, 5.0]))
    samples = tree.sample(100_000, generator=g)
    counts = torch.bincount(samples, minlength=8)
    assert counts[0] == 0 and counts[1] == 0
    assert _chi_square(counts[2:], torch.tensor([5.0, 1, 1, 1, 1, 1])) < CHI2_CRITICAL_P001[5]


def test_sampling_is_reproducible_with_a_generator():
    tree = SumTree(capacity=1000)
    tree.update(torch.arange(1000), torch.rand(1000, generator=torch.Generator().manual_seed(0)))
    a = tree.sample(100, generator=torch.Generator().manual_seed(7))
    b = tree.sample(100, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_max_value_is_the_largest_value_ever_set():
    tree = SumTree(capacity=10)
    assert tree.max_value == 0.0
    tree.update(torch.tensor([1, 2]), torch.tensor([3.0, 7.0]))
    assert tree.max_value == 7.0
    tree.update(torch.tensor([2]), torch.tensor([1.0]))
    assert tree.max_value == 7.0  # not lowered with the leaf
    tree.reset()
    assert tree.max_value == 0.0 and tree.total == 0.0
    tree.reset(torch.arange(10.0), max_value=20.0)
    assert tree.max_value == 20.0 and tree.total == 45.0


def test_errors_on_bad_values_and_indices():
    tree = SumTree(capacity=10)
    tree.update(torch.tensor([0]), torch.tensor([1.0]))
    for bad in (-1.0, math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="finite and >= 0"):
            tree.update(torch.tensor([1, 2]), torch.tensor([1.0, bad]))
    assert tree.total == 1.0  # nothing was written
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        tree.update(torch.tensor([10]), torch.tensor([1.0]))
    with pytest.raises(IndexError):
        tree.get(torch.tensor([-1]))
    with pytest.raises(TypeError):
        tree.update(torch.tensor([1.0]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="2 indices but 3 values"):
        tree.update(torch.tensor([1, 2]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.reset(torch.full((10,), -1.0))
    with pytest.raises(ValueError, match="capacity"):
        SumTree(capacity=0)
    empty = SumTree(capacity=4)
    with pytest.raises(ValueError, match="positive total"):
        empty.sample(3)
    with pytest.raises(ValueError, match="positive total"):
        empty.find(torch.tensor([0.0]))
