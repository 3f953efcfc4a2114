"""``AsyncUnroller``: actor processes collect into shared memory while the learner trains."""

from __future__ import annotations

import dataclasses
import gc
import os
import queue
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.multiprocessing as mp

from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.config import configurable
from alf.data_structures import Segment, Trajectory
from alf.environments.data_check import EnvironmentDataError
from alf.errors import TrainingError
from alf.unrollers.actor import ActorChannels, ActorSetup, FragmentMessage, actor_main
from alf.unrollers.collector import Collector
from alf.unrollers.episode_tracker import CompletedEpisodes
from alf.unrollers.shared_memory import (
    SEMAPHORE_PREFIX,
    FragmentPool,
    SharedParameters,
    remove_stale_semaphores,
)

__all__ = ["ActorError", "ActorTimeoutError", "AsyncUnroller", "Fragment"]

POLL_S = 0.1
"""How often the waiting learner checks the actors' health."""


class ActorError(TrainingError, RuntimeError):
    """An actor process failed: its exception (with traceback) or its exit."""


class ActorTimeoutError(ActorError):
    """An actor showed no sign of life for longer than its heartbeat timeout."""


@dataclass(frozen=True)
class Fragment(Segment):
    """A trajectory fragment received from an actor: a :class:`~alf.data_structures.Segment`
    of ``[h + unroll_length + 1, envs_per_actor]`` steps (global env ids; ``h`` history
    rows for the data transformers, see :class:`~alf.unrollers.SyncUnroller`), whose last
    ``h + 1`` rows are the first ones of the actor's next fragment.

    Attributes:
        actor_id: the actor that collected it.
        version: the parameter version that chose its actions (but row 0's, when it
            repeats the previous fragment's last row).
    """

    actor_id: int = 0
    version: int = 0


class _ReceivedEpisodes:
    """Episode returns, lengths, (global) env ids and successes reported by the actors
    (the EpisodeTracker API)."""

    def __init__(self) -> None:
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.env_ids: list[int] = []
        self.successes: list[float] = []

    def pop_completed(self) -> CompletedEpisodes:
        episodes = CompletedEpisodes(self.returns, self.lengths, self.env_ids, self.successes)
        self.returns, self.lengths, self.env_ids, self.successes = [], [], [], []
        return episodes


def _check_settings(
    *,
    num_envs: int,
    num_actors: int,
    num_buffers: int,
    fragments_per_iteration: int,
    max_policy_lag: int | None,
    unroll_length: int,
    update_period: int,
    keep_every_fragment: bool,
    double_buffering: bool,
) -> None:
    """Refuses settings of :class:`AsyncUnroller` that cannot work, naming them."""
    if num_actors < 1 or num_envs % num_actors:
        raise ValueError(
            f"AsyncUnroller: num_envs={num_envs} (create_environment."
            f"num_parallel_environments) must be a positive multiple of "
            f"num_actors={num_actors}"
        )
    if keep_every_fragment and max_policy_lag is not None:
        raise ValueError(
            "AsyncUnroller.max_policy_lag applies to on-policy algorithms only (an "
            "off-policy one learns from old data anyway, and a dropped fragment would "
            "leave a gap inside an episode in its replay buffer)"
        )
    if double_buffering and (num_envs // num_actors) % 2:
        raise ValueError(
            f"AsyncUnroller.double_buffering splits each actor's environments into two "
            f"equal groups: num_envs / num_actors = {num_envs // num_actors} must be even"
        )
    if not 1 <= fragments_per_iteration <= num_buffers:
        raise ValueError(
            f"AsyncUnroller: fragments_per_iteration={fragments_per_iteration} must be "
            f"in [1, num_buffers={num_buffers}]"
        )
    if unroll_length < 1 or update_period < 1:
        raise ValueError("AsyncUnroller: unroll_length and the update period must be >= 1")


@configurable
class AsyncUnroller(Collector):
    """Collects with ``num_actors`` processes while the learner trains (a
    :class:`~alf.unrollers.Collector`).

    Each actor owns ``num_envs / num_actors`` environments and a
    :class:`~alf.algorithms.policy.Policy` acting with a CPU copy of the algorithm, and
    fills fragment buffers ``[h + unroll_length + 1, envs_per_actor]`` of a
    shared-memory :class:`FragmentPool`; only buffer indices travel through queues. The
    learner :meth:`publish` es its parameters every ``unroll_parameter_update_period``
    training iterations; actors load a new version before their next fragment and stamp
    the fragment with it. At most ``num_buffers`` fragments exist at once, which bounds
    how far collection runs ahead of training. Fragments whose policy lag (published
    versions since theirs) exceeds ``max_policy_lag`` are dropped and counted.

    Failures surface in the learner within about a second: an exception in an actor as
    :class:`ActorError` naming it and carrying its traceback; an actor that exits, as
    :class:`ActorError` with its exit code; one silent for ``heartbeat_timeout_s`` (every
    environment step is a heartbeat), as :class:`ActorTimeoutError`. :meth:`close` stops
    and joins every actor (killing stragglers) and frees the shared memory.

    Runs are not bit-for-bit reproducible: which parameters chose which actions depends
    on the timing of the processes.

    Args:
        env_factory: ``env_factory(num_parallel_environments=..., seed=...)`` builds one
            actor's environments (cloudpickled to the actors; e.g. ``create_environment``).
        policy: the learner's policy: its parameters are the first ones published (and
            its experience spec gives the fragments' layout).
        algorithm_factory: ``algorithm_factory(observation_spec=, action_spec=)`` builds
            an actor's copy (cloudpickled; usually ``TrainerConfig.algorithm_ctor``).
        num_envs: environments over all actors (a multiple of ``num_actors``).
        unroll_length: environment steps per environment per fragment.
        seed: actor ``a``'s environment ``i`` gets seed ``seed + a * envs_per_actor + i``
            (as in sync collection); action sampling is seeded per actor from
            ``numpy.random.SeedSequence(seed).spawn``.
        config_text: gin bindings the actors load before building (the run's config).
        initial_collect_steps: uniformly random actions taken first, split over the actors.
        num_actors: actor processes.
        num_buffers: fragment buffers (default ``2 * num_actors``).
        fragments_per_iteration: fragments :meth:`collect` returns per call.
        max_policy_lag: drop fragments older than this many versions (None: keep all).
        unroll_parameter_update_period: training iterations between publications.
        heartbeat_timeout_s: an actor silent this long (after it started) is an error.
        startup_timeout_s: an actor not ready this long after starting is an error.
        keep_every_fragment: refuse ``max_policy_lag`` (set for off-policy algorithms: a
            dropped fragment would leave a gap inside an episode in the replay buffer).
        double_buffering: each actor splits its environments into two groups that take
            turns, one stepping in the background while the policy acts for the other
            (:class:`~alf.unrollers.DoubleBufferedUnroller`). Needs an even
            ``envs_per_actor`` and a backend that steps in the background
            (``create_environment.vectorization_mode`` ``'envpool'`` or
            ``'subprocess'``); it pays off when an environment step costs about as much
            as a policy call.
    """

    def __init__(
        self,
        *,
        env_factory: Callable[..., Any],
        policy: Policy,
        algorithm_factory: Callable[..., RLAlgorithm],
        num_envs: int,
        unroll_length: int,
        seed: int = 0,
        config_text: str = "",
        initial_collect_steps: int = 0,
        num_actors: int = 2,
        num_buffers: int | None = None,
        fragments_per_iteration: int = 1,
        max_policy_lag: int | None = None,
        unroll_parameter_update_period: int = 1,
        heartbeat_timeout_s: float = 60.0,
        startup_timeout_s: float = 120.0,
        keep_every_fragment: bool = False,
        double_buffering: bool = False,
    ) -> None:
        num_buffers = num_buffers or 2 * num_actors
        _check_settings(
            num_envs=num_envs,
            num_actors=num_actors,
            num_buffers=num_buffers,
            fragments_per_iteration=fragments_per_iteration,
            max_policy_lag=max_policy_lag,
            unroll_length=unroll_length,
            update_period=unroll_parameter_update_period,
            keep_every_fragment=keep_every_fragment,
            double_buffering=double_buffering,
        )
        self.num_actors = num_actors
        self.envs_per_actor = num_envs // num_actors
        self.batch_size = num_envs
        self.unroll_length = unroll_length
        self.fragments_per_iteration = fragments_per_iteration
        self.max_policy_lag = max_policy_lag
        self.update_period = unroll_parameter_update_period
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.episodes = _ReceivedEpisodes()
        self.env_steps_taken = 0  # over every fragment received, dropped ones included
        self._iterations = 0
        self._processes: list[Any] = []
        self._closed = False
        self._last_check = time.monotonic()
        self._clipped_actions: dict[int, int] = {}
        self._dropped_episodes: dict[int, int] = {}
        self._reset_stats()

        # Named semaphores carry this pid (/dev/shm/sem.alf_<pid>-*), as torch's segments do;
        # those of killed runs (pid gone) are removed first.
        remove_stale_semaphores()
        mp.current_process()._config["semprefix"] = SEMAPHORE_PREFIX.format(pid=os.getpid())
        ctx = mp.get_context("spawn")
        self._channels = self._open_channels(ctx, policy, num_buffers)
        self._started_at = time.monotonic()
        # Close the actors even if the owner forgets to (or dies by an exception).
        self._finalizer = weakref.finalize(self, _shutdown, self._channels, self._processes)
        setup = ActorSetup(
            actor_id=0,
            config_text=config_text,
            env_factory=cloudpickle.dumps(env_factory),
            envs_per_actor=self.envs_per_actor,
            algorithm_factory=cloudpickle.dumps(algorithm_factory),
            env_seed=seed,
            torch_seed=0,
            unroll_length=unroll_length,
            initial_collect_steps_left=-(-initial_collect_steps // num_actors),
            env_id_offset=0,
            double_buffering=double_buffering,
        )
        try:
            self._start_actors(ctx, setup)
        except BaseException:
            self.close()
            raise

    def _start_actors(self, ctx: Any, setup: ActorSetup) -> None:
        """Starts the actor processes: ``setup`` with each one's id, seeds and first
        global environment id (``setup.env_seed`` is the first environment's seed)."""
        torch_seeds = np.random.SeedSequence(setup.env_seed).spawn(self.num_actors)
        for actor_id in range(self.num_actors):
            first_env = actor_id * self.envs_per_actor
            self._start_actor(
                ctx,
                dataclasses.replace(
                    setup,
                    actor_id=actor_id,
                    env_seed=setup.env_seed + first_env,
                    torch_seed=int(torch_seeds[actor_id].generate_state(1)[0]),
                    env_id_offset=first_env,
                ),
            )

    def _open_channels(self, ctx: Any, policy: Policy, num_buffers: int) -> ActorChannels:
        """The shared buffers, parameters (``policy``'s, published), queues and
        heartbeats the actors talk through."""
        channels = ActorChannels(
            pool=FragmentPool(
                spec=policy.algorithm.experience_spec(),
                num_buffers=num_buffers,
                length=policy.history_length + self.unroll_length + 1,
                batch_size=self.envs_per_actor,
            ),
            parameters=SharedParameters(
                module=policy.algorithm,
                lock=ctx.Lock(),
                skip_prefixes=policy.algorithm.learner_only_state,
            ),
            free_buffers=ctx.Queue(),
            reports=ctx.Queue(),
            stop=ctx.Event(),
            heartbeats=torch.zeros(self.num_actors, dtype=torch.float64).share_memory_(),
        )
        channels.parameters.publish(policy.algorithm)
        for index in range(num_buffers):
            channels.free_buffers.put(index)
        return channels

    def _start_actor(self, ctx: Any, setup: ActorSetup) -> None:
        process = ctx.Process(
            target=actor_main,
            args=(setup, self._channels, os.getpid()),
            name=f"alf-actor-{setup.actor_id}",
        )
        process.start()
        self._processes.append(process)

    # ------------------------------------------------------------ learner API
    @property
    def steps_per_unroll(self) -> int:
        """Environment steps in one fragment."""
        return self.unroll_length * self.envs_per_actor

    @property
    def num_clipped_actions(self) -> int:
        """Out-of-bounds continuous actions clipped by the actors' environments so far."""
        return sum(self._clipped_actions.values())

    @property
    def num_dropped_episodes(self) -> int:
        """Episodes the actors' environments ended early for non-finite data so far."""
        return sum(self._dropped_episodes.values())

    @property
    def version(self) -> int:
        """The newest published parameter version."""
        return self._channels.parameters.version

    @property
    def env_steps(self) -> int:
        """Environment steps of every fragment received so far (dropped ones included)."""
        return self.env_steps_taken

    def pop_episodes(self) -> CompletedEpisodes:
        """Returns, lengths, global env ids and successes of the episodes the actors
        completed since the last call."""
        return self.episodes.pop_completed()

    def stats(self) -> dict[str, float]:
        """As :meth:`pop_stats`."""
        return self.pop_stats()

    def collect(self, num_steps: int | None = None) -> Trajectory:
        """Waits for ``fragments_per_iteration`` fragments young enough to keep.

        Args:
            num_steps: None or ``unroll_length`` (the actors' fragments have a fixed
                length).

        Raises:
            ValueError: another ``num_steps``.
            ActorError: an actor failed, exited or (:class:`ActorTimeoutError`) hung.
        """
        if num_steps is not None and num_steps != self.unroll_length:
            raise ValueError(
                f"AsyncUnroller.collect: the actors collect fragments of unroll_length="
                f"{self.unroll_length} steps, not {num_steps}"
            )
        steps_before = self.env_steps_taken
        fragments: list[Fragment] = []
        start = time.perf_counter()
        while len(fragments) < self.fragments_per_iteration:
            message = self._next_message()
            self._stats["queue_depth"].append(self._queue_depth())
            pool = self._channels.pool
            exp = pool.read(message.buffer)
            self._channels.free_buffers.put(message.buffer)
            self.env_steps_taken += message.env_steps
            self.episodes.returns += message.episode_returns
            self.episodes.lengths += message.episode_lengths
            self.episodes.env_ids += message.episode_env_ids
            self.episodes.successes += message.episode_successes
            self._clipped_actions[message.actor_id] = message.clipped_actions
            self._dropped_episodes[message.actor_id] = message.dropped_episodes
            self._stats["actor_steps_per_s"][message.actor_id] = message.env_steps / max(
                message.collect_s, 1e-9
            )
            lag = self.version - message.version
            if self.max_policy_lag is not None and lag > self.max_policy_lag:
                self._stats["dropped"] += 1
                continue
            self._stats["lag"].append(lag)
            fragments.append(
                Fragment(
                    exp=exp,
                    actor_id=message.actor_id,
                    version=message.version,
                    num_old_rows=message.num_old_rows,
                )
            )
        self._stats["wait_s"] += time.perf_counter() - start
        return Trajectory(segments=tuple(fragments), env_steps=self.env_steps_taken - steps_before)

    def publish(self, policy: Policy) -> None:
        """Counts a training iteration; every ``unroll_parameter_update_period``-th one
        publishes ``policy``'s parameters to the actors."""
        self._iterations += 1
        if self._iterations % self.update_period == 0:
            self._channels.parameters.publish(policy.algorithm)

    def pop_stats(self) -> dict[str, float]:
        """Summaries since the last call: policy lag (min/mean/max), fragments dropped,
        actor env steps/s (sum of the actors' latest rates), learner wait time and the
        fraction of the window it spent waiting, and the mean number of filled fragments
        waiting in the queue."""
        stats = self._stats
        elapsed = max(time.perf_counter() - stats["since"], 1e-9)
        result = {
            "async/fragments_dropped": float(stats["dropped"]),
            "async/actor_env_steps_per_second": float(sum(stats["actor_steps_per_s"].values())),
            "async/learner_wait_s": stats["wait_s"],
            "async/learner_wait_fraction": stats["wait_s"] / elapsed,
        }
        if stats["lag"]:
            lags = np.asarray(stats["lag"], dtype=np.float64)
            result.update(
                {
                    "async/policy_lag_min": float(lags.min()),
                    "async/policy_lag_mean": float(lags.mean()),
                    "async/policy_lag_max": float(lags.max()),
                }
            )
        if stats["queue_depth"]:
            result["async/queue_depth"] = float(np.mean(stats["queue_depth"]))
        self._reset_stats()
        return result

    def close(self) -> None:
        """Stops and joins every actor and frees the shared memory (idempotent)."""
        if not self._closed:
            self._closed = True
            self._finalizer()
            # The queues' and locks' named semaphores are unlinked when collected.
            self._channels = None
            gc.collect()

    # ------------------------------------------------------------ internals
    def _reset_stats(self) -> None:
        self._stats: dict[str, Any] = {
            "since": time.perf_counter(),
            "lag": [],
            "dropped": 0,
            "wait_s": 0.0,
            "queue_depth": [],
            "actor_steps_per_s": getattr(self, "_stats", {}).get("actor_steps_per_s", {}),
        }

    def _queue_depth(self) -> int:
        try:
            return self._channels.reports.qsize()
        except NotImplementedError:  # macOS
            return 0

    def _describe(self, actor_id: int) -> str:
        first = actor_id * self.envs_per_actor
        return (
            f"Actor {actor_id} (pid {self._processes[actor_id].pid}, environments "
            f"{first}..{first + self.envs_per_actor - 1})"
        )

    def _next_message(self) -> FragmentMessage:
        if self._closed:
            raise RuntimeError("AsyncUnroller.collect() after close()")
        while True:
            # Check even while messages flow: other actors' fragments must not hide one
            # that hangs.
            if time.monotonic() - self._last_check >= POLL_S:
                self._check_actors()
                self._last_check = time.monotonic()
            try:
                message = self._channels.reports.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if isinstance(message, FragmentMessage):
                return message
            self._handle_control(message)

    def _handle_control(self, message: tuple) -> None:
        kind, actor_id = message[0], message[1]
        if kind == "error":
            if len(message) > 3 and message[3]:  # an environment's bad data: one line
                raise EnvironmentDataError(f"{self._describe(actor_id)}: {message[3]}")
            raise ActorError(f"{self._describe(actor_id)} failed:\n{message[2]}")

    def _check_actors(self) -> None:
        now = time.monotonic()
        for actor_id, process in enumerate(self._processes):
            if not process.is_alive():
                # It may have reported why just before exiting: read that first.
                deadline = time.monotonic() + 1.0
                while time.monotonic() < deadline:
                    try:
                        message = self._channels.reports.get(timeout=POLL_S)
                    except queue.Empty:
                        continue
                    if not isinstance(message, FragmentMessage):
                        self._handle_control(message)
                raise ActorError(
                    f"{self._describe(actor_id)} exited unexpectedly with code {process.exitcode}"
                )
            heartbeat = float(self._channels.heartbeats[actor_id])
            if heartbeat > 0:  # written first just before the actor reports ready
                silent = now - heartbeat
                if silent > self.heartbeat_timeout_s:
                    process.kill()  # hung: nothing of it to save, and close() need not wait
                    raise ActorTimeoutError(
                        f"{self._describe(actor_id)} has shown no sign of life for "
                        f"{silent:.1f} s (heartbeat_timeout_s={self.heartbeat_timeout_s}): "
                        "is an environment step hanging?"
                    )
            elif now - self._started_at > self.startup_timeout_s:
                process.kill()
                raise ActorTimeoutError(
                    f"{self._describe(actor_id)} did not finish building its environments "
                    f"and algorithm within startup_timeout_s={self.startup_timeout_s}"
                )


def _shutdown(channels: ActorChannels, processes: list[Any], join_s: float = 3.0) -> None:
    """Stops the actors, joins them (killing stragglers) and closes the queues."""
    channels.stop.set()
    deadline = time.monotonic() + join_s
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():  # actors ignore SIGTERM (see actor_main): kill stragglers
            process.kill()
            process.join()
    # The learner only writes buffer indices (at most ``num_buffers`` small pickles, far
    # below a pipe's capacity) into ``free_buffers``, so its feeder thread cannot block:
    # join it, or it would keep the queue's lock semaphore alive after close() returns.
    channels.free_buffers.close()
    channels.free_buffers.join_thread()
    channels.reports.cancel_join_thread()
    channels.reports.close()
