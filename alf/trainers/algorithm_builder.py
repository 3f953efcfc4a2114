"""Building the configured algorithm (with its data transformers) for an environment."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_transformers import build_data_transformer
from alf.environments import AlfEnvironment
from alf.trainers.checkpointer import CheckpointError
from alf.trainers.trainer_config import TrainerConfig

__all__ = ["algorithm_factory", "build_algorithm", "load_into", "make_algorithm"]


def make_algorithm(
    *,
    observation_spec: Any,
    action_spec: Any,
    algorithm_ctor: Callable[..., Any],
    data_transformer_ctor: Sequence[Callable[..., Any]] = (),
) -> RLAlgorithm:
    """Builds the data transformers for the raw ``observation_spec``, then the algorithm
    for their output spec, and installs the transformers in it."""
    transformer = build_data_transformer(data_transformer_ctor, observation_spec)
    algorithm = algorithm_ctor(
        observation_spec=transformer.transformed_observation_spec, action_spec=action_spec
    )
    if not isinstance(algorithm, RLAlgorithm):
        raise TypeError(f"algorithm_ctor built {type(algorithm).__name__}, not an RLAlgorithm")
    algorithm.set_data_transformer(transformer)
    return algorithm


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


def load_into(algorithm: RLAlgorithm, state: dict[str, Any], path: str) -> None:
    """Loads a checkpoint's ``"algorithm"`` part into ``algorithm``; a mismatch is a
    :class:`CheckpointError` naming ``path``."""
    try:
        algorithm.load_checkpoint_state(state["algorithm"])
    except (RuntimeError, KeyError, ValueError) as err:
        raise CheckpointError(
            f"Checkpoint '{path}' does not fit the configured algorithm (was it written "
            f"with a different config?): {err}"
        ) from err
