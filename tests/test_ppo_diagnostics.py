"""PPO's diagnostics (approx_kl, explained_variance, clip_fraction, epochs_run), the
target_kl early stop, and the clipped objective as a component (issue 31, point 2)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from helpers_cli import read_progress, run_cli, train_cmd

from alf.algorithms import AppoAlgorithm, PPOAlgorithm
from alf.algorithms.actor_critic import ActorCriticRolloutInfo, ActorCriticTrainInfo
from alf.algorithms.clipped_surrogate import (
    ClippedSurrogate,
    approx_kl,
    explained_variance,
)
from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import LearningSetup
from alf.data_structures import StepType, TimeStep
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.tensor_specs import BoundedTensorSpec
from alf.unrollers import SyncUnroller

OBS = BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 1)
SMALL_ACTOR = functools.partial(ActorDistributionNetwork, fc_layer_params=(8,))
SMALL_VALUE = functools.partial(ValueNetwork, fc_layer_params=(8,))


class _Env:
    """A tiny seeded batched environment with 4-step episodes (no gymnasium)."""

    def __init__(self, batch_size: int = 4) -> None:
        self.batch_size = batch_size
        self._t = torch.zeros(batch_size, dtype=torch.int64)
        self._gen = torch.Generator().manual_seed(0)

    def observation_spec(self) -> BoundedTensorSpec:
        return OBS

    def action_spec(self) -> BoundedTensorSpec:
        return DISCRETE

    def _step(self, step_type: torch.Tensor, reward: torch.Tensor) -> TimeStep:
        n = self.batch_size
        return TimeStep(
            step_type=step_type.to(torch.int32),
            reward=reward,
            discount=torch.where(step_type == StepType.LAST, 0.0, 1.0),
            observation=torch.rand(n, 4, generator=self._gen) * 2 - 1,
            prev_action=torch.zeros(n, dtype=torch.int64),
            env_id=torch.arange(n),
        )

    def reset(self) -> TimeStep:
        self._t.zero_()
        return self._step(torch.full((self.batch_size,), StepType.FIRST), torch.zeros(4))

    def step(self, action: torch.Tensor) -> TimeStep:
        was_last = self._t >= 4
        self._t = torch.where(was_last, 0, self._t + 1)
        step_type = torch.where(
            was_last,
            StepType.FIRST,
            torch.where(self._t >= 4, StepType.LAST, StepType.MID),
        )
        return self._step(step_type, torch.where(was_last, 0.0, action.float() * 2.0 - 0.5))

    def close(self) -> None:
        pass


def _ppo(cls: type = PPOAlgorithm, **kwargs: object) -> PPOAlgorithm:
    torch.manual_seed(0)
    return cls(
        observation_spec=OBS,
        action_spec=DISCRETE,
        actor_network_ctor=SMALL_ACTOR,
        value_network_ctor=SMALL_VALUE,
        **kwargs,
    )


def _trajectory(algorithm: PPOAlgorithm, unroll_length: int = 16):
    torch.manual_seed(1)
    return SyncUnroller(
        env=_Env(), policy=Policy(algorithm=algorithm), unroll_length=unroll_length
    ).unroll()


def _params(algorithm: PPOAlgorithm) -> list[torch.Tensor]:
    return [p.detach().clone() for p in algorithm.parameters()]


def _steps(algorithm: PPOAlgorithm) -> int:
    state = algorithm.optimizer.state[algorithm.actor_network.logits.weight]
    return int(state["step"])


def _tiny_info() -> ActorCriticTrainInfo:
    rollout = ActorCriticRolloutInfo(
        log_prob=torch.tensor([-0.5, -1.0, -0.2]),
        value=torch.tensor([0.4, 0.0, 1.0]),
        advantage=torch.tensor([1.0, -2.0, 0.5]),
        returns=torch.tensor([1.0, -1.0, 2.0]),
    )
    return ActorCriticTrainInfo(
        log_prob=torch.tensor([-0.2, -1.5, -0.2]),  # log ratios 0.3, -0.5, 0
        entropy=torch.tensor([0.6, 0.4, 0.5]),
        value=torch.tensor([0.5, 0.5, 1.0]),
        rollout=rollout,
    )


def test_approx_kl_and_explained_variance_by_hand() -> None:
    info = _tiny_info()
    expected = np.mean([np.exp(x) - 1 - x for x in (0.3, -0.5, 0.0)])
    assert approx_kl(info.log_prob, info.rollout.log_prob).item() == pytest.approx(expected)
    values, returns = np.array([0.5, 0.5, 1.0]), np.array([1.0, -1.0, 2.0])
    ev = 1 - np.var(returns - values) / np.var(returns)
    assert explained_variance(torch.tensor(values), torch.tensor(returns)).item() == (
        pytest.approx(ev)
    )
    assert explained_variance(torch.ones(3), torch.ones(3) * 2).isnan()
    perfect = torch.tensor([1.0, 2.0, 4.0])
    assert explained_variance(perfect, perfect).item() == 1.0


def test_the_objective_is_a_component_without_state() -> None:
    algorithm = _ppo(clip=0.3, value_clip=0.1)
    assert PPOAlgorithm.__mro__[1].__name__ == "ActorCriticAlgorithm"  # no mixin first
    assert isinstance(algorithm.objective, ClippedSurrogate)
    assert not isinstance(algorithm.objective, torch.nn.Module)
    assert algorithm.clip == 0.3 and algorithm.value_clip == 0.1
    keys = set(algorithm.state_dict())
    assert keys == set(_ppo().state_dict())
    assert all(k.startswith(("actor_network.", "value_network.")) for k in keys), keys
    appo = _ppo(AppoAlgorithm, clip=0.25)
    assert isinstance(appo.objective, ClippedSurrogate) and appo.clip == 0.25


def test_training_reports_the_diagnostics() -> None:
    algorithm = _ppo(num_epochs=3, mini_batch_size=16, learning_rate=1e-2)
    stats = algorithm.train_from_unroll(_trajectory(algorithm))
    assert {"approx_kl", "explained_variance", "clip_fraction", "epochs_run"} <= set(stats)
    assert stats["epochs_run"] == 3 == algorithm.epochs_run
    assert float(stats["approx_kl"]) >= 0.0 and math.isfinite(float(stats["approx_kl"]))
    assert 0.0 <= float(stats["clip_fraction"]) <= 1.0
    assert float(stats["explained_variance"]) <= 1.0


def test_explained_variance_uses_the_collected_values_of_valid_steps() -> None:
    algorithm = _ppo()
    exp = _trajectory(algorithm)
    pre = algorithm.preprocess_experience(exp)
    valid = pre.step_type != StepType.LAST
    info = pre.rollout_info
    expected = explained_variance(info.value[valid], info.returns[valid])
    stats = algorithm.train_from_unroll(exp)
    torch.testing.assert_close(stats["explained_variance"], expected)


def test_statistics_change_neither_parameters_nor_random_numbers() -> None:
    """Summary iterations (statistics computed) and the others (not) train alike."""
    results = []
    for record in (True, False):
        algorithm = _ppo(num_epochs=2, mini_batch_size=16, learning_rate=1e-2)
        algorithm.record_statistics = record
        exp = _trajectory(algorithm)
        torch.manual_seed(7)
        stats = algorithm.train_from_unroll(exp)
        results.append((_params(algorithm), torch.rand(3), stats))
    (with_stats, rng_a, stats_a), (without, rng_b, stats_b) = results
    assert all(torch.equal(a, b) for a, b in zip(with_stats, without, strict=True))
    assert torch.equal(rng_a, rng_b)
    assert "approx_kl" in stats_a and "explained_variance" in stats_a
    assert "approx_kl" not in stats_b and "explained_variance" not in stats_b
    torch.testing.assert_close(stats_a["loss"], stats_b["loss"])


def test_target_kl_off_or_never_reached_changes_nothing() -> None:
    results = []
    for target_kl in (None, 1e9):
        algorithm = _ppo(num_epochs=4, mini_batch_size=16, learning_rate=1e-2, target_kl=target_kl)
        exp = _trajectory(algorithm)
        torch.manual_seed(7)
        stats = algorithm.train_from_unroll(exp)
        assert stats["epochs_run"] == 4
        results.append((_params(algorithm), _steps(algorithm), torch.rand(3)))
    (params_a, steps_a, rng_a), (params_b, steps_b, rng_b) = results
    assert steps_a == steps_b == 4 * 4  # 64 steps less 12 LAST ones: 4 mini-batches of 13
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b, strict=True))
    assert torch.equal(rng_a, rng_b)


def test_target_kl_stops_the_epochs() -> None:
    """Each epoch is one update on the whole trajectory: epoch 1 starts at the
    behaviour policy (KL ~0), epoch 2 measures the KL after one large step."""
    algorithm = _ppo(num_epochs=10, mini_batch_size=None, learning_rate=0.05, target_kl=1e-4)
    exp = _trajectory(algorithm)
    stats = algorithm.train_from_unroll(exp)
    assert stats["epochs_run"] == 2 == algorithm.epochs_run
    assert _steps(algorithm) == 2  # the update of the stopping mini-batch is kept
    assert float(stats["approx_kl"]) > 1e-4 / 2  # the mean of ~0 and > target_kl
    # Without target_kl the same run trains every epoch.
    full = _ppo(num_epochs=10, mini_batch_size=None, learning_rate=0.05)
    assert full.train_from_unroll(_trajectory(full))["epochs_run"] == 10
    assert _steps(full) == 10


def test_target_kl_stops_within_an_epoch() -> None:
    """With mini-batches, the stop comes after the first update whose mini-batch's KL
    exceeds target_kl: the rest of that epoch is skipped too."""
    algorithm = _ppo(num_epochs=5, mini_batch_size=8, learning_rate=0.05, target_kl=1e-4)
    stats = algorithm.train_from_unroll(_trajectory(algorithm))
    assert 1 <= stats["epochs_run"] < 5
    batches_per_epoch = 7  # 52 valid steps in mini-batches of 8
    epochs = stats["epochs_run"]
    assert batches_per_epoch * (epochs - 1) < _steps(algorithm) <= batches_per_epoch * epochs
    assert _steps(algorithm) < batches_per_epoch * 5


def test_target_kl_is_checked() -> None:
    for bad in (0, -0.1, True, "0.01"):
        with pytest.raises(ValueError, match="PPOAlgorithm.target_kl"):
            _ppo(target_kl=bad)
    algorithm = _ppo(target_kl=0.02)
    algorithm.prepare_learning(LearningSetup(num_envs=4, unroll_length=16))
    with pytest.raises(ValueError, match="data-parallel"):
        algorithm.prepare_learning(LearningSetup(num_envs=4, unroll_length=16, data_parallel=True))


def test_summaries_carry_the_diagnostics(tmp_path) -> None:
    root = tmp_path / "ppo"
    proc = run_cli(
        train_cmd(
            root,
            "TrainerConfig.num_iterations=2",
            "TrainerConfig.num_env_steps=0",
            "TrainerConfig.summary_interval=1",
            "TrainerConfig.eval_interval=0",
            "PPOAlgorithm.target_kl=1000.0",
        )
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    train = [r for r in read_progress(root) if "train/loss" in r]
    assert len(train) == 2
    for record in train:
        for name in ("approx_kl", "explained_variance", "clip_fraction", "epochs_run"):
            assert f"train/{name}" in record, sorted(record)
        assert record["train/epochs_run"] == 20  # ppo_cart_pole.gin's num_epochs


def test_target_kl_stops_recurrent_training() -> None:
    """The sequence path (LSTM networks) stops and counts its epochs the same way."""
    lstm_actor = functools.partial(SMALL_ACTOR, lstm_hidden_size=6)
    lstm_value = functools.partial(SMALL_VALUE, lstm_hidden_size=5)
    kwargs = dict(
        actor_network_ctor=lstm_actor,
        value_network_ctor=lstm_value,
        num_epochs=6,
        mini_batch_size=None,
        learning_rate=0.05,
    )
    torch.manual_seed(0)
    algorithm = PPOAlgorithm(observation_spec=OBS, action_spec=DISCRETE, target_kl=1e-4, **kwargs)
    assert algorithm.is_recurrent
    stats = algorithm.train_from_unroll(_trajectory(algorithm))
    assert stats["epochs_run"] == 2 and _steps(algorithm) == 2
    assert {"approx_kl", "explained_variance"} <= set(stats)
    torch.manual_seed(0)
    full = PPOAlgorithm(observation_spec=OBS, action_spec=DISCRETE, **kwargs)
    assert full.train_from_unroll(_trajectory(full))["epochs_run"] == 6
    assert _steps(full) == 6
