"""Experiment trackers: Weights & Biases and MLflow runs that mirror a run's summaries.

:class:`~alf.utils.summary.SummaryLogger` gives every scalar it writes to TensorBoard to
the trackers too, against the run's environment steps. A tracker is enabled by a
``TrainerConfig`` setting (``wandb_project``, ``mlflow_tracking_uri``) and needs its
package (the ``[wandb]`` / ``[mlflow]`` extras), which is imported only then.

This module imports neither package at the top, so importing it costs nothing.
"""

from __future__ import annotations

import abc
import importlib
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Protocol

from alf.errors import UserError, install_hint

__all__ = [
    "TrackerSettings",
    "MlflowTracker",
    "Tracker",
    "TrackerError",
    "WANDB_MODES",
    "WandbTracker",
    "create_trackers",
    "mlflow_uri",
    "run_name",
]

WANDB_MODES = ("online", "offline", "disabled")
"""Values of ``TrainerConfig.wandb_mode``."""

_MLFLOW_PARAMS_PER_BATCH = 100  # MLflow's limit on params per log_batch call
_MLFLOW_METRICS_PER_BATCH = 1000


class TrackerError(UserError):
    """A tracker cannot start: its package is missing, or its service refused the run.
    The message is one line naming the ``TrainerConfig`` setting."""


class Tracker(abc.ABC):
    """A run in an experiment tracker.

    Subclasses start (or resume) their run in the constructor.
    """

    name: ClassVar[str]
    """Key of the tracker in ``run_info.json``'s ``trackers``."""

    setting: ClassVar[str]
    """The ``TrainerConfig`` setting that enables it (for messages)."""

    @abc.abstractmethod
    def info(self) -> dict[str, Any]:
        """What identifies the run (its id at least), to resume it later."""

    @abc.abstractmethod
    def log_params(self, params: Mapping[str, str]) -> None:
        """Records the run's configuration (``{'Name.param': 'value'}``) once per session."""

    @abc.abstractmethod
    def log_scalars(self, scalars: Mapping[str, float], *, step: int) -> None:
        """Records ``scalars`` (named ``group/name``) at ``step`` environment steps."""

    @abc.abstractmethod
    def finish(self, *, failed: bool = False) -> None:
        """Ends the run (marked failed if training raised)."""


def run_name(root_dir: str) -> str:
    """The trackers' name of a run: the last two components of its ``root_dir``, e.g.
    ``ppo_hopper/seed-0``."""
    parts = Path(os.path.abspath(root_dir)).parts
    return "/".join(parts[-2:])


def _import(module: str, setting: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise TrackerError(
            f"TrainerConfig.{setting} needs the [{extra}] extra: {install_hint(extra)}"
        ) from err


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 300 else text[:297] + "..."


class WandbTracker(Tracker):
    """A Weights & Biases run; every scalar is logged with ``env_steps``, its x-axis.

    Args:
        project: the W&B project (``TrainerConfig.wandb_project``).
        mode: ``"online"``, ``"offline"`` or ``"disabled"`` (the ``WANDB_MODE``
            environment variable wins when set).
        name: the run's display name.
        directory: where W&B writes its files (``WANDB_DIR`` wins when set).
        run_id: the id of the run to resume (None: a new run).
    """

    name = "wandb"
    setting = "wandb_project"

    def __init__(
        self,
        *,
        project: str,
        mode: str,
        name: str,
        directory: str,
        run_id: str | None = None,
    ) -> None:
        wandb = _import("wandb", "wandb_project", "wandb")
        kwargs: dict[str, Any] = {
            "project": project,
            "name": name,
            "dir": os.environ.get("WANDB_DIR") or directory,
        }
        if not os.environ.get("WANDB_MODE"):
            kwargs["mode"] = mode
        if run_id:
            kwargs.update(id=run_id, resume="allow")
        try:
            os.makedirs(kwargs["dir"], exist_ok=True)
            self._run = wandb.init(**kwargs)
            self._run.define_metric("env_steps")
            self._run.define_metric("*", step_metric="env_steps")
        except Exception as err:
            raise TrackerError(
                f"TrainerConfig.wandb_project={project!r}: W&B could not start the run: "
                f"{_one_line(err)}"
            ) from err
        self._project = project

    def info(self) -> dict[str, Any]:
        return {"run_id": self._run.id, "project": self._project}

    def log_params(self, params: Mapping[str, str]) -> None:
        self._run.config.update(dict(params), allow_val_change=True)

    def log_scalars(self, scalars: Mapping[str, float], *, step: int) -> None:
        self._run.log({"env_steps": step, **scalars})

    def finish(self, *, failed: bool = False) -> None:
        self._run.finish(exit_code=1 if failed else 0)


def mlflow_uri(tracking_uri: str) -> str:
    """``tracking_uri`` as MLflow takes it: a path (no ``scheme:``) becomes a ``file:``
    URI of its absolute path; URIs are kept."""
    if "://" in tracking_uri or tracking_uri.startswith("file:"):
        return tracking_uri
    return Path(os.path.abspath(os.path.expanduser(tracking_uri))).as_uri()


class MlflowTracker(Tracker):
    """An MLflow run; every scalar is a metric whose step is the env steps.

    Args:
        tracking_uri: ``TrainerConfig.mlflow_tracking_uri``: a server or database URI,
            or a ``file:`` URI or path for local files.
        experiment: the experiment's name (created if missing).
        name: the run's name.
        root_dir: the run directory (recorded as the ``alf.root_dir`` tag).
        run_id: the id of the run to resume (None, or not found: a new run).
    """

    name = "mlflow"
    setting = "mlflow_tracking_uri"

    def __init__(
        self,
        *,
        tracking_uri: str,
        experiment: str,
        name: str,
        root_dir: str,
        run_id: str | None = None,
    ) -> None:
        uri = mlflow_uri(tracking_uri)
        if uri.startswith("file:"):
            # MLflow 3 refuses the file store unless asked for it explicitly; a file: URI
            # in the config is that request.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        tracking = _import("mlflow.tracking", "mlflow_tracking_uri", "mlflow")
        self._entities = _import("mlflow.entities", "mlflow_tracking_uri", "mlflow")
        try:
            self._client = tracking.MlflowClient(tracking_uri=uri)
            run = self._resume(run_id) if run_id else None
            if run is None:
                run = self._client.create_run(
                    self._experiment_id(experiment),
                    run_name=name,
                    tags={"alf.root_dir": os.path.abspath(root_dir)},
                )
        except Exception as err:
            raise TrackerError(
                f"TrainerConfig.mlflow_tracking_uri={tracking_uri!r}: MLflow could not start "
                f"the run: {_one_line(err)}"
            ) from err
        self._run_id: str = run.info.run_id
        self._logged_params = set(run.data.params)
        self._experiment = experiment

    def _resume(self, run_id: str) -> Any:
        try:
            run = self._client.get_run(run_id)
        except Exception:  # not in this tracking store: start a new run
            return None
        self._client.update_run(run_id, status="RUNNING")
        return run

    def _experiment_id(self, name: str) -> str:
        experiment = self._client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self._client.create_experiment(name)
        except Exception:  # created meanwhile by another run
            experiment = self._client.get_experiment_by_name(name)
            if experiment is None:
                raise
            return experiment.experiment_id

    def info(self) -> dict[str, Any]:
        return {"run_id": self._run_id, "experiment": self._experiment}

    def log_params(self, params: Mapping[str, str]) -> None:
        # A param cannot change once logged: on resume only the new ones are added.
        try:
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
        except ImportError:
            MAX_PARAM_VAL_LENGTH = 500  # noqa: N806
        new = [
            self._entities.Param(key, str(value)[:MAX_PARAM_VAL_LENGTH])
            for key, value in sorted(params.items())
            if key not in self._logged_params
        ]
        for chunk in _chunks(new, _MLFLOW_PARAMS_PER_BATCH):
            self._client.log_batch(self._run_id, params=chunk)
        self._logged_params.update(param.key for param in new)

    def log_scalars(self, scalars: Mapping[str, float], *, step: int) -> None:
        timestamp = int(time.time() * 1000)
        metrics = [
            self._entities.Metric(key, float(value), timestamp, step)
            for key, value in scalars.items()
        ]
        for chunk in _chunks(metrics, _MLFLOW_METRICS_PER_BATCH):
            self._client.log_batch(self._run_id, metrics=chunk)

    def finish(self, *, failed: bool = False) -> None:
        self._client.set_terminated(self._run_id, status="FAILED" if failed else "FINISHED")


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class TrackerSettings(Protocol):
    """The settings :func:`create_trackers` reads (``TrainerConfig`` has them)."""

    wandb_project: str | None
    wandb_mode: str
    mlflow_tracking_uri: str | None
    mlflow_experiment: str


def create_trackers(
    config: TrackerSettings,
    *,
    root_dir: str,
    previous: Mapping[str, Mapping[str, Any]] | None = None,
    params: Mapping[str, str] | None = None,
) -> list[Tracker]:
    """Starts the trackers that ``config`` enables and logs ``params`` to them.

    Args:
        config: the run's settings (a ``TrainerConfig``).
        root_dir: the run directory (its last two components name the run).
        previous: on resume, the ``trackers`` of ``run_info.json``: the runs to continue.
        params: the run's configuration (the gin bindings).

    Raises:
        TrackerError: a tracker's package is missing or it could not start (the trackers
            already started are finished first).
    """
    previous = previous or {}
    name = run_name(root_dir)
    trackers: list[Tracker] = []
    try:
        wandb_mode = os.environ.get("WANDB_MODE") or config.wandb_mode
        if config.wandb_project and wandb_mode != "disabled":
            trackers.append(
                WandbTracker(
                    project=config.wandb_project,
                    mode=config.wandb_mode,
                    name=name,
                    directory=root_dir,
                    run_id=previous.get(WandbTracker.name, {}).get("run_id"),
                )
            )
        if config.mlflow_tracking_uri:
            trackers.append(
                MlflowTracker(
                    tracking_uri=config.mlflow_tracking_uri,
                    experiment=config.mlflow_experiment,
                    name=name,
                    root_dir=root_dir,
                    run_id=previous.get(MlflowTracker.name, {}).get("run_id"),
                )
            )
        for tracker in trackers if params else ():
            try:
                tracker.log_params(params)
            except Exception as err:
                raise TrackerError(
                    f"TrainerConfig.{tracker.setting}: could not log the run's config: "
                    f"{_one_line(err)}"
                ) from err
    except BaseException:
        for tracker in trackers:
            try:
                tracker.finish(failed=True)
            except Exception:  # the error being raised is the one to report
                pass
        raise
    return trackers
