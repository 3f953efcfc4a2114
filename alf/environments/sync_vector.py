"""A batch of ``suite_gym.load`` environments stepped in this process.

:func:`sync_vector_environment` is what the ``"sync"`` backend builds and what each
worker of the ``"subprocess"`` backend builds for its group of environments. It sits
below both :mod:`alf.environments.backends` and
:mod:`alf.environments.subprocess_environment`, so that the subprocess backend can hand
it to its workers without the worker module importing the backends.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import gymnasium as gym

from alf.environments import suite_gym
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.env_guard import GuardedEnv
from alf.environments.gymnasium_environment import GymnasiumEnvironment
from alf.environments.suite_gym import resolve_env_id

__all__ = ["EnvironmentBuilder", "sync_vector_environment"]


class EnvironmentBuilder(Protocol):
    """Builds a batch of environments in this process (e.g. a subprocess worker's group):
    the signature of :func:`sync_vector_environment`."""

    def __call__(
        self,
        *,
        env_name: str,
        num_envs: int,
        seed: int | None,
        render_mode: str | None,
        max_episode_steps: int | None,
        env_kwargs: dict[str, Any] | None,
        for_evaluation: bool,
        first_env_index: int,
        drop_nonfinite: bool,
    ) -> AlfEnvironment: ...


def sync_vector_environment(
    *,
    env_name: str,
    num_envs: int,
    seed: int | None,
    render_mode: str | None,
    max_episode_steps: int | None,
    env_kwargs: dict[str, Any] | None,
    for_evaluation: bool,
    first_env_index: int,
    drop_nonfinite: bool,
) -> AlfEnvironment:
    """A Gymnasium ``SyncVectorEnv`` of guarded ``suite_gym.load`` environments, in this
    process, as a :class:`GymnasiumEnvironment`.

    Args:
        env_name: the environment id as configured (an unknown id fails here, with close
            matches, before anything is built).
        num_envs: environments in the batch.
        seed: seed of the first environment (environment ``i`` gets ``seed + i``).
        render_mode: e.g. ``"rgb_array"``.
        max_episode_steps: overrides the registered time limit.
        env_kwargs: keyword arguments for the environment's constructor.
        for_evaluation: the environments evaluate or play (``training=False`` for
            ``suite_gym.load``).
        first_env_index: the run-wide index of the batch's first environment (named in
            errors).
        drop_nonfinite: a non-finite observation or reward ends that environment's
            episode instead of raising.

    Returns:
        The batch, of batch size ``num_envs``.
    """
    resolve_env_id(env_name)  # an unknown id fails here, with close matches
    load_args = dict(
        training=not for_evaluation,
        render_mode=render_mode,
        max_episode_steps=max_episode_steps,
        env_kwargs=env_kwargs,
    )
    makers = [
        functools.partial(_guarded_load, env_name, first_env_index + i, load_args)
        for i in range(num_envs)
    ]
    vector_env = gym.vector.SyncVectorEnv(makers, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    return GymnasiumEnvironment(
        vector_env=vector_env,
        seed=seed,
        env_name=env_name,
        first_index=first_env_index,
        drop_nonfinite=drop_nonfinite,
    )


def _guarded_load(env_name: str, index: int, load_args: dict[str, Any]) -> gym.Env:
    """Environment ``index`` (run-wide) of the batch, made by ``suite_gym.load`` and
    guarded (:class:`~alf.environments.env_guard.GuardedEnv`: what its ``reset`` and
    ``step`` raise or wrongly return is one line naming it)."""
    env = suite_gym.load(env_name, **load_args)
    return GuardedEnv(env, env_name=env_name, index=index)
