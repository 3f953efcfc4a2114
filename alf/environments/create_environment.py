"""Creating environments by Gymnasium id, from configs."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import gymnasium as gym

from alf.config import configurable
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.gymnasium_environment import GymnasiumEnvironment

__all__ = ["UnknownEnvironmentError", "create_environment", "resolve_env_id"]


VECTORIZATION_MODES = ("sync", "vector_entry_point", "envpool", "subprocess")
"""How a batch of environments is stepped: in-process Gymnasium vector envs (``sync``,
``vector_entry_point``), EnvPool's C++ thread pool (``envpool``, the ``[envpool]`` extra),
or worker processes that each step a group of environments per message (``subprocess``)."""


class UnknownEnvironmentError(ValueError):
    """An environment id that is not registered with Gymnasium."""


def resolve_env_id(env_name: str) -> str:
    """Imports the module of a ``module:EnvName-v0`` id and checks the id is registered.

    Args:
        env_name: a registered Gymnasium id, or ``module:EnvName-v0`` where importing
            ``module`` registers ``EnvName-v0``.

    Returns:
        The plain id (without the module part).

    Raises:
        UnknownEnvironmentError: the module cannot be imported or the id is not
            registered; the message lists close matches.
    """
    env_id = env_name
    if ":" in env_name:
        module, env_id = env_name.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise UnknownEnvironmentError(
                f"Cannot import module '{module}' of environment id '{env_name}': {err}"
            ) from err
    if env_id not in gym.registry:
        matches = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=5, cutoff=0.6)
        hint = f" Close matches: {', '.join(matches)}." if matches else ""
        raise UnknownEnvironmentError(
            f"Environment id '{env_id}' is not registered with Gymnasium.{hint}"
        )
    return env_id


@configurable
def create_environment(
    env_name: str = "CartPole-v1",
    num_parallel_environments: int = 1,
    *,
    seed: int | None = None,
    vectorization_mode: str = "sync",
    num_workers: int | None = None,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> AlfEnvironment:
    """Creates a batch of ``num_parallel_environments`` Gymnasium environments.

    Args:
        env_name: a registered Gymnasium id, or ``module:EnvName-v0`` for an environment
            registered by importing a user module.
        num_parallel_environments: how many environments are stepped together.
        seed: seed of the first environment (environment ``i`` gets ``seed + i``).
        vectorization_mode: ``"sync"`` (a Gymnasium ``SyncVectorEnv``, in-process),
            ``"vector_entry_point"`` (the environment's own vectorized implementation),
            ``"envpool"`` (EnvPool's C++ thread pool; needs the ``[envpool]`` extra and an
            id EnvPool supports) or ``"subprocess"`` (``num_workers`` processes, each
            stepping ``num_parallel_environments / num_workers`` environments per message
            through shared memory: for environments whose step is expensive).
        num_workers: worker processes of the ``"subprocess"`` mode (default: one per CPU
            core, at most one per environment).
        render_mode: e.g. ``"rgb_array"`` to record videos.
        max_episode_steps: overrides the registered time limit.
        env_kwargs: keyword arguments for the environment's constructor.

    Returns:
        An :class:`AlfEnvironment` of batch size ``num_parallel_environments``.
    """
    if vectorization_mode not in VECTORIZATION_MODES:
        raise ValueError(
            f"vectorization_mode must be one of {VECTORIZATION_MODES}, got '{vectorization_mode}'"
        )
    if num_parallel_environments < 1:
        raise ValueError(f"num_parallel_environments must be >= 1, got {num_parallel_environments}")
    if vectorization_mode == "envpool":
        # EnvPool has its own registry (e.g. ``Pong-v5``), checked by the backend.
        from alf.environments.envpool_environment import EnvPoolEnvironment

        pool_kwargs = dict(env_kwargs or {})
        if render_mode is not None:
            pool_kwargs["render_mode"] = render_mode
        return EnvPoolEnvironment(
            env_id=env_name,
            num_envs=num_parallel_environments,
            seed=seed,
            max_episode_steps=max_episode_steps,
            env_kwargs=pool_kwargs,
        )
    env_id = resolve_env_id(env_name)
    if vectorization_mode == "subprocess":
        from alf.environments.subprocess_environment import SubprocessEnvironment

        return SubprocessEnvironment(
            env_name=env_name,
            num_envs=num_parallel_environments,
            # At most one worker per environment (e.g. for a small evaluation batch).
            num_workers=num_workers and min(num_workers, num_parallel_environments),
            seed=seed,
            render_mode=render_mode,
            max_episode_steps=max_episode_steps,
            env_kwargs=env_kwargs,
        )
    kwargs = dict(env_kwargs or {})
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    vector_env = gym.make_vec(
        env_id,
        num_envs=num_parallel_environments,
        vectorization_mode=vectorization_mode,
        **kwargs,
    )
    return GymnasiumEnvironment(vector_env=vector_env, seed=seed)
