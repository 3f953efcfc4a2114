"""Building what a run trains with: its device, environments, algorithm, the policy that
acts (the algorithm's or its CPU copy's), and evaluator, seeded as the run's config and
rank say."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.environments import AlfEnvironment, create_environment
from alf.trainers.algorithm_builder import algorithm_factory, build_algorithm
from alf.trainers.data_parallel import RANK_SEED_STRIDE
from alf.trainers.evaluator import Evaluator
from alf.trainers.trainer_config import TrainerConfig
from alf.utils.distributed import DistributedContext, resolve_device
from alf.utils.threads import set_cpu_threads

__all__ = ["EVAL_SEED_OFFSET", "RunComponents", "build_components"]

EVAL_SEED_OFFSET = 1_000_003
"""Evaluation environments are seeded from ``random_seed + EVAL_SEED_OFFSET``."""


@dataclass
class RunComponents:
    """The parts of a run built by :func:`build_components`.

    Attributes:
        device: where the algorithm trains.
        env: this rank's training environments (None for async collection, whose actors
            build their own).
        num_envs: this rank's number of training environments.
        seed: the seed of this rank's first training environment.
        algorithm: the algorithm that learns (on ``device``).
        policy: what acts in this process (collection and evaluation): a
            :class:`~alf.algorithms.policy.Policy` of ``algorithm``, or of its CPU copy
            when training on another device (unless ``TrainerConfig.collect_on_device``).
        eval_env: the evaluation environments (rank 0, when evaluating).
        evaluator: evaluates ``policy`` in ``eval_env``.
    """

    device: torch.device
    env: AlfEnvironment | None
    num_envs: int
    seed: int
    algorithm: RLAlgorithm
    policy: Policy
    eval_env: AlfEnvironment | None = None
    evaluator: Evaluator | None = None

    def close(self) -> None:
        """Closes the environments (idempotent)."""
        for env in (self.env, self.eval_env):
            if env is not None:
                env.close()
        self.env = self.eval_env = None


def _seed_everything(config: TrainerConfig, rank: int) -> None:
    """Seeds torch and numpy for this rank's work after the algorithm is built (rank 0
    keeps the run's seed stream)."""
    if rank:
        torch.manual_seed(config.random_seed + rank * RANK_SEED_STRIDE)
        np.random.seed((config.random_seed + rank * RANK_SEED_STRIDE) % 2**32)


def _build_policy(
    config: TrainerConfig, env: AlfEnvironment, algorithm: RLAlgorithm, device: torch.device
) -> Policy:
    """The policy acting in this process: ``algorithm`` itself on the CPU (or with
    ``collect_on_device``), otherwise a CPU copy of it."""
    if device.type == "cpu":
        return Policy(algorithm=algorithm)
    if config.collect_on_device:
        return Policy(algorithm=algorithm, device=device)
    copy = algorithm_factory(config)(
        observation_spec=env.observation_spec(), action_spec=env.action_spec()
    )
    return Policy(algorithm=copy)


def _build_evaluation(config: TrainerConfig, parts: RunComponents) -> None:
    """Adds the evaluation environments and the evaluator of ``parts.policy``."""
    try:
        parts.eval_env = create_environment(
            num_parallel_environments=config.num_eval_environments,
            for_evaluation=True,
            seed=config.random_seed + EVAL_SEED_OFFSET,
            drop_nonfinite=config.drops_nonfinite_episodes,
        )
        parts.evaluator = Evaluator(
            env=parts.eval_env,
            policy=parts.policy,
            num_episodes=config.num_eval_episodes,
            max_episode_steps=config.max_eval_episode_steps,
            exploring=config.eval_exploring,
        )
    except BaseException:
        parts.close()
        raise


def build_components(
    config: TrainerConfig,
    *,
    distributed: DistributedContext | None,
    resumed_env_steps: int | None,
    evaluate: bool,
) -> RunComponents:
    """Seeds torch and numpy, then builds the run's device, environments, algorithm,
    policy and evaluator (see :class:`RunComponents`).

    Args:
        config: the run's settings.
        distributed: this rank's context (None: a single-process run).
        resumed_env_steps: env steps of the checkpoint being resumed (None: a fresh run);
            fresh episodes after a resume must not replay the first run's seeds.
        evaluate: whether to build the evaluation environments and evaluator.
    """
    rank = 0 if distributed is None else distributed.rank
    world_size = 1 if distributed is None else distributed.world_size
    local_rank = 0 if distributed is None else distributed.local_rank
    device = resolve_device(config.device, local_rank=local_rank, world_size=world_size)
    if config.torch_num_threads:
        set_cpu_threads(config.torch_num_threads)
    seed = config.random_seed
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    if resumed_env_steps is not None:
        seed += resumed_env_steps
    if distributed is None:
        env = create_environment(seed=seed, drop_nonfinite=config.drops_nonfinite_episodes)
    else:  # this rank's share of the environments
        env = create_environment(
            seed=seed,
            num_ranks=world_size,
            rank=rank,
            drop_nonfinite=config.drops_nonfinite_episodes,
        )
        seed += rank * env.batch_size  # its first environment's seed
    try:
        algorithm = build_algorithm(config, env).to(device)
        policy = _build_policy(config, env, algorithm, device)
    except BaseException:
        env.close()
        raise
    _seed_everything(config, rank)
    parts = RunComponents(
        device=device,
        env=env,
        num_envs=env.batch_size,
        seed=seed,
        algorithm=algorithm,
        policy=policy,
    )
    if config.async_unroll:
        # The actors build their own environments: this one only told the specs.
        env.close()
        parts.env = None
    if evaluate:
        _build_evaluation(config, parts)
    return parts
