"""A run's frozen policies (``TrainerConfig.frozen_policies``): policies it holds beside
the one it trains, each under its own name, with parameters that never change.

Each is a :class:`~alf.algorithms.policy.Policy` of the run's own algorithm, loaded from
a checkpoint of a run of the same config (a file, or a run directory for its newest
checkpoint). The run's checkpoints keep their parameters under ``policies/<name>``, so a
resumed run reads them from its own checkpoint, never again from the source, which may be
gone. Building them leaves the run's random-number stream as it was: a run with frozen
policies draws the same parameters and actions for its trained policy as one without.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from alf.algorithms.policy import Policy
from alf.run_dir.checkpoints import (
    CheckpointError,
    RunCheckpoint,
    read_checkpoint,
    read_checkpoint_file,
    restore_algorithm,
)
from alf.trainers.algorithm_builder import algorithm_factory
from alf.trainers.trainer_config import TrainerConfig

__all__ = ["frozen_policy_states", "load_frozen_policies"]


def _source_checkpoint(name: str, source: str) -> RunCheckpoint:
    """The checkpoint ``source`` names: a run directory's newest, or a file."""
    path = os.path.abspath(os.path.expanduser(source))
    try:
        if os.path.isdir(path):
            return read_checkpoint(path)
        return read_checkpoint_file(path)
    except CheckpointError as err:
        raise CheckpointError(f"TrainerConfig.frozen_policies[{name!r}]: {err}") from None


def load_frozen_policies(
    config: TrainerConfig,
    *,
    observation_spec: Any,
    action_spec: Any,
    resume: RunCheckpoint | None,
) -> dict[str, Policy]:
    """The frozen policies of ``config``, by name, on the CPU and in eval mode.

    Args:
        config: the run's settings (``frozen_policies``, and the algorithm to build).
        observation_spec: the environment's observation spec.
        action_spec: the environment's action spec.
        resume: the checkpoint the run resumes from: a policy it holds is taken from it.

    Raises:
        CheckpointError: a source checkpoint is missing, unreadable or of another
            algorithm (one line naming the policy and the file).
    """
    make = algorithm_factory(config)
    policies = {}
    with torch.random.fork_rng(devices=[]):
        for name, source in config.frozen_policies.items():
            algorithm = make(observation_spec=observation_spec, action_spec=action_spec)
            saved = None if resume is None else resume.policies.get(name)
            checkpoint = (
                _source_checkpoint(name, source)
                if saved is None
                else RunCheckpoint(
                    iteration=resume.iteration,
                    env_steps=resume.env_steps,
                    algorithm={"module": saved},
                    path=resume.path,
                )
            )
            try:
                restore_algorithm(algorithm, checkpoint, with_optimizer=False)
            except CheckpointError as err:
                raise CheckpointError(f"TrainerConfig.frozen_policies[{name!r}]: {err}") from None
            for parameter in algorithm.parameters():
                parameter.requires_grad_(False)
            policies[name] = Policy(algorithm=algorithm.eval(), name=name)
    return policies


def frozen_policy_states(policies: dict[str, Policy]) -> dict[str, dict[str, Any]]:
    """What a checkpoint keeps of the frozen policies: each one's parameters and
    statistics, by name."""
    return {name: policy.algorithm.state_dict() for name, policy in policies.items()}
