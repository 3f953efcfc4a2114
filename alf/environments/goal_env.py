"""Goal-conditioned environments: their reward function for hindsight relabelling.

A goal environment (Gymnasium-Robotics' ``GoalEnv``: Fetch, Shadow Hand; ALF's
``alf/BitFlipping-v0``) observes a ``Dict`` with ``observation``, ``achieved_goal`` and
``desired_goal`` and has ``compute_reward(achieved_goal, desired_goal, info)``, batched
over leading axes. :func:`goal_env_reward` builds one environment of the run's config and
returns its ``compute_reward`` as a torch function, for
:class:`~alf.replay_buffers.hindsight.HindsightRelabeller`::

    ReplayBuffer.hindsight = @HindsightRelabeller()
    HindsightRelabeller.reward_fn = @goal_env_reward()

``compute_reward`` is called with ``info=None``: rewards that need the step's ``info``
cannot be recomputed (the replay buffer does not keep it).
"""

from __future__ import annotations

from typing import Any

import gin
import gymnasium as gym
import numpy as np
import torch

from alf.config import configurable, default_value
from alf.environments import suite_gym
from alf.errors import UserError

__all__ = ["GoalEnvironmentError", "GoalReward", "goal_env_reward", "goal_reward_of"]

GOAL_KEYS = ("achieved_goal", "desired_goal")
"""The observation keys of a goal environment's goals."""


class GoalEnvironmentError(UserError, ValueError):
    """Hindsight relabelling asked of an environment that is not goal-conditioned."""


class GoalReward:
    """An environment's ``compute_reward`` as a batched torch function.

    Args:
        compute_reward: ``compute_reward(achieved_goal, desired_goal, info)`` of numpy
            arrays ``[N, *g]``, returning ``[N]`` rewards.
        env: the environment it belongs to (kept open as long as this is used).
        env_name: the environment's id, for messages.
    """

    def __init__(
        self, compute_reward: Any, *, env: gym.Env | None = None, env_name: str = ""
    ) -> None:
        self._compute_reward = compute_reward
        self._env = env
        self.env_name = env_name

    def __call__(self, achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
        """``[N]`` float32 rewards of ``[N, *g]`` achieved goals for ``[N, *g]`` desired
        goals (on the achieved goals' device)."""
        reward = self._compute_reward(
            achieved_goal.detach().cpu().numpy(), desired_goal.detach().cpu().numpy(), None
        )
        reward = np.asarray(reward, dtype=np.float32).reshape(achieved_goal.shape[0])
        return torch.from_numpy(reward).to(achieved_goal.device)


def goal_reward_of(env: gym.Env, env_name: str) -> GoalReward:
    """The reward function of goal environment ``env``, checked to be one.

    Args:
        env: the environment (wrapped or not).
        env_name: its id, named in errors.

    Returns:
        Its ``compute_reward`` as a :class:`GoalReward`.

    Raises:
        GoalEnvironmentError: the observation is not a ``Dict`` with ``achieved_goal``
            and ``desired_goal``, or the environment has no ``compute_reward``.
    """
    space = env.observation_space
    keys = list(space.spaces) if isinstance(space, gym.spaces.Dict) else None
    if keys is None or not all(k in keys for k in GOAL_KEYS):
        shape = getattr(space, "shape", None)
        got = f"the keys {keys}" if keys is not None else f"a {type(space).__name__} {shape}"
        raise GoalEnvironmentError(
            f"Hindsight relabelling (HindsightRelabeller) needs a goal environment, but "
            f"'{env_name}' observes {got}, without 'achieved_goal' and 'desired_goal'"
        )
    compute_reward = getattr(env.unwrapped, "compute_reward", None)
    if not callable(compute_reward):
        raise GoalEnvironmentError(
            f"Hindsight relabelling (HindsightRelabeller) needs the environment's "
            f"compute_reward(achieved_goal, desired_goal, info), and '{env_name}' "
            f"({type(env.unwrapped).__name__}) has none"
        )
    return GoalReward(compute_reward, env=env, env_name=env_name)


def _bound(name: str) -> Any:
    try:
        return gin.query_parameter(name)
    except ValueError:
        return None


@configurable
def goal_env_reward(
    env_name: str | None = None, env_kwargs: dict[str, Any] | None = None
) -> GoalReward:
    """The reward function of the run's goal environment, for
    ``HindsightRelabeller.reward_fn = @goal_env_reward()``.

    Builds one environment with :func:`~alf.environments.suite_gym.load` (the configured
    preset and wrappers) and takes its ``compute_reward``.

    Args:
        env_name: the environment id (default: ``create_environment.env_name`` of the
            config).
        env_kwargs: its constructor's keyword arguments (default: those of
            ``create_environment.env_kwargs`` when ``env_name`` is the configured one).

    Returns:
        The environment's batched reward function.

    Raises:
        GoalEnvironmentError: the environment is not a goal environment.
        UnknownEnvironmentError: the id is not registered (or its extra is missing).
    """
    configured = _bound("create_environment.env_name") or default_value(
        "create_environment", "env_name"
    )
    if env_name is None:
        env_name = str(configured)
    if env_kwargs is None and env_name == configured:
        env_kwargs = _bound("create_environment.env_kwargs")
    env = suite_gym.load(env_name, env_kwargs=env_kwargs)
    try:
        return goal_reward_of(env, env_name)
    except GoalEnvironmentError:
        env.close()
        raise
