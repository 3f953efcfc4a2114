"""Shared set-up of the in-process off-policy trainer tests."""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from alf import config as alf_config
from alf.trainers import RLTrainer, TrainerConfig

REPO = Path(__file__).resolve().parents[1]
PPO_CONF = REPO / "alf" / "examples" / "ppo_cart_pole.gin"

SMALL_NETWORKS = (
    "ActorDistributionNetwork.fc_layer_params=(16, 16)",
    "ActorNetwork.fc_layer_params=(16, 16)",
    "CriticNetwork.fc_layer_params=(16, 16)",
    "QNetwork.fc_layer_params=(16, 16)",
)
PENDULUM_LOW, PENDULUM_HIGH = -2.0, 2.0


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _params(
    alg: str,
    env: str = "Pendulum-v1",
    *extra: str,
    num_iterations: int | None = 300,
    num_envs: int = 1,
    initial_collect_steps: int = 50,
) -> list[str]:
    """Bindings of a tiny off-policy run (``extra`` wins over the defaults here)."""
    params = [
        f'create_environment.env_name="{env}"',
        f"create_environment.num_parallel_environments={num_envs}",
        f"TrainerConfig.algorithm_ctor=@{alg}",
        "TrainerConfig.unroll_length=1",
        f"TrainerConfig.initial_collect_steps={initial_collect_steps}",
        "TrainerConfig.evaluate=False",
        "TrainerConfig.summary_interval=1000",
        "TrainerConfig.checkpoint_interval=100000",
        "TrainerConfig.progress_interval_s=1000000",
        f"{alg}.mini_batch_size=32",
        "ReplayBuffer.max_length=1000",
        *SMALL_NETWORKS,
    ]
    if num_iterations is not None:
        params.append(f"TrainerConfig.num_iterations={num_iterations}")
    return params + list(extra)


def _ddpg_params(*extra: str, **kwargs) -> list[str]:
    return _params("DdpgAlgorithm", "Pendulum-v1", *extra, **kwargs)


@contextlib.contextmanager
def _trainer(root: Path, params: list[str], conf: Path | None = None) -> Iterator[RLTrainer]:
    alf_config.load_config(None if conf is None else str(conf), params)
    trainer = RLTrainer(config=TrainerConfig(), root_dir=str(root))
    try:
        yield trainer
    finally:
        trainer.close()


def _record_updates(trainer: RLTrainer) -> list[dict]:
    """Wraps ``train_from_replay``: returns a list that gets, per training iteration,
    the iteration index (0-based), the buffer size at that time and the stats."""
    algorithm = trainer.algorithm
    original = algorithm.train_from_replay
    log: list[dict] = []

    def train_from_replay():
        size = algorithm.replay_buffer.total_size
        stats = original()
        log.append({"iteration": trainer.iteration, "stored": size, "stats": stats})
        return stats

    algorithm.train_from_replay = train_from_replay
    return log


def _record_unrolls(trainer: RLTrainer) -> list[dict]:
    """Wraps the unroller: per call, the iteration, the steps asked and the random flag."""
    unroller = trainer.unroller
    original = unroller.unroll
    log: list[dict] = []

    def unroll(num_steps=None):
        log.append(
            {
                "iteration": trainer.iteration,
                "num_steps": num_steps,
                "random_actions": unroller.random_actions,
            }
        )
        return original(num_steps)

    unroller.unroll = unroll
    return log


def _constant_policy(trainer: RLTrainer, value: float) -> None:
    """Makes the algorithm's rollout actions the constant ``value`` (its state and info
    still come from the real ``rollout_step``), so random actions are easy to tell."""
    algorithm = trainer.algorithm
    original = algorithm.rollout_step

    def rollout_step(time_step, state):
        step = original(time_step, state)
        return step._replace(output=torch.full_like(step.output, value))

    algorithm.rollout_step = rollout_step


def _clone_params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_finite_stats(log: list[dict]) -> None:
    assert log, "no training iteration ran"
    for entry in log:
        stats = entry["stats"]
        assert stats["skipped"] == 0.0, entry
        assert "loss" in stats, entry
        for name, value in stats.items():
            assert math.isfinite(value), (name, entry)

POLICY_ACTION = 0.5
"""The constant action of the policies the tests install."""
