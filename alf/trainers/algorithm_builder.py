"""Building the configured algorithm (with its data transformers) for an environment."""

from __future__ import annotations

import functools
from collections.abc import Callable

from alf.algorithms.factory import make_algorithm
from alf.algorithms.multi_policy import MultiPolicyAlgorithm
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.environments import AlfEnvironment
from alf.environments.pettingzoo_games import configured_agent_policies
from alf.trainers.trainer_config import TrainerConfig

__all__ = ["algorithm_factory", "build_algorithm", "make_algorithm"]


def algorithm_factory(config: TrainerConfig) -> Callable[..., RLAlgorithm]:
    """``(observation_spec=, action_spec=) -> RLAlgorithm`` for ``config`` (picklable, for
    actor processes): ``config.algorithm_ctor``'s algorithm, or, in a multi-agent game
    whose agents map to several policies or to a frozen one
    (:func:`~alf.environments.pettingzoo_games.policy_mapping`), a
    :class:`~alf.algorithms.multi_policy.MultiPolicyAlgorithm` of them."""
    algorithm_ctor = config.algorithm_ctor
    policies = configured_agent_policies()
    if policies is not None and not policies.is_shared:
        algorithm_ctor = functools.partial(
            MultiPolicyAlgorithm,
            algorithm_ctor=config.algorithm_ctor,
            policy_names=policies.policy_names,
            agent_policies=policies.agent_policies,
            frozen=policies.frozen,
        )
    return functools.partial(
        make_algorithm,
        algorithm_ctor=algorithm_ctor,
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
