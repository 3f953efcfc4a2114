"""Environments: the :class:`AlfEnvironment` interface, its backends, suites and wrappers."""

from alf.environments import action_space_envs, bit_flipping, goal_env, suite_gym, wrappers
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.atari import AtariPreset
from alf.environments.create_environment import create_environment
from alf.environments.decorrelation import DecorrelateStart
from alf.environments.goal_env import GoalEnvironmentError, goal_env_reward
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
    "GoalEnvironmentError",
    "GymnasiumEnvironment",
    "MissingExtraError",
    "ObservationSubset",
    "RewardSign",
    "UnknownEnvironmentError",
    "VizdoomPreset",
    "action_space_envs",
    "bit_flipping",
    "create_environment",
    "goal_env",
    "goal_env_reward",
    "resolve_env_id",
    "suite_gym",
    "wrappers",
]
