"""Environments: the :class:`AlfEnvironment` interface and its Gymnasium backend."""

from alf.environments.alf_environment import AlfEnvironment
from alf.environments.create_environment import (
    UnknownEnvironmentError,
    create_environment,
    resolve_env_id,
)
from alf.environments.gymnasium_environment import GymnasiumEnvironment

__all__ = [
    "AlfEnvironment",
    "GymnasiumEnvironment",
    "UnknownEnvironmentError",
    "create_environment",
    "resolve_env_id",
]
