"""The numpy action draws of collection (``alf.utils.numpy_draws``): the same draws,
log-probabilities and random stream as the torch distributions they stand for."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alf.utils.distributions import Categorical, diag_normal
from alf.utils.numpy_draws import draw_categorical, draw_diag_normal, host_array


@pytest.mark.parametrize("offset", [0, -1, 3])
def test_categorical_draw_is_the_torch_draw(offset):
    logits = torch.randn(64, 5) * 3
    torch.manual_seed(7)
    action, log_prob = draw_categorical(logits.numpy(), offset)
    after_numpy = torch.rand(3)
    torch.manual_seed(7)
    dist = Categorical(logits, offset=offset)
    expected = dist.sample()
    assert torch.equal(torch.rand(3), after_numpy)  # the same noise consumed
    assert action.dtype == np.int64 and action.shape == (64,)
    np.testing.assert_array_equal(action, expected.numpy())
    assert log_prob.dtype == np.float32
    np.testing.assert_allclose(log_prob, dist.log_prob(expected).numpy(), rtol=1e-6, atol=1e-6)


def test_categorical_frequencies_and_extreme_logits():
    probs = np.array([0.1, 0.6, 0.3], dtype=np.float32)
    logits = np.broadcast_to(np.log(probs), (20000, 3)).copy()
    torch.manual_seed(0)
    action, log_prob = draw_categorical(logits)
    np.testing.assert_allclose(np.bincount(action, minlength=3) / 20000, probs, atol=0.015)
    np.testing.assert_allclose(log_prob, np.log(probs)[action], rtol=1e-6)
    # Large logits neither overflow nor lose the certain action.
    huge = np.array([[1e30, 0.0, -1e30]] * 8, dtype=np.float32)
    action, log_prob = draw_categorical(huge, 2)
    np.testing.assert_array_equal(action, 2)
    np.testing.assert_array_equal(log_prob, 0.0)


@pytest.mark.parametrize("shape", [(16,), (16, 3), (16, 2, 3)])
def test_normal_draw_is_the_torch_draw(shape):
    mean = torch.randn(shape)
    std = torch.rand(shape[1:]) + 0.1
    event_dims = len(shape) - 1
    torch.manual_seed(3)
    action, log_prob = draw_diag_normal(
        mean.numpy(), std.numpy(), float(std.log().sum()), event_dims
    )
    after_numpy = torch.rand(3)
    torch.manual_seed(3)
    dist = diag_normal(mean, std.expand(shape), event_dims)
    expected = dist.sample()
    assert torch.equal(torch.rand(3), after_numpy)
    assert action.dtype == np.float32 and action.shape == shape
    np.testing.assert_allclose(action, expected.numpy(), rtol=1e-6, atol=1e-6)
    assert log_prob.dtype == np.float32 and log_prob.shape == (16,)
    np.testing.assert_allclose(log_prob, dist.log_prob(expected).numpy(), rtol=1e-5, atol=1e-5)


def test_normal_log_prob_is_that_of_the_stored_action():
    """With a small std and a large mean, the float32 action differs from
    ``mean + std * noise`` by more than the std resolves: the log-probability must be
    the one training computes from the stored action."""
    mean = torch.full((256, 3), 10.0)
    std = torch.full((3,), 1e-3)
    torch.manual_seed(0)
    action, log_prob = draw_diag_normal(mean.numpy(), std.numpy(), float(std.log().sum()), 1)
    reference = diag_normal(mean, std.expand(256, 3), 1).log_prob(torch.from_numpy(action))
    np.testing.assert_allclose(log_prob, reference.numpy(), rtol=1e-5, atol=1e-4)


def test_draws_are_float32_whatever_torch_default_dtype():
    logits = torch.randn(32, 4)
    torch.manual_seed(1)
    expected = Categorical(logits).sample()
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(1)
        action, log_prob = draw_categorical(logits.numpy())
        mean, std = torch.randn(32, 2), torch.ones(2)
        normal_action, normal_log_prob = draw_diag_normal(
            mean.float().numpy(), std.float().numpy(), 0.0, 1
        )
    finally:
        torch.set_default_dtype(default)
    np.testing.assert_array_equal(action, expected.numpy())
    assert log_prob.dtype == normal_action.dtype == normal_log_prob.dtype == np.float32


def test_host_array_reads_only_cpu_float32():
    x = torch.randn(3, 2)
    view = host_array(x)
    assert view is not None and np.shares_memory(view, x.numpy())
    assert host_array(x.double()) is None
    assert host_array(torch.empty(3, 2, device="meta")) is None
    assert host_array(torch.randn(2, requires_grad=True)) is not None  # detached
