"""APPO's ``single_pass``: V-trace from each update's own forward pass, on column mini-batches."""

from __future__ import annotations

import functools

import pytest
import torch
from test_appo import SMALL_VALUE, _current_log_prob, _env, _make, _unroll

from alf.algorithms import PPOAlgorithm
from alf.algorithms.intrinsic import RNDReward
from alf.config import ConfigValueError
from alf.networks import ValueNetwork


@pytest.fixture(scope="module")
def cart_pole():
    env = _env()
    yield env
    env.close()


def _parameters(algorithm) -> list[torch.Tensor]:
    return [p.detach().clone() for p in algorithm.parameters()]


def test_one_update_on_the_whole_trajectory_equals_the_two_pass_update(cart_pole):
    """With one mini-batch of everything, the targets come from the same parameters either
    way: the single pass makes the same update as V-trace computed beforehand."""
    two_pass = _make(cart_pole, learning_rate=1e-2)
    single = _make(cart_pole, learning_rate=1e-2, single_pass=True)
    exp = _unroll(cart_pole, single, length=16)
    stale = exp.rollout_info.log_prob + 0.1 * torch.randn_like(exp.rollout_info.log_prob)
    exp = exp._replace(rollout_info=exp.rollout_info._replace(log_prob=stale))
    stats = {
        "two": two_pass.train_from_unroll(exp),
        "single": single.train_from_unroll(exp),
    }
    for a, b in zip(_parameters(two_pass), _parameters(single), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for key in ("loss", "pg_loss", "value_loss", "mean_rho"):
        assert float(stats["single"][key]) == pytest.approx(float(stats["two"][key]), abs=1e-5)


def test_single_pass_collects_the_values_value_clip_starts_from(cart_pole):
    """The actors compute the values (the "old" values of value_clip), as PPO's do."""
    algorithm = _make(cart_pole, single_pass=True, fused_rollout=False)
    assert algorithm.learner_only_state == ()
    exp = _unroll(cart_pole, algorithm, length=8)
    values = exp.rollout_info.value
    assert bool((values != 0).any())
    with torch.no_grad():
        expected = algorithm.value_network(exp.observation.reshape(-1, 4)).reshape(values.shape)
    torch.testing.assert_close(values, expected)


def test_mini_batches_are_whole_columns(cart_pole):
    """``mini_batch_size // T`` columns per update: 4 environments of 16 steps in
    mini-batches of 32 steps make 2 updates; the statistics of each are finite."""
    algorithm = _make(cart_pole, single_pass=True, mini_batch_size=32, learning_rate=1e-2)
    seen: list[tuple[int, ...]] = []
    original = algorithm._single_pass_loss

    def spy(exp, valid):
        seen.append(tuple(exp.step_type.shape))
        return original(exp, valid)

    algorithm._single_pass_loss = spy
    algorithm.record_statistics = True
    before = _parameters(algorithm)
    stats = algorithm.train_from_unroll(_unroll(cart_pole, algorithm, length=16))
    assert seen == [(17, 2), (17, 2)]  # T + 1 rows: the last one bootstraps
    assert {"explained_variance", "vtrace_mean_rho", "approx_kl", "clip_fraction"} <= set(stats)
    assert all(torch.isfinite(torch.as_tensor(v)) for v in stats.values()), stats
    assert float(stats["vtrace_mean_rho"]) == pytest.approx(1.0, abs=0.05)
    assert all(not torch.equal(b, a) for b, a in zip(before, algorithm.parameters(), strict=True))


def test_the_second_mini_batch_targets_come_from_the_updated_parameters(cart_pole):
    """The bootstrap value of a column's targets is computed after the updates before it."""
    algorithm = _make(cart_pole, single_pass=True, mini_batch_size=16, learning_rate=5e-2)
    exp = _unroll(cart_pole, algorithm, length=16)
    algorithm.train_from_unroll(exp)
    log_rhos = _current_log_prob(algorithm, exp) - exp.rollout_info.log_prob
    assert log_rhos.abs().max() > 1e-4  # the policy moved during the iteration


@pytest.mark.parametrize(
    ("kwargs", "culprit"),
    [
        ({"num_epochs": 2}, "AppoAlgorithm.num_epochs"),
        (
            {
                "value_network_ctor": functools.partial(
                    ValueNetwork, fc_layer_params=(16,), lstm_hidden_size=8
                )
            },
            "AppoAlgorithm.single_pass",
        ),
        ({"intrinsic_reward_ctor": RNDReward}, "AppoAlgorithm.single_pass"),
    ],
)
def test_single_pass_refuses_what_it_cannot_do(cart_pole, kwargs, culprit):
    with pytest.raises(ConfigValueError, match=culprit):
        _make(cart_pole, single_pass=True, **kwargs)


def test_ppo_has_no_single_pass(cart_pole):
    with pytest.raises(TypeError, match="single_pass"):
        _make(cart_pole, PPOAlgorithm, value_network_ctor=SMALL_VALUE, single_pass=True)
