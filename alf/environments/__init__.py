"""Environments: the :class:`AlfEnvironment` interface, its backends, suites and wrappers."""

from alf.environments import action_space_envs, suite_gym, wrappers
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.atari import AtariPreset
from alf.environments.create_environment import create_environment
from alf.environments.decorrelation import DecorrelateStart
from alf.environments.gymnasium_environment import GymnasiumEnvironment
from alf.environments.suite_gym import (
    MissingExtraError,
    UnknownEnvironmentError,
    resolve_env_id,
)
from alf.environments.vizdoom import VizdoomPreset
from alf.environments.wrappers import ChannelFirst, ObservationSubset, RewardSign

__all__ = [
    "AlfEnvironment",
    "AtariPreset",
    "ChannelFirst",
    "DecorrelateStart",
    "GymnasiumEnvironment",
    "MissingExtraError",
    "ObservationSubset",
    "RewardSign",
    "UnknownEnvironmentError",
    "VizdoomPreset",
    "action_space_envs",
    "create_environment",
    "resolve_env_id",
    "suite_gym",
    "wrappers",
]
