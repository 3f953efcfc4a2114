"""Creating batches of environments by Gymnasium id, from configs."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym

from alf.config import configurable
from alf.environments import suite_gym
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.gymnasium_environment import GymnasiumEnvironment
from alf.environments.suite_gym import (
    MissingExtraError,
    UnknownEnvironmentError,
    resolve_env_id,
)

__all__ = [
    "MissingExtraError",
    "UnknownEnvironmentError",
    "create_environment",
    "resolve_env_id",
]


VECTORIZATION_MODES = ("sync", "vector_entry_point", "envpool", "subprocess")
"""How a batch of environments is stepped: in-process Gymnasium vector envs (``sync``,
``vector_entry_point``), EnvPool's C++ thread pool (``envpool``, the ``[envpool]`` extra),
or worker processes that each step a group of environments per message (``subprocess``)."""


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
    for_evaluation: bool = False,
    num_ranks: int = 1,
    rank: int = 0,
) -> AlfEnvironment:
    """Creates a batch of ``num_parallel_environments`` Gymnasium environments.

    Every environment of the ``"sync"`` and ``"subprocess"`` backends is made by
    :func:`alf.environments.suite_gym.load` with this function's ``env_name``,
    ``render_mode``, ``max_episode_steps``, ``env_kwargs`` and ``training=not
    for_evaluation``; its preset, wrappers and ``legacy_api`` are bound on ``load``
    itself (``suite_gym.load.preset = "atari"``, ``suite_gym.load.wrappers = [...]``), so
    the same bindings serve the training, evaluation and play environments. The
    ``"envpool"`` backend reads the same bindings: with the Atari preset it gives EnvPool
    the preset's options (the Gymnasium Atari ids map to EnvPool's, e.g.
    ``PongNoFrameskip-v4`` to ``Pong-v5``), so a config switches backends by changing only
    ``vectorization_mode``; EnvPool cannot apply wrappers or the legacy adapter.
    ``"vector_entry_point"`` takes none of them.

    Args:
        env_name: a registered Gymnasium id, ``module:EnvName-v0`` for an environment
            registered by importing a user module, or an id of a namespace registered by
            an extra (``ALE/Pong-v5``, ``PongNoFrameskip-v4``: ``[atari]``;
            ``dm_control/cheetah-run-v0``: ``[dmc]``).
        num_parallel_environments: how many environments are stepped together.
        seed: seed of the first environment (environment ``i`` gets ``seed + i``).
        vectorization_mode: ``"sync"`` (a Gymnasium ``SyncVectorEnv``, in-process),
            ``"vector_entry_point"`` (the environment's own vectorized implementation),
            ``"envpool"`` (EnvPool's C++ thread pool; needs the ``[envpool]`` extra and an
            id EnvPool supports) or ``"subprocess"`` (``num_workers`` processes, each
            stepping ``num_parallel_environments / num_workers`` environments per message
            through shared memory: for environments whose step is expensive; the workers
            load the current gin config, so ``load``'s bindings apply there too).
        num_workers: worker processes of the ``"subprocess"`` mode (default: one per CPU
            core, at most one per environment).
        render_mode: e.g. ``"rgb_array"`` to record videos.
        max_episode_steps: overrides the registered time limit (the preset's, for a
            preset; agent steps for Atari).
        env_kwargs: keyword arguments for the environment's constructor (for
            ``"envpool"``: of ``envpool.make``).
        for_evaluation: the environments evaluate or play rather than train (passed to
            ``load`` as ``training=False``: e.g. the Atari preset then neither ends
            episodes at a lost life nor clips rewards, so returns are game scores).
        num_ranks: set by the trainer of a data-parallel run: ``num_parallel_environments``
            is then the total over its ranks, and this rank builds
            ``num_parallel_environments / num_ranks`` of them (which must divide).
        rank: this rank (``0 <= rank < num_ranks``): it builds the run's environments
            ``rank * n + i`` (``n`` per rank), seeded ``seed + rank * n + i``.

    Returns:
        An :class:`AlfEnvironment` of batch size ``num_parallel_environments /
        num_ranks``.

    Raises:
        MissingExtraError: the id needs an extra that is not installed.
        UnknownEnvironmentError: the id is not registered.
        ValueError: invalid arguments, or options the backend cannot apply.
    """
    if vectorization_mode not in VECTORIZATION_MODES:
        raise ValueError(
            f"vectorization_mode must be one of {VECTORIZATION_MODES}, got '{vectorization_mode}'"
        )
    if num_parallel_environments < 1:
        raise ValueError(f"num_parallel_environments must be >= 1, got {num_parallel_environments}")
    if num_parallel_environments % num_ranks:
        raise ValueError(
            f"create_environment.num_parallel_environments={num_parallel_environments} is the "
            f"total over all ranks and must be divisible by the {num_ranks} ranks"
        )
    num_parallel_environments //= num_ranks
    if seed is not None:
        seed += rank * num_parallel_environments
    training = not for_evaluation
    load_args = dict(
        training=training,
        render_mode=render_mode,
        max_episode_steps=max_episode_steps,
        env_kwargs=env_kwargs,
    )
    # Also records load's bindings as used, whichever backend builds the environments.
    options = suite_gym.configured_options(env_name, **load_args)
    if vectorization_mode == "envpool":
        return _envpool_environment(
            env_name,
            num_parallel_environments,
            options=options,
            training=training,
            seed=seed,
            render_mode=render_mode,
            max_episode_steps=max_episode_steps,
            env_kwargs=env_kwargs,
        )
    if vectorization_mode == "vector_entry_point" and options.customized:
        raise ValueError(
            "vectorization_mode='vector_entry_point' cannot apply suite_gym.load's preset, "
            "wrappers or legacy_api: use 'sync' or 'subprocess'"
        )
    env_id = resolve_env_id(env_name)
    if vectorization_mode == "subprocess":
        from alf import config as alf_config
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
            for_evaluation=for_evaluation,
            config_text=alf_config.config_str(),
        )
    if vectorization_mode == "vector_entry_point":
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
    else:
        make_one = functools.partial(suite_gym.load, env_name, **load_args)
        vector_env = gym.vector.SyncVectorEnv(
            [make_one] * num_parallel_environments,
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
        )
    return GymnasiumEnvironment(vector_env=vector_env, seed=seed)


def _envpool_environment(
    env_name: str,
    num_envs: int,
    *,
    options: suite_gym.LoadOptions,
    training: bool,
    seed: int | None,
    render_mode: str | None,
    max_episode_steps: int | None,
    env_kwargs: dict[str, Any] | None,
) -> AlfEnvironment:
    """The ``"envpool"`` backend, with the configured preset's options."""
    from alf.environments.envpool_environment import EnvPoolEnvironment

    if options.wrappers or options.legacy_api:
        raise ValueError(
            "vectorization_mode='envpool' cannot apply suite_gym.load.wrappers or "
            "suite_gym.load.legacy_api: use 'sync' or 'subprocess'"
        )
    pool_kwargs: dict[str, Any] = {}
    env_id = env_name
    if options.preset is not None:
        if not hasattr(options.preset, "envpool_kwargs"):
            raise ValueError(f"EnvPool cannot apply the preset {options.preset!r}")
        from alf.environments.atari import envpool_atari_id

        env_id = envpool_atari_id(env_name) or env_name
        pool_kwargs.update(options.preset.envpool_kwargs(training=training))
        if max_episode_steps is None:
            max_episode_steps = options.preset.max_episode_steps
    pool_kwargs.update(env_kwargs or {})
    if render_mode is not None:
        pool_kwargs["render_mode"] = render_mode
    try:
        # EnvPool has its own registry (e.g. ``Pong-v5``), checked by the backend.
        return EnvPoolEnvironment(
            env_id=env_id,
            num_envs=num_envs,
            seed=seed,
            max_episode_steps=max_episode_steps,
            env_kwargs=pool_kwargs,
        )
    except ValueError as err:
        if "does not support" not in str(err):
            raise
        if env_id != env_name:
            raise ValueError(f"{err} (the Atari preset's id for '{env_name}')") from err
        if options.preset is None and (env_name.startswith("ALE/") or "NoFrameskip" in env_name):
            raise ValueError(
                f"{err}. For an Atari game, bind suite_gym.load.preset = 'atari' (EnvPool "
                "then runs its own id of the game with the preset)"
            ) from err
        raise
