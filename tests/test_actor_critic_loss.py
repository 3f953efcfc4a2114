"""The pieces A2C, PPO and APPO compose their ``calc_loss`` from
(``ActorCriticAlgorithm.advantages``, ``mean_entropy`` and ``loss_terms``): the entropy
is in the loss only with a non-zero ``entropy_coef``, and reported on summary iterations
either way (issue 31, point 2)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from alf.algorithms import ActorCriticAlgorithm, AppoAlgorithm, PPOAlgorithm
from alf.algorithms.actor_critic import ActorCriticRolloutInfo, ActorCriticTrainInfo
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.tensor_specs import BoundedTensorSpec

OBS = BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 1)
ALGORITHMS = [ActorCriticAlgorithm, PPOAlgorithm, AppoAlgorithm]


def _make(cls: type, **kwargs: object) -> ActorCriticAlgorithm:
    return cls(
        observation_spec=OBS,
        action_spec=DISCRETE,
        actor_network_ctor=functools.partial(ActorDistributionNetwork, fc_layer_params=(8,)),
        value_network_ctor=functools.partial(ValueNetwork, fc_layer_params=(8,)),
        **kwargs,
    )


def _info() -> ActorCriticTrainInfo:
    rollout = ActorCriticRolloutInfo(
        log_prob=torch.tensor([-0.5, -1.0, -0.2]),
        value=torch.tensor([0.4, 0.0, 1.0]),
        advantage=torch.tensor([1.0, -2.0, 0.5]),
        returns=torch.tensor([1.0, -1.0, 2.0]),
    )
    return ActorCriticTrainInfo(
        log_prob=torch.tensor([-0.2, -1.5, -0.2], requires_grad=True),
        entropy=torch.tensor([0.6, 0.4, 0.5], requires_grad=True),
        value=torch.tensor([0.5, 0.5, 1.0], requires_grad=True),
        rollout=rollout,
    )


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_without_an_entropy_bonus_the_entropy_is_only_reported(cls: type) -> None:
    algorithm = _make(cls, entropy_coef=0.0)
    info = _info()
    assert algorithm.mean_entropy(info) is None
    algorithm.record_statistics = False
    loss_info = algorithm.calc_loss(info)
    assert "entropy" not in loss_info.extra
    assert {"pg_loss", "value_loss"} <= set(loss_info.extra)
    loss_info.loss.backward()
    assert info.entropy.grad is None  # not in the loss
    algorithm.record_statistics = True
    reported = algorithm.calc_loss(_info()).extra["entropy"]
    assert not reported.requires_grad and reported.item() == pytest.approx(0.5)


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_an_entropy_bonus_is_in_the_loss(cls: type) -> None:
    without = _make(cls, entropy_coef=0.0).calc_loss(_info())
    algorithm = _make(cls, entropy_coef=0.1)
    info = _info()
    algorithm.record_statistics = False
    loss_info = algorithm.calc_loss(info)
    assert loss_info.loss.item() == pytest.approx(without.loss.item() - 0.1 * 0.5, rel=1e-6)
    assert loss_info.extra["entropy"].item() == pytest.approx(0.5)
    assert not any(v.requires_grad for v in loss_info.extra.values())
    loss_info.loss.backward()
    assert torch.allclose(info.entropy.grad, torch.full((3,), -0.1 / 3))


def test_loss_terms_keep_the_order_of_the_summaries() -> None:
    algorithm = _make(PPOAlgorithm, entropy_coef=0.0)
    assert list(algorithm.calc_loss(_info()).extra) == [
        "pg_loss",
        "value_loss",
        "entropy",
        "clip_fraction",
    ]
    appo = _make(AppoAlgorithm, entropy_coef=0.0)
    assert list(appo.calc_loss(_info()).extra)[-2:] == ["clip_fraction", "mean_rho"]
