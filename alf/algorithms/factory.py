"""``make_algorithm``: an algorithm with its data transformers, from specs and
constructors (what the trainer and the async actors build their copies with)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_transformers import build_data_transformer

__all__ = ["make_algorithm"]


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
