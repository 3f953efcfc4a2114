"""Environment backends: how :func:`~alf.environments.create_environment` steps a batch.

A backend is a function ``backend(request: BackendRequest) -> AlfEnvironment``.
:data:`BACKENDS` maps the names ``create_environment.vectorization_mode`` accepts to the
built-in ones; a config can also pass a function of its own
(``create_environment.vectorization_mode = @my_backend``). See
``docs/adding_an_environment_backend.md``.

The default is ``"sync"`` for every id, although ``"envpool"`` steps faster where it
supports the id: EnvPool draws its episodes from its own C++ random generators, so for
the same seed its episodes are not Gymnasium's (checked for CartPole-v1, Pendulum-v1,
MountainCar-v0, Acrobot-v1, HalfCheetah-v5 and Hopper-v5: the reset observations
already differ), and a default that changed the episodes a seed gives would change
every seeded run of the configs that do not name a backend. Configs choose EnvPool
explicitly (``create_environment.vectorization_mode = "envpool"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import gymnasium as gym

from alf import config as alf_config
from alf.environments import suite_gym
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.atari import envpool_atari_id
from alf.environments.envpool_environment import EnvPoolEnvironment
from alf.environments.gymnasium_environment import GymnasiumEnvironment
from alf.environments.pettingzoo_environment import pettingzoo_environment
from alf.environments.pettingzoo_games import game_info, is_pettingzoo
from alf.environments.subprocess_environment import SubprocessEnvironment
from alf.environments.suite_gym import resolve_env_id
from alf.environments.sync_vector import EnvironmentBuilder, sync_vector_environment

__all__ = ["BACKENDS", "Backend", "BackendRequest"]


@dataclass(frozen=True)
class BackendRequest:
    """What :func:`~alf.environments.create_environment` asks a backend to build (this
    rank's share of the environments, seeds already offset).

    Attributes:
        env_name: the environment id as configured.
        num_envs: environments in the batch.
        seed: seed of the first environment (environment ``i`` gets ``seed + i``).
        num_workers: worker processes asked for (``"subprocess"``; None: default).
        render_mode: e.g. ``"rgb_array"``.
        max_episode_steps: overrides the registered time limit.
        env_kwargs: keyword arguments for the environment's constructor.
        for_evaluation: the environments evaluate or play rather than train.
        options: ``suite_gym.load``'s configured preset, wrappers and legacy adapter.
        first_env_index: the run-wide index of the batch's first environment, for the
            backend's error messages.
        drop_nonfinite: a non-finite observation or reward ends that environment's
            episode instead of raising (``TrainerConfig.nonfinite_data``); a backend
            that cannot reset one environment alone raises ``ValueError`` when asked.
    """

    env_name: str
    num_envs: int
    seed: int | None
    num_workers: int | None
    render_mode: str | None
    max_episode_steps: int | None
    env_kwargs: dict[str, Any] | None
    for_evaluation: bool
    options: suite_gym.LoadOptions
    first_env_index: int = 0
    drop_nonfinite: bool = False

    @property
    def load_args(self) -> dict[str, Any]:
        """``suite_gym.load``'s keyword arguments for one environment of the batch."""
        return dict(
            training=not self.for_evaluation,
            render_mode=self.render_mode,
            max_episode_steps=self.max_episode_steps,
            env_kwargs=self.env_kwargs,
        )


Backend = Callable[[BackendRequest], AlfEnvironment]
"""A function that builds the batch a :class:`BackendRequest` describes."""


def _check_pettingzoo(request: BackendRequest, backend: str) -> int:
    """For a PettingZoo game: checks the backend can step it and returns its rows per
    game (the number of agents, or 1 for a turn-based game's learner row)."""
    if backend not in ("sync", "subprocess"):
        raise ValueError(
            f"vectorization_mode={backend!r} cannot step the PettingZoo game "
            f"'{request.env_name}': use 'sync' or 'subprocess'"
        )
    if request.options.customized:
        raise ValueError(
            f"suite_gym.load's preset, wrappers and legacy_api apply to Gymnasium "
            f"environments, not to the PettingZoo game '{request.env_name}'"
        )
    info = game_info(request.env_name, request.env_kwargs)
    return 1 if info.turn_based else len(info.agents)


def sync_backend(request: BackendRequest) -> AlfEnvironment:
    """``"sync"``: a Gymnasium ``SyncVectorEnv`` of ``suite_gym.load`` environments, in
    this process (cheap environments); a PettingZoo game's batch
    (:mod:`~alf.environments.pettingzoo_environment`) for ``pettingzoo:<module>``."""
    builder: EnvironmentBuilder = sync_vector_environment
    if is_pettingzoo(request.env_name):
        _check_pettingzoo(request, "sync")
        builder = pettingzoo_environment
    return builder(
        env_name=request.env_name,
        num_envs=request.num_envs,
        seed=request.seed,
        render_mode=request.render_mode,
        max_episode_steps=request.max_episode_steps,
        env_kwargs=request.env_kwargs,
        for_evaluation=request.for_evaluation,
        first_env_index=request.first_env_index,
        drop_nonfinite=request.drop_nonfinite,
    )


def _gymnasium_environment(
    vector_env: gym.vector.VectorEnv, request: BackendRequest
) -> AlfEnvironment:
    """The :class:`GymnasiumEnvironment` over ``vector_env``, checking its data as the
    request says."""
    return GymnasiumEnvironment(
        vector_env=vector_env,
        seed=request.seed,
        env_name=request.env_name,
        first_index=request.first_env_index,
        drop_nonfinite=request.drop_nonfinite,
    )


def vector_entry_point_backend(request: BackendRequest) -> AlfEnvironment:
    """``"vector_entry_point"``: the environment's own vectorized implementation
    (``gymnasium.make_vec``); it cannot apply ``suite_gym.load``'s options."""
    if is_pettingzoo(request.env_name):
        _check_pettingzoo(request, "vector_entry_point")
    if request.options.customized:
        raise ValueError(
            "vectorization_mode='vector_entry_point' cannot apply suite_gym.load's preset, "
            "wrappers or legacy_api: use 'sync' or 'subprocess'"
        )
    env_id = resolve_env_id(request.env_name)
    kwargs = dict(request.env_kwargs or {})
    if request.render_mode is not None:
        kwargs["render_mode"] = request.render_mode
    if request.max_episode_steps is not None:
        kwargs["max_episode_steps"] = request.max_episode_steps
    vector_env = gym.make_vec(
        env_id, num_envs=request.num_envs, vectorization_mode="vector_entry_point", **kwargs
    )
    return _gymnasium_environment(vector_env, request)


def subprocess_backend(request: BackendRequest) -> AlfEnvironment:
    """``"subprocess"``: worker processes, each stepping a group of ``suite_gym.load``
    environments per message through shared memory (expensive environments)."""
    rows_per_unit: int = 1
    env_builder: EnvironmentBuilder = sync_vector_environment
    if is_pettingzoo(request.env_name):
        rows_per_unit = _check_pettingzoo(request, "subprocess")
        env_builder = pettingzoo_environment
        if request.num_envs % rows_per_unit:
            raise ValueError(
                f"create_environment.num_parallel_environments counts agents (batch rows): "
                f"'{request.env_name}' has {rows_per_unit} agents, so it must be a multiple "
                f"of {rows_per_unit}, got {request.num_envs}"
            )
    else:
        resolve_env_id(request.env_name)
    num_workers = request.num_workers
    num_units = request.num_envs // rows_per_unit
    return SubprocessEnvironment(
        env_name=request.env_name,
        num_envs=request.num_envs,
        # At most one worker per environment (e.g. for a small evaluation batch).
        num_workers=num_workers and min(num_workers, num_units),
        seed=request.seed,
        render_mode=request.render_mode,
        max_episode_steps=request.max_episode_steps,
        env_kwargs=request.env_kwargs,
        for_evaluation=request.for_evaluation,
        config_text=alf_config.config_str(),
        first_env_index=request.first_env_index,
        drop_nonfinite=request.drop_nonfinite,
        # Each worker builds its group as the "sync" backend builds a batch.
        env_builder=env_builder,
        rows_per_unit=rows_per_unit,
    )


def envpool_backend(request: BackendRequest) -> AlfEnvironment:
    """``"envpool"``: EnvPool's C++ thread pool (the ``[envpool]`` extra), with the
    configured preset's options (no wrappers or legacy adapter)."""
    env_name, options = request.env_name, request.options
    if is_pettingzoo(env_name):
        _check_pettingzoo(request, "envpool")
    max_episode_steps, env_kwargs = request.max_episode_steps, request.env_kwargs

    if options.wrappers or options.legacy_api:
        raise ValueError(
            "vectorization_mode='envpool' cannot apply suite_gym.load.wrappers or "
            "suite_gym.load.legacy_api: use 'sync' or 'subprocess'"
        )
    if request.drop_nonfinite:
        raise ValueError(
            "TrainerConfig.nonfinite_data='drop_episode' cannot reset one EnvPool "
            "environment alone: use create_environment.vectorization_mode 'sync' or "
            "'subprocess', or nonfinite_data='stop'"
        )
    pool_kwargs: dict[str, Any] = {}
    env_id = env_name
    if options.preset is not None:
        if not hasattr(options.preset, "envpool_kwargs"):
            raise ValueError(f"EnvPool cannot apply the preset {options.preset!r}")
        env_id = envpool_atari_id(env_name) or env_name
        pool_kwargs.update(options.preset.envpool_kwargs(training=not request.for_evaluation))
        if max_episode_steps is None:
            max_episode_steps = options.preset.max_episode_steps
    pool_kwargs.update(env_kwargs or {})
    if request.render_mode is not None:
        pool_kwargs["render_mode"] = request.render_mode
    try:
        # EnvPool has its own registry (e.g. ``Pong-v5``), checked by the backend.
        return EnvPoolEnvironment(
            env_id=env_id,
            num_envs=request.num_envs,
            seed=request.seed,
            max_episode_steps=max_episode_steps,
            env_kwargs=pool_kwargs,
            env_name=env_name,
            first_index=request.first_env_index,
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


BACKENDS: Mapping[str, Backend] = MappingProxyType(
    {
        "sync": sync_backend,
        "vector_entry_point": vector_entry_point_backend,
        "envpool": envpool_backend,
        "subprocess": subprocess_backend,
    }
)
"""The built-in backends by ``vectorization_mode`` name."""
