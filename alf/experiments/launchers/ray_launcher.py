"""Runs on a Ray cluster: one detached actor per run, named after the controller's
directory and the run, which trains it with
:func:`~alf.experiments.launchers.remote.train_to_end` in a thread. Ray restarts an
actor whose process died (``retries`` times) and the restarted actor resumes the run
from its checkpoint; a controller run again finds the actors by name instead of
starting duplicates.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from typing import Any

from alf.errors import install_hint
from alf.experiments.launcher import RunSpec
from alf.experiments.launchers.base import JobRecord, LauncherError, LaunchOptions
from alf.experiments.launchers.remote import ClusterJob, train_to_end

__all__ = ["NAMESPACE", "RayJob", "RayLauncher", "actor_name"]

NAMESPACE = "alf"
"""The Ray namespace of ALF's actors."""


def actor_name(run_dir: str) -> str:
    """The actor of ``run_dir``: ``alf-<hash of the path>-<last two path parts>``."""
    path = os.path.abspath(run_dir)
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    tail = "/".join(path.split(os.sep)[-2:])
    return f"alf-{digest}-{tail}"


class _RunActor:
    """Trains one run in a thread of a Ray worker (a detached, restartable actor)."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.code: int | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._train, daemon=True)
        self.thread.start()

    def _train(self) -> None:
        try:
            self.code = train_to_end(self.spec, self.stop)
        except Exception:  # noqa: BLE001 - told to the controller as a failure
            self.code = 1

    def poll(self) -> int | None:
        """The training's exit code, None while it runs."""
        return self.code

    def terminate(self) -> None:
        """Asks the training to checkpoint and exit."""
        self.stop.set()

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()


class RayLauncher:
    """Starts each run as a named, detached Ray actor on the cluster at
    ``options.ray_address``.

    Args:
        options: the address, CPUs and GPUs of a run, retries, the controller's directory.

    Raises:
        LauncherError: ``ray`` is not installed, or the cluster does not answer.
    """

    def __init__(self, options: LaunchOptions) -> None:
        try:
            import ray
        except ImportError:
            raise LauncherError(f"--launcher=ray needs ray: {install_hint('ray')}") from None
        self.options = options
        self.record = JobRecord(options.root_dir)
        _connect(options.ray_address, options.ray_timeout_s)
        self.actor_class = ray.remote(_RunActor)
        self._release_ended()

    def _release_ended(self) -> None:
        """Kills the recorded actors whose training ended while no controller watched
        (an actor holds its CPUs and GPUs until it is killed)."""
        import ray

        for fields in self.record.read().values():
            actor = _find_actor(fields.get("actor", ""))
            if actor is None:
                continue
            try:
                ended = ray.get(actor.poll.remote(), timeout=30) is not None
            except (ray.exceptions.RayError, TimeoutError):
                continue
            if ended:
                ray.kill(actor, no_restart=True)

    def launch(self, spec: RunSpec) -> RayJob:
        """Finds the actor of ``spec.run_dir`` or starts it."""
        import ray

        actor = _find_actor(actor_name(spec.run_dir))
        if actor is not None:
            try:  # one whose training ended trained to another budget: start afresh
                if ray.get(actor.poll.remote(), timeout=30) is not None:
                    ray.kill(actor, no_restart=True)
                    actor = None
            except ray.exceptions.RayActorError:
                actor = None
        job = RayJob(self, spec, adopted=actor is not None)
        if actor is None:
            job._submit()
        else:
            job.actor = actor
        return job

    def start(self, spec: RunSpec) -> Any:
        """Starts the actor of ``spec`` (or returns the one of its name); records it."""
        name = actor_name(spec.run_dir)
        actor = self.actor_class.options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=self.options.retries,
            max_task_retries=-1,
            num_cpus=self.options.cpus_per_run,
            num_gpus=self.options.gpus_per_run,
        ).remote(spec)
        self.record.put(spec.run_dir, {"backend": "ray", "actor": name})
        return actor


def _find_actor(name: str) -> Any:
    """The live actor of this name, None if there is none."""
    import ray

    try:
        return ray.get_actor(name, namespace=NAMESPACE) if name else None
    except ValueError:
        return None


def _connect(address: str, timeout_s: float) -> None:
    """Connects to the Ray cluster at ``address`` (once per process).

    Raises:
        LauncherError: it does not answer within ``timeout_s``.
    """
    import ray

    if ray.is_initialized():
        return
    host, sep, port = address.rpartition(":")
    if sep and port.isdigit():  # a plain TCP check first: Ray's own retries log lines
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout_s).close()
        except OSError as err:
            raise LauncherError(
                f"--ray_address '{address}': the Ray cluster does not answer "
                f"({err.strerror or err}); start it with 'ray start --head' or give its address"
            ) from None
    result: dict[str, BaseException | None] = {"error": None}

    def connect() -> None:
        try:
            ray.init(
                address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR"
            )
        except BaseException as err:  # noqa: BLE001 - reported as one line
            result["error"] = err

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive() or result["error"] is not None:
        why = "no answer" if thread.is_alive() else str(result["error"]).splitlines()[0]
        raise LauncherError(
            f"--ray_address '{address}': the Ray cluster does not answer ({why}); start it "
            "with 'ray start --head' or give its address"
        )


class RayJob(ClusterJob):
    """A run trained by a Ray actor (which Ray restarts when its process dies).

    Args:
        launcher: the launcher that starts its actor.
        spec: the run.
        adopted: its actor was found running.
    """

    def __init__(self, launcher: RayLauncher, spec: RunSpec, *, adopted: bool) -> None:
        super().__init__(spec, retries=0, adopted=adopted)
        self.launcher = launcher
        self.actor: Any = None
        self._pending: Any = None
        self._last: int | None = None
        self._dead = False

    def _running(self) -> bool:
        import ray

        if self._dead or self.actor is None:
            return False
        if self._pending is None:
            self._pending = self.actor.poll.remote()
        ready, _ = ray.wait([self._pending], timeout=0)
        if not ready:
            return True
        ref, self._pending = self._pending, None
        try:
            self._last = ray.get(ref)
        except ray.exceptions.RayActorError:  # restarts used up, or killed
            self._dead = True
            return False
        if self._last is None:
            return True
        self._finish()
        return False

    def _finish(self) -> None:
        import ray

        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def _result(self) -> int | None:
        return self._last

    def _submit(self) -> None:
        self.actor = self.launcher.start(self.spec)

    def _cancel(self, hard: bool) -> None:
        import ray

        if self.actor is None:
            return
        if hard:
            self._finish()
            self._dead = True
        else:
            ray.get(self.actor.terminate.remote(), timeout=30)
