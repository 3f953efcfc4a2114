"""Tests of alf.utils.value_ops against a direct implementation of the GAE recursion."""

import numpy as np
import pytest
import torch

from alf.data_structures import StepType
from alf.utils.value_ops import generalized_advantage_estimation, valid_mask

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST


def _random_trajectory(rng, num_rows, batch):
    """``[T+1, B]`` rows of episodes of random lengths, ending by termination (discount 0)
    or truncation (discount 1), each LAST followed by a FIRST with reward 0."""
    step_types = np.zeros((num_rows, batch), dtype=np.int32)
    discounts = np.ones((num_rows, batch), dtype=np.float32)
    rewards = rng.normal(size=(num_rows, batch)).astype(np.float32)
    for b in range(batch):
        t = 0
        # The first row may fall in the middle of an episode.
        kind = FIRST if rng.random() < 0.5 else MID
        while t < num_rows:
            if kind == FIRST:
                step_types[t, b] = FIRST
                rewards[t, b] = 0.0
                t += 1
            length = int(rng.integers(1, 6))
            for _ in range(length - 1):
                if t >= num_rows:
                    break
                step_types[t, b] = MID
                t += 1
            if t >= num_rows:
                break
            step_types[t, b] = LAST
            discounts[t, b] = 0.0 if rng.random() < 0.5 else 1.0
            t += 1
            kind = FIRST
    values = rng.normal(size=(num_rows, batch)).astype(np.float32)
    return rewards, values, step_types, discounts


def _reference_gae(rewards, values, step_types, discounts, gamma, lam):
    """Row t's transition goes to row t+1 unless row t is LAST; the chain of advantages
    continues into row t+1 only if row t+1 starts a transition too."""
    num_rows, batch = rewards.shape
    adv = np.zeros((num_rows - 1, batch), dtype=np.float64)
    for b in range(batch):
        following = 0.0
        for t in range(num_rows - 2, -1, -1):
            if step_types[t, b] == LAST:
                adv[t, b] = 0.0
                following = 0.0
                continue
            delta = (
                rewards[t + 1, b] + gamma * discounts[t + 1, b] * values[t + 1, b] - values[t, b]
            )
            continues = t + 1 < num_rows - 1 and step_types[t + 1, b] != LAST
            adv[t, b] = delta + (
                gamma * lam * discounts[t + 1, b] * following if continues else 0.0
            )
            following = adv[t, b]
    valid = (step_types[:-1] != LAST).astype(np.float64)
    returns = (adv + values[:-1]) * valid
    return adv, returns, valid


def _gae(rewards, values, step_types, discounts, gamma, lam):
    adv, ret = generalized_advantage_estimation(
        rewards=torch.from_numpy(rewards),
        values=torch.from_numpy(values),
        step_types=torch.from_numpy(step_types),
        discounts=torch.from_numpy(discounts),
        gamma=gamma,
        td_lambda=lam,
    )
    return adv.numpy(), ret.numpy()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (0.8, 0.0)])
def test_gae_matches_reference_on_valid_rows(seed, gamma, lam):
    rng = np.random.default_rng(seed)
    data = _random_trajectory(rng, num_rows=25, batch=6)
    assert (data[2] == LAST).any() and (data[2] == FIRST).any()
    assert (data[3][data[2] == LAST] == 0).any() and (data[3][data[2] == LAST] == 1).any()
    adv, ret = _gae(*data, gamma, lam)
    ref_adv, ref_ret, valid = _reference_gae(*data, gamma, lam)
    assert adv.shape == ret.shape == (24, 6)
    mask = valid.astype(bool)
    np.testing.assert_allclose(adv[mask], ref_adv[mask], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret[mask], ref_ret[mask], rtol=1e-5, atol=1e-5)


def test_gae_hand_example_termination_and_truncation():
    #            row: 0      1    2     3      4    5     6      7
    step_types = [FIRST, MID, LAST, FIRST, MID, LAST, FIRST, MID]
    discounts = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # row 2 terminated, row 5 truncated
    rewards = [0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 5.0]
    values = [0.5, 1.0, 9.0, 2.0, 3.0, 6.0, 7.0, 8.0]
    col = lambda xs, dtype=torch.float32: torch.tensor(xs, dtype=dtype).unsqueeze(1)
    g, lam = 0.5, 0.5
    adv, ret = generalized_advantage_estimation(
        col(rewards), col(values), col(step_types, torch.int32), col(discounts), g, lam
    )
    adv = adv.squeeze(1).tolist()
    d1 = 2.0 + 0.0 - 1.0  # terminated: no bootstrap from row 2's value
    d0 = 1.0 + g * 1.0 - 0.5
    d4 = 4.0 + g * 6.0 - 3.0  # truncated: bootstraps from row 5's value
    d3 = 3.0 + g * 3.0 - 2.0
    d6 = 5.0 + g * 8.0 - 7.0
    expected = {0: d0 + g * lam * d1, 1: d1, 3: d3 + g * lam * d4, 4: d4, 6: d6}
    for row, value in expected.items():
        assert adv[row] == pytest.approx(value), row
        assert ret[row, 0].item() == pytest.approx(value + values[row]), row


def test_gae_last_rows_get_zero_advantage_and_return():
    rng = np.random.default_rng(0)
    data = _random_trajectory(rng, num_rows=25, batch=6)
    adv, ret = _gae(*data, 0.99, 0.95)
    last = data[2][:-1] == LAST
    assert last.any()
    np.testing.assert_array_equal(adv[last], 0.0)
    np.testing.assert_array_equal(ret[last], 0.0)


def test_valid_mask():
    step_types = torch.tensor([[FIRST, MID], [LAST, MID], [FIRST, LAST], [MID, FIRST]])
    mask = valid_mask(step_types)
    assert mask.dtype == torch.float32
    assert mask.tolist() == [[1.0, 1.0], [0.0, 1.0], [1.0, 0.0]]
