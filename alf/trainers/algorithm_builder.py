"""Building the configured algorithm (with its data transformers) for an environment."""

from __future__ import annotations

import functools
from collections.abc import Callable

from alf.algorithms.factory import make_algorithm
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.environments import AlfEnvironment
from alf.trainers.trainer_config import TrainerConfig

__all__ = ["algorithm_factory", "build_algorithm", "make_algorithm"]


def algorithm_factory(config: TrainerConfig) -> Callable[..., RLAlgorithm]:
    """``(observation_spec=, action_spec=) -> RLAlgorithm`` for ``config`` (picklable, for
    actor processes)."""
    return functools.partial(
        make_algorithm,
        algorithm_ctor=config.algorithm_ctor,
        data_transformer_ctor=tuple(config.data_transformer_ctor or ()),
    )


def build_algorithm(config: TrainerConfig, env: AlfEnvironment) -> RLAlgorithm:
    """Builds the configured algorithm (with its data transformers) for ``env``'s specs."""
    algorithm = algorithm_factory(config)(
        observation_spec=env.observation_spec(), action_spec=env.action_spec()
    )
    # Create the optimizer now: a bad optimizer config fails before training starts,
    # and torch's one-off optimizer set-up cost is paid while building the run.
    algorithm.optimizer  # noqa: B018
    return algorithm
