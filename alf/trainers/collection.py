"""Building a run's :class:`~alf.unrollers.Collector` from its config, and the number of
steps each training iteration collects."""

from __future__ import annotations

import functools

from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import LearningSetup, RLAlgorithm
from alf.environments import AlfEnvironment, create_environment
from alf.trainers.algorithm_builder import algorithm_factory
from alf.trainers.data_parallel import Ranks
from alf.trainers.trainer_config import TrainerConfig
from alf.unrollers.async_unroller import AsyncUnroller
from alf.unrollers.collector import Collector
from alf.unrollers.sync_unroller import SyncUnroller

__all__ = ["build_collector", "learning_setup", "steps_this_iteration"]


def learning_setup(config: TrainerConfig, *, num_envs: int, ranks: Ranks) -> LearningSetup:
    """What the algorithm learns from: this rank's share of the collection of
    ``config``."""
    return LearningSetup(
        num_envs=num_envs,
        unroll_length=config.unroll_length,
        initial_collect_steps=ranks.share(config.initial_collect_steps),
        offline_buffer_dirs=config.offline_buffer_dirs,
        offline_datasets=config.offline_datasets,
        offline_fraction=float(config.offline_fraction or 0.0),
        data_parallel=ranks.context is not None,
        all_ranks_agree=ranks.all_ready,
    )


def build_collector(
    *,
    config: TrainerConfig,
    env: AlfEnvironment | None,
    algorithm: RLAlgorithm,
    policy: Policy,
    num_envs: int,
    seed: int,
    config_text: str,
    initial_collect_steps: int,
) -> Collector:
    """The collector of ``config``: actor processes (``config.async_unroll``, an
    :class:`AsyncUnroller` whose actors build their own environments) or ``env`` stepped
    in this process (a :class:`SyncUnroller`).

    Args:
        config: the run's settings.
        env: the environments of sync collection (None for async).
        algorithm: the learner.
        policy: the policy acting in this process: it collects (sync), or its parameters
            are the first ones published to the actors (async).
        num_envs: this rank's environments.
        seed: the seed of this rank's first environment.
        config_text: the run's gin config, which actor processes load.
        initial_collect_steps: this rank's uniformly random actions still to take.

    Raises:
        ValueError: a setting async collection cannot use.
    """
    if not config.async_unroll:
        if env is None:
            raise ValueError("sync collection needs the environment")
        return SyncUnroller(
            env=env,
            policy=policy,
            unroll_length=max(1, int(config.unroll_length)),
            initial_collect_steps=initial_collect_steps,
        )
    if config.unroll_length != int(config.unroll_length):
        raise ValueError(
            f"TrainerConfig.unroll_length={config.unroll_length}: async_unroll needs "
            "a whole number of steps per fragment"
        )
    if config.offline_only:
        raise ValueError("TrainerConfig.async_unroll with offline_fraction=1.0 collects nothing")
    return AsyncUnroller(
        env_factory=functools.partial(
            create_environment, drop_nonfinite=config.drops_nonfinite_episodes
        ),
        policy=policy,
        algorithm_factory=algorithm_factory(config),
        num_envs=num_envs,
        unroll_length=int(config.unroll_length),
        seed=seed,
        config_text=config_text,
        initial_collect_steps=initial_collect_steps,
        keep_every_fragment=algorithm.needs_every_step,
    )


def steps_this_iteration(config: TrainerConfig, iteration: int) -> int:
    """Environment steps per environment that iteration ``iteration`` (from 0) collects:
    none when training on offline data alone; otherwise ``unroll_length``, where a
    fractional one is spread evenly over the iterations (0.25: one step every fourth)."""
    if config.offline_only:
        return 0
    length = config.unroll_length
    if length == int(length):
        return int(length)
    return int((iteration + 1) * length) - int(iteration * length)
