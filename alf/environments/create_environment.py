"""Creating batches of environments by Gymnasium id, from configs.

Every environment of the ``"sync"`` and ``"subprocess"`` backends is made by
:func:`alf.environments.suite_gym.load` with :func:`create_environment`'s ``env_name``,
``render_mode``, ``max_episode_steps``, ``env_kwargs`` and ``training=not
for_evaluation``; its preset, wrappers and ``legacy_api`` are bound on ``load`` itself
(``suite_gym.load.preset = "atari"``, ``suite_gym.load.wrappers = [...]``), so the same
bindings serve the training, evaluation and play environments. The ``"envpool"`` backend
reads the same bindings: with the Atari preset it gives EnvPool the preset's options (the
Gymnasium Atari ids map to EnvPool's, e.g. ``PongNoFrameskip-v4`` to ``Pong-v5``), so a
config switches backends by changing only ``vectorization_mode``; EnvPool cannot apply
wrappers or the legacy adapter. ``"vector_entry_point"`` takes none of them.

The backends ``create_environment.vectorization_mode`` names (see
:mod:`alf.environments.backends`):

* ``"sync"``: a Gymnasium ``SyncVectorEnv``, in this process;
* ``"vector_entry_point"``: the environment's own vectorized implementation;
* ``"envpool"``: EnvPool's C++ thread pool (needs the ``[envpool]`` extra and an id
  EnvPool supports);
* ``"subprocess"``: ``num_workers`` processes, each stepping
  ``num_parallel_environments / num_workers`` environments per message through shared
  memory (for environments whose step is expensive; the workers load the current gin
  config, so ``load``'s bindings apply there too);
* or a backend function of one's own (``@my_backend`` in a config: it takes a
  :class:`~alf.environments.backends.BackendRequest`; see
  ``docs/adding_an_environment_backend.md``).
"""

from __future__ import annotations

import os
from typing import Any

from alf.config import configurable
from alf.environments import suite_gym
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.backends import BACKENDS, Backend, BackendRequest
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


MAX_PARALLEL_ENVIRONMENTS = 65_536
"""The default bound of ``create_environment.max_parallel_environments``."""

VECTORIZATION_MODES = tuple(BACKENDS)
"""How a batch of environments is stepped: in-process Gymnasium vector envs (``sync``,
``vector_entry_point``), EnvPool's C++ thread pool (``envpool``, the ``[envpool]`` extra),
or worker processes that each step a group of environments per message (``subprocess``);
see :mod:`alf.environments.backends`."""


@configurable
def create_environment(
    env_name: str = "CartPole-v1",
    num_parallel_environments: int = 1,
    *,
    seed: int | None = None,
    vectorization_mode: str | Backend = "sync",
    num_workers: int | None = None,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    for_evaluation: bool = False,
    num_ranks: int = 1,
    rank: int = 0,
    drop_nonfinite: bool = False,
    first_env_index: int = 0,
    max_parallel_environments: int = MAX_PARALLEL_ENVIRONMENTS,
) -> AlfEnvironment:
    """Creates a batch of ``num_parallel_environments`` Gymnasium environments.

    Args:
        env_name: a registered Gymnasium id, ``module:EnvName-v0`` (registered by
            importing a user module), or an id an extra registers (``ALE/Pong-v5``,
            ``PongNoFrameskip-v4``: ``[atari]``; ``dm_control/cheetah-run-v0``: ``[dmc]``).
        num_parallel_environments: how many environments are stepped together.
        seed: seed of the first environment (environment ``i`` gets ``seed + i``).
        vectorization_mode: ``"sync"``, ``"vector_entry_point"``, ``"envpool"`` or
            ``"subprocess"`` (:data:`~alf.environments.backends.BACKENDS`), or a backend
            function of one's own (``@my_backend`` in a config).
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
        drop_nonfinite: set by the trainer from ``TrainerConfig.nonfinite_data``: non-finite
            data ends that environment's episode at its previous step instead of raising
            ``EnvironmentDataError`` (``"sync"`` and ``"subprocess"`` only).
        first_env_index: the run-wide index of this batch's first environment (before
            the rank's offset), named in errors.
        max_parallel_environments: the most environments one process may build (this
            rank's share), refused before anything is built (a count far beyond what a
            machine holds would build for minutes and crash): raise it where they fit.

    Returns:
        An :class:`AlfEnvironment` of batch size ``num_parallel_environments /
        num_ranks``.

    Raises:
        MissingExtraError: the id needs an extra that is not installed.
        UnknownEnvironmentError: the id is not registered.
        ValueError: invalid arguments, or options the backend cannot apply.
    """
    backend = _backend(vectorization_mode)
    num_envs = _rank_share(num_parallel_environments, num_ranks)
    _check_capacity(num_envs, max_parallel_environments, backend, num_workers)
    offset = rank * num_envs  # this rank's first environment
    request = BackendRequest(
        env_name=env_name,
        num_envs=num_envs,
        seed=None if seed is None else seed + offset,
        num_workers=num_workers,
        render_mode=render_mode,
        max_episode_steps=max_episode_steps,
        env_kwargs=env_kwargs,
        for_evaluation=for_evaluation,
        first_env_index=first_env_index + offset,
        drop_nonfinite=drop_nonfinite,
        options=_load_options(env_name, for_evaluation, render_mode, max_episode_steps, env_kwargs),
    )
    return backend(request)


def _load_options(
    env_name: str,
    for_evaluation: bool,
    render_mode: str | None,
    max_episode_steps: int | None,
    env_kwargs: dict[str, Any] | None,
) -> suite_gym.LoadOptions:
    """The options the config binds on ``suite_gym.load``; also records load's bindings
    as used, whichever backend builds the environments."""
    return suite_gym.configured_options(
        env_name,
        training=not for_evaluation,
        render_mode=render_mode,
        max_episode_steps=max_episode_steps,
        env_kwargs=env_kwargs,
    )


def _backend(vectorization_mode: str | Backend) -> Backend:
    """The backend ``vectorization_mode`` names, or the backend function it is."""
    if callable(vectorization_mode):
        return vectorization_mode
    if vectorization_mode in BACKENDS:
        return BACKENDS[vectorization_mode]
    raise ValueError(
        f"vectorization_mode must be one of {VECTORIZATION_MODES} or a backend function, "
        f"got {vectorization_mode!r}"
    )


def _rank_share(num_parallel_environments: int, num_ranks: int) -> int:
    """This rank's share of the run's ``num_parallel_environments`` (which must divide)."""
    if num_parallel_environments < 1:
        raise ValueError(f"num_parallel_environments must be >= 1, got {num_parallel_environments}")
    if num_parallel_environments % num_ranks:
        raise ValueError(
            f"create_environment.num_parallel_environments={num_parallel_environments} is the "
            f"total over all ranks and must be divisible by the {num_ranks} ranks"
        )
    return num_parallel_environments // num_ranks


def _check_capacity(
    num_envs: int, max_envs: int, backend: Backend, num_workers: int | None
) -> None:
    """Refuses, before anything is built, more environments than
    ``max_parallel_environments`` in one process, or (``"subprocess"``) more worker
    processes than the open-file limit can connect."""
    if num_envs > max_envs:
        raise ValueError(
            f"create_environment.num_parallel_environments={num_envs} (per process) is more "
            f"than create_environment.max_parallel_environments={max_envs}: building them "
            "would take minutes and likely exhaust memory; raise max_parallel_environments "
            "if this machine really holds them"
        )
    if backend is BACKENDS["subprocess"]:
        import resource

        workers = min(num_workers or os.cpu_count() or 1, num_envs)
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        needed = _FDS_PER_WORKER * workers + _FDS_RESERVED
        if soft_limit != resource.RLIM_INFINITY and needed > soft_limit:
            raise ValueError(
                f"create_environment.num_workers={workers} worker processes need about "
                f"{needed} open files, more than this process's limit of {soft_limit} "
                "(ulimit -n): use fewer workers or raise the limit"
            )


_FDS_PER_WORKER = 4
"""Open files of the parent per subprocess worker (its pipe, shared memory, sentinel)."""

_FDS_RESERVED = 256
"""Open files left for everything else of the process."""
