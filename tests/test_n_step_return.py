"""Tests of alf.utils.value_ops.n_step_return against its docstring's definition."""

import numpy as np
import pytest
import torch

from alf.data_structures import StepType
from alf.utils.value_ops import n_step_return

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST


def _n_step(rewards, discounts, step_types, values, gamma):
    return n_step_return(
        rewards=torch.as_tensor(rewards, dtype=torch.float32),
        discounts=torch.as_tensor(discounts, dtype=torch.float32),
        step_types=torch.as_tensor(step_types, dtype=torch.int32),
        values=torch.as_tensor(values, dtype=torch.float32),
        gamma=gamma,
    ).numpy()


def _reference(rewards, discounts, step_types, values, gamma):
    """``G = sum_{k=1..m} gamma^(k-1) prod_{1<=j<k} d_j r_k + gamma^m prod_{1<=j<=m} d_j V_m``
    with ``m`` the first LAST step at ``k >= 1``, else ``n``; evaluated in float64."""
    n = rewards.shape[0] - 1
    out = np.zeros(rewards.shape[1])
    for b in range(rewards.shape[1]):
        m = next((k for k in range(1, n + 1) if step_types[k, b] == LAST), n)
        g = 0.0
        for k in range(1, m + 1):
            g += gamma ** (k - 1) * np.prod(discounts[1:k, b], dtype=np.float64) * rewards[k, b]
        g += gamma**m * np.prod(discounts[1 : m + 1, b], dtype=np.float64) * values[m, b]
        out[b] = g
    return out


def _random_sequences(rng, n, batch):
    """``[n+1, B]`` sequences whose row 0 is FIRST or MID; later rows may end the
    episode (LAST, discount 0 or 1), after which a new episode begins (FIRST)."""
    rows = n + 1
    step_types = np.full((rows, batch), MID, dtype=np.int32)
    discounts = np.ones((rows, batch), dtype=np.float32)
    rewards = rng.normal(size=(rows, batch)).astype(np.float32)
    values = rng.normal(size=(rows, batch)).astype(np.float32) * 5
    for b in range(batch):
        step_types[0, b] = FIRST if rng.random() < 0.3 else MID
        for k in range(1, rows):
            if step_types[k - 1, b] == LAST:
                step_types[k, b] = FIRST
            elif rng.random() < 0.3:
                step_types[k, b] = LAST
                discounts[k, b] = 0.0 if rng.random() < 0.5 else 1.0
    return rewards, discounts, step_types, values


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("gamma", [0.9, 1.0])
def test_n_step_return_matches_definition_on_random_data(n, gamma):
    """Random sequences with terminations and truncations anywhere agree with a direct
    loop over the docstring's formula."""
    rng = np.random.default_rng(100 * n + int(gamma * 10))
    data = _random_sequences(rng, n, batch=256)
    step_types = data[2]
    if n > 1:  # the data really exercises every case
        assert (step_types[1:] == LAST).any(0).mean() > 0.2
        assert (step_types[1:] != LAST).all(0).any()
    got = _n_step(*data, gamma=gamma)
    assert got.shape == (256,) and got.dtype == np.float32
    np.testing.assert_allclose(got, _reference(*data, gamma=gamma), rtol=1e-5, atol=1e-5)


def test_n_step_return_termination_at_first_step_does_not_bootstrap():
    """An episode that terminates (discount 0) at step 1 returns just ``r_1``; later
    rewards and values are ignored."""
    rewards = np.array([[9.0], [2.0], [100.0], [100.0]])
    discounts = np.array([[1.0], [0.0], [1.0], [1.0]])
    step_types = np.array([[MID], [LAST], [FIRST], [MID]])
    values = np.array([[50.0], [7.0], [100.0], [100.0]])
    np.testing.assert_allclose(_n_step(rewards, discounts, step_types, values, 0.9), [2.0])


def test_n_step_return_truncation_bootstraps_from_last_observation():
    """A truncation (discount 1) at step 2 of a 3-step return gives
    ``r_1 + gamma r_2 + gamma^2 V_2``."""
    rewards = np.array([[0.0], [1.0], [2.0], [100.0]])
    discounts = np.ones((4, 1))
    step_types = np.array([[FIRST], [MID], [LAST], [FIRST]])
    values = np.array([[-5.0], [10.0], [20.0], [100.0]])
    expected = 1.0 + 0.9 * 2.0 + 0.81 * 20.0
    np.testing.assert_allclose(
        _n_step(rewards, discounts, step_types, values, 0.9), [expected], rtol=1e-6
    )


def test_n_step_return_termination_at_later_step():
    """A termination at step 2 of a 3-step return gives ``r_1 + gamma r_2``."""
    rewards = np.array([[0.0], [1.0], [2.0], [100.0]])
    discounts = np.array([[1.0], [1.0], [0.0], [1.0]])
    step_types = np.array([[MID], [MID], [LAST], [FIRST]])
    values = np.array([[-5.0], [10.0], [20.0], [100.0]])
    np.testing.assert_allclose(
        _n_step(rewards, discounts, step_types, values, 0.5), [2.0], rtol=1e-6
    )


def test_n_step_return_plain_n_steps_without_episode_end():
    """Without a LAST step the return is ``r_1 + g r_2 + g^2 r_3 + g^3 V_3``, and
    batch columns are independent."""
    rewards = np.array([[7.0, 0.0], [1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    discounts = np.ones((4, 2))
    step_types = np.array([[FIRST, MID], [MID, MID], [MID, MID], [MID, LAST]])
    values = np.array([[-1.0, -1.0], [5.0, 5.0], [6.0, 6.0], [10.0, 4.0]])
    got = _n_step(rewards, discounts, step_types, values, 0.5)
    # Column 1 is truncated exactly at step n: it also bootstraps from V_3.
    np.testing.assert_allclose(got, [1 + 1 + 0.75 + 1.25, 1 + 0.5 + 0.25 + 0.125 * 4], rtol=1e-6)


def test_n_step_return_one_step_is_td_target():
    """With n = 1 the target is ``r_1 + gamma d_1 V_1``."""
    rewards = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    discounts = np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    step_types = np.array([[MID, MID, FIRST], [MID, LAST, LAST]])
    values = np.array([[9.0, 9.0, 9.0], [10.0, 10.0, 10.0]])
    got = _n_step(rewards, discounts, step_types, values, 0.9)
    np.testing.assert_allclose(got, [1 + 9.0, 2.0, 3 + 9.0], rtol=1e-6)


def test_n_step_return_needs_two_rows():
    """A single row holds no transition: ValueError."""
    one = np.zeros((1, 3))
    with pytest.raises(ValueError):
        _n_step(one, one, one.astype(np.int32), one, 0.9)


def test_n_step_return_gradient_flows_to_values_only_where_bootstrapped():
    """The target's gradient with respect to the values is ``gamma^m prod d`` at the
    bootstrap row and zero elsewhere."""
    values = torch.zeros(4, 3, requires_grad=True)
    target = n_step_return(
        rewards=torch.ones(4, 3),
        discounts=torch.tensor([[1.0] * 3, [1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [1.0] * 3]),
        step_types=torch.tensor([[MID] * 3, [MID, LAST, MID], [MID, FIRST, LAST], [MID] * 3]),
        values=values,
        gamma=0.5,
    )
    target.sum().backward()
    expected = torch.zeros(4, 3)
    expected[3, 0] = 0.125
    expected[2, 2] = 0.25
    assert torch.equal(values.grad, expected)
