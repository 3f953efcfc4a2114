"""A batch of environments stepped by worker processes through shared memory.

Each worker process owns a contiguous group of the environments and steps the whole
group per message, so one step of the batch costs one tiny message and one tiny reply
per *worker*, not per environment. Observations, rewards and actions never travel
through the pipes: they live in shared-memory tensors that the parent allocates once.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, NoReturn

import cloudpickle
import numpy as np
import torch
import torch.multiprocessing as mp

from alf import nest
from alf.config import load_config_text
from alf.data_structures import TimeStep
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.data_check import EnvironmentDataError
from alf.environments.sync_vector import EnvironmentBuilder, sync_vector_environment
from alf.errors import TrainingError
from alf.utils.threads import set_cpu_threads

__all__ = ["EnvironmentWorkerError", "SubprocessEnvironment"]

_POLL_S = 0.5  # how often a waiting side checks that the other side is still alive
_JOIN_TIMEOUT_S = 5.0  # how long close() waits for a worker before terminating it


class EnvironmentWorkerError(TrainingError, RuntimeError):
    """A worker of a :class:`SubprocessEnvironment` failed, died or timed out.

    The message names the worker, its environment range and, for an exception raised
    inside the worker, the worker's formatted traceback.
    """


def _group_bounds(num_envs: int, num_workers: int, unit: int = 1) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` groups of whole ``unit``s of rows whose numbers of units
    differ by at most one."""
    base, extra = divmod(num_envs // unit, num_workers)
    bounds, lo = [], 0
    for w in range(num_workers):
        hi = lo + (base + (1 if w < extra else 0)) * unit
        bounds.append((lo, hi))
        lo = hi
    return bounds


@dataclass(frozen=True, kw_only=True)
class _GroupBuild:
    """What one worker builds: environments ``[lo, hi)`` of the batch, with ``builder``,
    after loading ``config_text``.

    Attributes:
        builder: builds the group in the worker's process (called with ``env_name``,
            ``num_envs=hi - lo`` and ``kwargs``).
        env_name: the environment id.
        lo: the batch index of the group's first environment.
        hi: one past the batch index of the group's last environment.
        kwargs: the builder's other keyword arguments (seed, render mode, ...).
        config_text: a gin config the worker loads first; None or empty: none.
    """

    builder: EnvironmentBuilder
    env_name: str
    lo: int
    hi: int
    kwargs: dict[str, Any]
    config_text: str | None


class _Group:
    """A worker's environments and its views of the shared buffers: answers the parent's
    commands other than ``close``."""

    def __init__(self, *, env: AlfEnvironment | None, rows: slice) -> None:
        self.env = env
        self._rows = rows
        self._views: list[torch.Tensor] = []
        self._action: Any = None
        self._clipped = self._dropped = 0

    def answer(self, cmd: str, payload: Any) -> Any:
        """Carries out ``cmd`` (``buffers``, ``render``, ``reset``, or else ``step``) and
        returns the reply's payload."""
        if cmd == "buffers":
            shared_ts, shared_action = payload
            # Every field but env_id (global ids, filled by the parent).
            self._views = [t[self._rows] for t in nest.flatten(shared_ts._replace(env_id=()))]
            self._action = nest.map_structure(lambda t: t[self._rows], shared_action)
            return None
        env = self.env
        if env is None:
            raise RuntimeError("the environments of this worker failed to build")
        if cmd == "render":
            return env.render()
        if cmd == "reset":
            ts = env.reset()
        else:  # "step"; a copy, so an env keeping its action sees no later writes
            ts = env.step(nest.map_structure(torch.clone, self._action))
        fields = ts._replace(env_id=(), env_info=())
        for dst, src in zip(self._views, nest.flatten(fields), strict=True):
            dst.copy_(src)
        count = getattr(env, "num_clipped_actions", 0)
        drops = getattr(env, "num_dropped_episodes", 0)
        # The few per-environment extras (e.g. goal environments' successes) travel in
        # the reply, as arrays: they are not in the specs the shared buffers are made of.
        info = {k: np.asarray(v) for k, v in ts.env_info.items()} if ts.env_info else {}
        reply = (count - self._clipped, drops - self._dropped, info)
        self._clipped, self._dropped = count, drops
        return reply


def _worker(conn: Connection, build_args: bytes, parent_pid: int) -> None:
    """Body of a worker process: builds its group of envs, then serves commands.

    Replies are ``("ok", payload)`` or ``("error", formatted_traceback)``. The worker
    ignores SIGINT and SIGTERM (a signal to the whole process group, e.g. from
    ``torchrun``, is the parent's to handle; it shuts the worker down) and exits on
    ``close``, on EOF of its pipe, or when its parent process is gone.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    set_cpu_threads(1)
    group = _build_group(conn, build_args)
    try:
        _serve(conn, group, parent_pid)
    except (EOFError, OSError, KeyboardInterrupt):
        return
    finally:
        _exit_worker(conn, group.env)


def _build_group(conn: Connection, build_args: bytes) -> _Group:
    """Loads the config and builds the worker's environments; replies with their specs,
    or with the traceback of the failure (the group then has no environments)."""
    env, rows = None, slice(0, 0)
    try:
        build: _GroupBuild = cloudpickle.loads(build_args)
        rows = slice(build.lo, build.hi)
        if build.config_text:
            # (alf.environments is imported: the environments' settings are known; the
            # others are skipped.)
            load_config_text(build.config_text, skip_unknown=True)
        env = build.builder(env_name=build.env_name, num_envs=build.hi - build.lo, **build.kwargs)
        conn.send(("ok", (env.observation_spec(), env.action_spec())))
    except Exception:
        conn.send(("error", traceback.format_exc()))
    return _Group(env=env, rows=rows)


def _serve(conn: Connection, group: _Group, parent_pid: int) -> None:
    """Answers the parent's commands until ``close``, or until the parent is gone."""
    poller = select.poll()  # cheaper per step than Connection.poll
    poller.register(conn.fileno(), select.POLLIN)
    while True:
        while not poller.poll(_POLL_S * 1000):
            if os.getppid() != parent_pid:
                return
        cmd, payload = conn.recv()
        if cmd == "close":
            return
        try:
            conn.send(("ok", group.answer(cmd, payload)))
        except EnvironmentDataError as err:  # one line: it names the environment
            conn.send(("data_error", str(err)))
        except Exception:
            conn.send(("error", traceback.format_exc()))


def _exit_worker(conn: Connection, env: AlfEnvironment | None) -> NoReturn:
    """Closes the environments and the pipe, and ends the worker process."""
    if env is not None:
        try:
            env.close()
        except Exception:
            pass
    conn.close()
    # Skip the interpreter's teardown of torch's modules (~0.5 s per worker here):
    # the environments are closed, so run the exit hooks, flush and leave.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class SubprocessEnvironment(AlfEnvironment):
    """Steps ``num_envs`` Gymnasium environments in ``num_workers`` processes.

    Worker ``w`` builds environments ``[lo_w, hi_w)`` in-process with
    ``env_builder(env_name=env_name, num_envs=hi_w - lo_w, seed=seed + lo_w, ...)``; the
    default, :func:`~alf.environments.sync_vector.sync_vector_environment`, is what the
    ``sync`` backend builds, so environment ``i`` is seeded with ``seed + i`` exactly as
    in the ``sync`` backend, and every :class:`TimeStep` rule (NEXT_STEP autoreset,
    discounts, action clipping) is the :class:`GymnasiumEnvironment`'s. Workers are started with the
    ``spawn`` method and get every argument explicitly (no gin config needed in them);
    ``module:EnvName-v0`` ids work because spawned children get the parent's ``sys.path``.

    The specs come from the workers: each sends its specs back once its group is built
    (the parent never builds an environment, which matters for the expensive ones this
    backend is for, and the builds run in parallel). The parent then allocates the
    ``[num_envs, ...]`` TimeStep and action nests as shared tensors and hands them to the
    workers once. A step writes the actions into shared memory, sends one small message
    per worker, and waits for one small reply per worker carrying its count of clipped
    actions. ``reset``/``step`` return clones of the shared tensors. The tensors use
    torch's ``file_descriptor`` sharing: each segment is unlinked from /dev/shm as soon as
    it is created and reaches the workers as a file descriptor, so nothing is left in
    /dev/shm even if the parent is killed. Starting costs a Python interpreter importing
    torch per worker (1-4 s on two loaded cores).

    Failures: an exception inside a worker (at build, reset, step or render), a worker
    that dies, or one that does not answer within ``step_timeout_s`` raises
    :class:`EnvironmentWorkerError` naming the worker, its environment range and (for an
    exception) its traceback. The environment is closed before the error is raised: all
    workers are joined or killed and the shared memory is released. Discrete actions
    outside the action space raise ``ValueError`` in the parent, before any worker steps.

    Each worker builds its environments through ``suite_gym.load``; it first loads
    ``config_text`` (the parent's gin config, from ``create_environment``), so the
    preset, wrappers and ``legacy_api`` bound on ``load`` apply in the workers too. As
    for the ``AsyncUnroller``'s actors, every configurable the config names must be
    importable in a fresh process (ALF's own, or a module the config imports).

    Args:
        env_name: a registered Gymnasium id, or ``module:EnvName-v0``.
        num_envs: number of environments in the batch.
        num_workers: number of worker processes (default ``min(os.cpu_count(),
            num_envs)``); environments are split into contiguous groups whose sizes
            differ by at most one.
        seed: seed of the first environment (environment ``i`` gets ``seed + i``).
        render_mode: e.g. ``"rgb_array"``.
        max_episode_steps: overrides the registered time limit.
        env_kwargs: keyword arguments of the environment's constructor (shipped to the
            workers with ``cloudpickle``).
        for_evaluation: the environments evaluate or play (``training=False`` for
            ``suite_gym.load``).
        config_text: a gin config (e.g. ``alf.config.config_str()``) each worker loads
            before building its environments; None or empty: none.
        step_timeout_s: longest wait for a worker's answer to reset, step or render;
            ``None`` waits forever. Dead workers are detected within about a second
            either way; building the environments has no time limit.
        first_env_index: the run-wide index of the first environment (named in errors).
        drop_nonfinite: end an episode at non-finite data instead of raising (the
            workers' :class:`GymnasiumEnvironment` s do it; see there).
        env_builder: builds a worker's group in the worker's process (shipped with
            ``cloudpickle``; see
            :class:`~alf.environments.sync_vector.EnvironmentBuilder`).
        rows_per_unit: rows that must stay in one worker's group (a multi-agent game's
            agents); ``num_envs`` is a multiple of it.
    """

    steps_in_background = True

    def __init__(
        self,
        *,
        env_name: str,
        num_envs: int,
        num_workers: int | None = None,
        seed: int | None = None,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        for_evaluation: bool = False,
        config_text: str | None = None,
        step_timeout_s: float | None = None,
        first_env_index: int = 0,
        drop_nonfinite: bool = False,
        env_builder: EnvironmentBuilder = sync_vector_environment,
        rows_per_unit: int = 1,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        num_units = num_envs // rows_per_unit
        if num_workers is None:
            num_workers = min(os.cpu_count() or 1, num_units)
        if not 1 <= num_workers <= num_units:
            raise ValueError(
                f"num_workers must be in [1, {num_units}] (one group of rows per worker at "
                f"least), got {num_workers}"
            )
        self._num_envs = num_envs
        self._step_timeout_s = step_timeout_s
        self._bounds = _group_bounds(num_envs, num_workers, rows_per_unit)
        self._closed = False
        self._stepping = False  # step_async sent, step_wait not yet called
        self._conns: list[Connection] = []
        self._processes: list[Any] = []
        self._shared_ts: TimeStep | None = None
        self._shared_action: Any = None
        self._action_buffers: list[torch.Tensor] = []
        self._poller = select.poll()
        self._worker_of_fd: dict[int, int] = {}
        self.num_clipped_actions = 0
        self.num_dropped_episodes = 0
        """Episodes ended early for non-finite data (``drop_nonfinite``)."""
        try:
            self._start_workers(
                [
                    _GroupBuild(
                        builder=env_builder,
                        env_name=env_name,
                        lo=lo,
                        hi=hi,
                        kwargs=dict(
                            seed=None if seed is None else seed + lo,
                            render_mode=render_mode,
                            max_episode_steps=max_episode_steps,
                            env_kwargs=env_kwargs,
                            for_evaluation=for_evaluation,
                            first_env_index=first_env_index + lo,
                            drop_nonfinite=drop_nonfinite,
                        ),
                        config_text=config_text,
                    )
                    for lo, hi in self._bounds
                ]
            )
            self._receive_specs()
            self._share_buffers()
        except BaseException:
            self.close()
            raise

    def _start_workers(self, builds: list[_GroupBuild]) -> None:
        """Starts one worker process per group (``spawn``), each connected by a pipe."""
        ctx = mp.get_context("spawn")
        for build in builds:
            parent_conn, child_conn = ctx.Pipe()
            process = ctx.Process(
                target=_worker,
                args=(child_conn, cloudpickle.dumps(build), os.getpid()),
                name=f"alf-env-worker-{len(self._processes)}",
                daemon=True,
            )
            process.start()
            child_conn.close()  # so that the worker's death reads as EOF here
            self._poller.register(parent_conn.fileno(), select.POLLIN)
            self._worker_of_fd[parent_conn.fileno()] = len(self._conns)
            self._conns.append(parent_conn)
            self._processes.append(process)

    def _receive_specs(self) -> None:
        """Waits for every worker's specs (sent once its group is built); they must agree."""
        specs = self._call(None)
        self._observation_spec, self._action_spec = specs[0]
        for w, spec in enumerate(specs[1:], 1):
            if not _same_specs(spec, specs[0]):
                raise self._error(w, f"has specs {spec}, different from worker 0's")
        self._action_leaves = nest.flatten(self._action_spec)
        self._discrete_bounds = [
            (torch.as_tensor(s.minimum), torch.as_tensor(s.maximum)) if s.is_discrete else None
            for s in self._action_leaves
        ]

    def _share_buffers(self) -> None:
        """Allocates the batch's TimeStep and action nests in shared memory and hands
        them to the workers."""
        num_envs = self._num_envs
        self._shared_ts = nest.map_structure(
            lambda s: s.zeros((num_envs,)).share_memory_(), self.time_step_spec()
        )
        self._shared_ts.env_id.copy_(torch.arange(num_envs))
        self._shared_action = nest.map_structure(
            lambda s: s.zeros((num_envs,)).share_memory_(), self._action_spec
        )
        self._action_buffers = nest.flatten(self._shared_action)
        self._call(None, "buffers", (self._shared_ts, self._shared_action))

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def num_workers(self) -> int:
        """Number of worker processes."""
        return len(self._bounds)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (empty once closed)."""
        return [p.pid for p in self._processes]

    def observation_spec(self) -> nest.Nest:
        return self._observation_spec

    def action_spec(self) -> nest.Nest:
        return self._action_spec

    def reset(self) -> TimeStep:
        self._check_open()
        replies = self._call(self._step_timeout_s, "reset")
        return self._time_step([info for _, _, info in replies])

    def step(self, action: Any) -> TimeStep:
        self.step_async(action)
        return self.step_wait()

    def step_async(self, action: Any) -> None:
        """Writes ``action`` and tells every worker to step; the workers step while the
        caller goes on, and :meth:`step_wait` collects their results."""
        self._check_open()
        if self._stepping:
            raise RuntimeError("step_async called twice without step_wait")
        self._write_actions(action)
        self._send_to_all("step")
        self._stepping = True

    def step_wait(self) -> TimeStep:
        """The result of the step :meth:`step_async` started."""
        self._check_open()
        if not self._stepping:
            raise RuntimeError("step_wait called without step_async")
        self._stepping = False
        replies = self._call(self._step_timeout_s)
        self.num_clipped_actions += sum(clipped for clipped, _, _ in replies)
        self.num_dropped_episodes += sum(dropped for _, dropped, _ in replies)
        return self._time_step([info for _, _, info in replies])

    def _time_step(self, infos: list[dict[str, np.ndarray]]) -> TimeStep:
        """A copy of the shared time step, with the workers' ``env_info`` joined in
        environment order (NaN for the environments of a worker that sent none of a key,
        as :class:`~alf.environments.gymnasium_environment.GymnasiumEnvironment` does)."""
        ts = nest.map_structure(torch.clone, self._shared_ts)
        keys = sorted({key for info in infos for key in info})
        if not keys:
            return ts
        sizes = [hi - lo for lo, hi in self._bounds]
        env_info = {
            key: torch.from_numpy(
                np.concatenate(
                    [
                        np.asarray(info[key], np.float32).reshape(size)
                        if key in info
                        else np.full(size, np.nan, np.float32)
                        for info, size in zip(infos, sizes, strict=True)
                    ]
                )
            )
            for key in keys
        }
        return ts._replace(env_info=env_info)

    def _write_actions(self, action: Any) -> None:
        # A frame of its own: no traceback of a later error keeps a shared tensor alive.
        for a, spec, bounds, dst in zip(
            nest.flatten(action),
            self._action_leaves,
            self._discrete_bounds,
            self._action_buffers,
            strict=True,
        ):
            if bounds is not None and bool(((a < bounds[0]) | (a > bounds[1])).any()):
                raise ValueError(
                    f"Discrete action {a.tolist()} is outside [{spec.minimum}, {spec.maximum}]"
                )
            dst.copy_(a)

    def render(self) -> Any:
        """Frames of all environments in order (a tuple, as Gymnasium's vector envs)."""
        self._check_open()
        frames = self._call(self._step_timeout_s, "render")
        if all(f is None for f in frames):
            return None
        if all(isinstance(f, np.ndarray) for f in frames):
            return np.concatenate(frames)
        return tuple(frame for group in frames for frame in group)

    def close(self) -> None:
        """Stops the workers (joining, then terminating, then killing them) and frees
        the shared memory. Idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + _JOIN_TIMEOUT_S
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            if process.is_alive():
                process.terminate()
                process.join(1.0)
            if process.is_alive():
                process.kill()
                process.join()
            process.close()
        for conn in self._conns:
            self._poller.unregister(conn.fileno())
            conn.close()
        self._processes, self._conns = [], []
        self._shared_ts = self._shared_action = None
        self._action_buffers = []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("SubprocessEnvironment is closed")

    def _error(self, w: int, what: str) -> EnvironmentWorkerError:
        lo, hi = self._bounds[w]
        return EnvironmentWorkerError(f"Environment worker {w} (environments [{lo}, {hi})) {what}")

    def _dead_error(self, w: int) -> EnvironmentWorkerError:
        process = self._processes[w]
        process.join(2.0)
        return self._error(w, f"died (pid {process.pid}, exit code {process.exitcode})")

    def _send_to_all(self, cmd: str, payload: Any = None) -> None:
        """Sends ``cmd`` to every worker; on any failure, closes and raises."""
        try:
            for w, conn in enumerate(self._conns):
                try:
                    conn.send((cmd, payload))
                except OSError:
                    raise self._dead_error(w) from None
        except BaseException:
            payload = None  # a traceback must not keep shared tensors alive
            self.close()
            raise

    def _call(self, timeout_s: float | None, cmd: str | None = None, payload: Any = None) -> list:
        """Sends ``cmd`` to every worker (unless None) and returns their replies. On any
        failure, or an interrupt that would leave replies unread, closes and raises."""
        if cmd is not None:
            self._send_to_all(cmd, payload)
            payload = None
        try:
            return self._gather_replies(timeout_s)
        except BaseException:
            self.close()
            raise

    def _gather_replies(self, timeout_s: float | None) -> list[Any]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        replies: list[Any] = [None] * len(self._conns)
        pending = set(range(len(self._conns)))
        while pending:
            wait_s = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            events = self._poller.poll(max(0.0, wait_s) * 1000)
            for fd, _ in events:
                w = self._worker_of_fd[fd]
                if w not in pending:  # replied already, now hung up: it died
                    raise self._dead_error(w)
                try:
                    status, payload = self._conns[w].recv()
                except (EOFError, OSError):
                    raise self._dead_error(w) from None
                if status == "error":
                    raise self._error(w, f"raised an exception:\n{payload}")
                if status == "data_error":
                    raise EnvironmentDataError(payload)
                replies[w] = payload
                pending.discard(w)
            if not events:
                for w in sorted(pending):
                    if not self._processes[w].is_alive():
                        raise self._dead_error(w)
                if deadline is not None and time.monotonic() >= deadline:
                    w = min(pending)
                    self._processes[w].kill()  # hung: close() need not wait for it
                    raise self._error(w, f"did not answer within {timeout_s} s")
        return replies


def _same_specs(a: Any, b: Any) -> bool:
    try:
        nest.assert_same_structure(a, b)
    except ValueError:
        return False
    return all(x == y for x, y in zip(nest.flatten(a), nest.flatten(b), strict=True))
