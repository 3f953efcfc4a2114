"""The actor process of asynchronous collection.

An actor builds its environments and its :class:`~alf.algorithms.policy.Policy` (acting
with a CPU copy of the algorithm), then loops: take a free
fragment buffer, load the newest published parameters if the version changed, unroll
``unroll_length`` steps with a :class:`SyncUnroller` (or, with double buffering, a
:class:`DoubleBufferedUnroller`), write them into the buffer, and
send its index to the learner. Every message is a small tuple of Python numbers and
strings; the data stays in shared memory.
"""

from __future__ import annotations

import os
import queue
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any

import cloudpickle
import torch

from alf.algorithms.policy import Policy
from alf.environments.data_check import EnvironmentDataError
from alf.unrollers.double_buffered_unroller import DoubleBufferedUnroller
from alf.unrollers.shared_memory import FragmentPool, SharedParameters
from alf.unrollers.sync_unroller import SyncUnroller
from alf.utils.threads import set_cpu_threads

__all__ = ["ActorChannels", "ActorSetup", "FragmentMessage", "actor_main"]

POLL_S = 0.05
"""How often a waiting actor checks for a stop request and refreshes its heartbeat."""


@dataclass(frozen=True)
class ActorSetup:
    """What one actor process needs to build itself (pickled to the process).

    Attributes:
        actor_id: index of the actor (``0..num_actors-1``).
        config_text: gin bindings to load before building anything ("" for none).
        env_factory: cloudpickled ``(num_parallel_environments=, seed=) -> AlfEnvironment``.
        envs_per_actor: environments of the actor.
        algorithm_factory: cloudpickled ``(observation_spec=, action_spec=) -> RLAlgorithm``.
        env_seed: seed of the actor's first environment.
        torch_seed: seed of the actor's action sampling.
        unroll_length: environment steps per fragment.
        initial_collect_steps_left: uniformly random actions to take first (initial collection).
        env_id_offset: added to the actor's local environment ids (global ids).
        double_buffering: split the environments into two groups that alternate (see
            :class:`~alf.unrollers.DoubleBufferedUnroller`).
    """

    actor_id: int
    config_text: str
    env_factory: bytes
    envs_per_actor: int
    algorithm_factory: bytes
    env_seed: int
    torch_seed: int
    unroll_length: int
    initial_collect_steps_left: int
    env_id_offset: int
    double_buffering: bool = False


@dataclass(frozen=True)
class FragmentMessage:
    """An actor's report of a filled buffer.

    Attributes:
        actor_id: the actor.
        buffer: index of the filled buffer in the :class:`FragmentPool`.
        version: version of the parameters that chose the fragment's actions.
        num_old_rows: leading rows that are not new steps (history rows of the data
            transformers, and the repeat of the previous fragment's last row).
        env_steps: environment steps the fragment took.
        collect_s: seconds spent collecting it (not waiting for a buffer).
        episode_returns: returns of the episodes that ended in the fragment.
        episode_lengths: their lengths.
        episode_env_ids: their global env ids (as the fragment's ``env_id``).
        episode_successes: their ``info["is_success"]`` (NaN: not reported).
        clipped_actions: out-of-bounds continuous actions the actor's environments have
            clipped so far (cumulative).
        dropped_episodes: episodes the actor's environments ended early for non-finite
            data so far (cumulative).
    """

    actor_id: int
    buffer: int
    version: int
    num_old_rows: int
    env_steps: int
    collect_s: float
    episode_returns: list[float]
    episode_lengths: list[int]
    episode_env_ids: list[int]
    episode_successes: list[float]
    clipped_actions: int = 0
    dropped_episodes: int = 0


@dataclass(frozen=True)
class ActorChannels:
    """The shared objects an actor talks through.

    Attributes:
        pool: fragment buffers.
        parameters: published parameters.
        free_buffers: queue of indices of buffers an actor may fill.
        reports: queue of :class:`FragmentMessage`, ``("ready", id)`` and
            ``("error", id, traceback)`` to the learner.
        stop: event set by the learner to stop every actor.
        heartbeats: shared float64 ``[num_actors]`` of each actor's last sign of life
            (``time.monotonic()``).
    """

    pool: FragmentPool
    parameters: SharedParameters
    free_buffers: Any
    reports: Any
    stop: Any
    heartbeats: torch.Tensor


def _take_free_buffer(channels: ActorChannels, actor_id: int, parent: int) -> int | None:
    """A free buffer index, or None once a stop is requested or the learner is gone."""
    while not channels.stop.is_set() and os.getppid() == parent:
        channels.heartbeats[actor_id] = time.monotonic()
        try:
            return channels.free_buffers.get(timeout=POLL_S)
        except queue.Empty:
            continue
    return None


def _build_collector(
    setup: ActorSetup, make_env: Any, make_algorithm: Any
) -> SyncUnroller | DoubleBufferedUnroller:
    """The actor's environments, its policy (a copy of the algorithm, in eval mode) and
    the collector stepping them."""
    n = setup.envs_per_actor
    groups = [(n // 2, 0), (n - n // 2, n // 2)] if setup.double_buffering else [(n, 0)]
    envs = []
    try:
        for num_envs, first_env in groups:
            envs.append(
                make_env(num_parallel_environments=num_envs, seed=setup.env_seed + first_env)
            )
        algorithm = make_algorithm(
            observation_spec=envs[0].observation_spec(), action_spec=envs[0].action_spec()
        )
        policy = Policy(algorithm=algorithm.eval())
        if setup.double_buffering:
            return DoubleBufferedUnroller(
                envs=tuple(envs),
                policy=policy,
                unroll_length=setup.unroll_length,
                initial_collect_steps=setup.initial_collect_steps_left,
            )
        return SyncUnroller(
            env=envs[0],
            policy=policy,
            unroll_length=setup.unroll_length,
            initial_collect_steps=setup.initial_collect_steps_left,
        )
    except BaseException:
        for env in envs:
            env.close()
        raise


def _actor_collector(setup: ActorSetup) -> SyncUnroller | DoubleBufferedUnroller:
    """Loads the run's config into the actor process and builds its collector."""
    # Unpickling the factories imports their modules (a user's own algorithm's too),
    # so their configurables are registered before the config is loaded.
    make_env = cloudpickle.loads(setup.env_factory)
    make_algorithm = cloudpickle.loads(setup.algorithm_factory)
    if setup.config_text:
        from alf import config as alf_config
        from alf.configurables import (
            ACTING_PACKAGES,
            TRAINING_ONLY_CONFIGURABLES,
            import_configurables,
        )

        # What an actor builds is registered; the trainer's settings are skipped.
        import_configurables(ACTING_PACKAGES)
        alf_config.load_config_text(
            setup.config_text, skip_unknown=list(TRAINING_ONLY_CONFIGURABLES)
        )
    torch.manual_seed(setup.torch_seed)
    return _build_collector(setup, make_env, make_algorithm)


def _fragment_message(
    setup: ActorSetup,
    collector: SyncUnroller | DoubleBufferedUnroller,
    *,
    buffer: int,
    version: int,
    num_old_rows: int,
    collect_s: float,
) -> FragmentMessage:
    """The report of a fragment just written to ``buffer``, with the episodes that ended
    in it (their env ids made global)."""
    episodes = collector.pop_episodes()
    offset = setup.env_id_offset
    return FragmentMessage(
        actor_id=setup.actor_id,
        buffer=buffer,
        version=version,
        num_old_rows=num_old_rows,
        env_steps=collector.steps_per_unroll,
        collect_s=collect_s,
        episode_returns=episodes.returns,
        episode_lengths=episodes.lengths,
        episode_env_ids=[env_id + offset for env_id in episodes.env_ids],
        episode_successes=episodes.successes,
        clipped_actions=collector.num_clipped_actions,
        dropped_episodes=collector.num_dropped_episodes,
    )


def actor_main(setup: ActorSetup, channels: ActorChannels, parent: int) -> None:
    """Entry point of an actor process (see the module docstring).

    Any exception is reported to the learner as ``("error", actor_id, traceback)``.
    SIGINT and SIGTERM are ignored (a signal to the whole process group must reach the
    learner, which checkpoints and then stops the actors through ``channels.stop``; it
    kills any that do not stop).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    set_cpu_threads(1)
    actor_id = setup.actor_id
    collector = None
    try:
        collector = _actor_collector(setup)
        collector.on_step = lambda: channels.heartbeats.__setitem__(actor_id, time.monotonic())
        version = -1
        channels.heartbeats[actor_id] = time.monotonic()
        channels.reports.put(("ready", actor_id))
        while True:
            buffer = _take_free_buffer(channels, actor_id, parent)
            if buffer is None:
                break
            start = time.perf_counter()
            if channels.parameters.version != version:
                version = channels.parameters.load_into(collector.policy.algorithm)
            (segment,) = collector.collect()
            exp = segment.exp._replace(env_id=segment.exp.env_id + setup.env_id_offset)
            channels.pool.write(buffer, exp)
            channels.reports.put(
                _fragment_message(
                    setup,
                    collector,
                    buffer=buffer,
                    version=version,
                    num_old_rows=segment.num_old_rows,
                    collect_s=time.perf_counter() - start,
                )
            )
    except BaseException as err:  # noqa: BLE001 - everything is reported to the learner
        line = str(err) if isinstance(err, EnvironmentDataError) else None
        channels.reports.put(("error", actor_id, traceback.format_exc(), line))
    finally:
        if collector is not None:
            try:
                collector.close()
            except Exception:  # noqa: BLE001 - closing after a failure is best effort
                pass
        # Deliver the last reports, then exit at once: tearing down torch at interpreter
        # exit takes about a second, which would make every shutdown that much slower.
        if channels.stop.is_set() or os.getppid() != parent:
            # Nobody may read the last reports: never block on a full pipe.
            channels.reports.cancel_join_thread()
        channels.reports.close()
        channels.reports.join_thread()
        os._exit(0)
