"""Experiment trackers (W&B offline, MLflow on a local file store) and the x-axis of every
summary (env steps), unit-tested through ``SummaryLogger`` and end to end through a real
tiny training run that is then resumed. Nothing here touches the network."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers_cli import (
    STEPS_PER_ITERATION,
    assert_clean_user_error,
    read_progress,
    run_cli,
    train_cmd,
    train_records,
)

from alf.run_dir import layout
from alf.trainers import TrainerConfig
from alf.utils.summary import SummaryLogger
from alf.utils.trackers import Tracker, TrackerError, create_trackers, mlflow_uri, run_name


def _offline_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """W&B offline and silent, with every file of it under ``tmp_path`` (returns its
    ``WANDB_DIR``); no MLflow server. Subprocesses inherit it (``cli_env`` copies
    ``os.environ``)."""
    wandb_dir = tmp_path / "wandb_dir"
    wandb_dir.mkdir()
    for name, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(wandb_dir),
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb_cache"),
        "WANDB_DATA_DIR": str(tmp_path / "wandb_data"),
        "WANDB_DISABLE_GIT": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return wandb_dir


def _settings(**overrides: Any) -> SimpleNamespace:
    settings = dict(
        wandb_project=None, wandb_mode="online", mlflow_tracking_uri=None, mlflow_experiment="alf"
    )
    return SimpleNamespace(**{**settings, **overrides})


# ------------------------------------------------------------------ units
def test_run_name_is_the_last_two_components_of_root_dir(tmp_path):
    assert run_name("/runs/sweeps/ppo_hopper/seed-0") == "ppo_hopper/seed-0"
    assert run_name("/runs/sweeps/ppo_hopper/seed-0/") == "ppo_hopper/seed-0"
    assert run_name(str(tmp_path / "a" / "b")) == "a/b"


def test_mlflow_uri_turns_a_path_into_a_file_uri(tmp_path):
    assert mlflow_uri(str(tmp_path / "mlruns")) == (tmp_path / "mlruns").as_uri()
    assert mlflow_uri("file:///x/mlruns") == "file:///x/mlruns"
    assert mlflow_uri("http://localhost:5000") == "http://localhost:5000"
    assert mlflow_uri("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            dict(wandb_project="p"),
            "TrainerConfig.wandb_project needs the [wandb] extra: pip install 'alf-rl[wandb]' "
            "(in a clone of ALF: pip install -e '.[wandb]')",
        ),
        (
            dict(mlflow_tracking_uri="/tmp/x"),
            "TrainerConfig.mlflow_tracking_uri needs the [mlflow] extra: "
            "pip install 'alf-rl[mlflow]' (in a clone of ALF: pip install -e '.[mlflow]')",
        ),
    ],
)
def test_a_missing_package_is_one_clear_line(settings, message, monkeypatch, tmp_path):
    for module in ("wandb", "mlflow", "mlflow.tracking", "mlflow.entities"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(TrackerError) as info:
        create_trackers(_settings(**settings), root_dir=str(tmp_path / "run"))
    assert str(info.value) == message


def test_no_tracker_by_default_and_disabled_wandb_imports_nothing(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)
    root = str(tmp_path / "run")
    assert create_trackers(_settings(), root_dir=root) == []
    assert create_trackers(_settings(wandb_project="p", wandb_mode="disabled"), root_dir=root) == []


@pytest.mark.parametrize(
    ("binding", "setting"),
    [
        (dict(wandb_mode="bogus"), "TrainerConfig.wandb_mode"),
        (dict(wandb_project=""), "TrainerConfig.wandb_project"),
        (dict(mlflow_tracking_uri=" "), "TrainerConfig.mlflow_tracking_uri"),
        (dict(mlflow_experiment=""), "TrainerConfig.mlflow_experiment"),
    ],
)
def test_bad_tracker_settings_are_refused(binding, setting):
    with pytest.raises(ValueError, match=setting.replace(".", r"\.")):
        TrainerConfig(algorithm_ctor=object, num_iterations=1, **binding)


class RecordingTracker(Tracker):
    name = "recording"
    setting = "recording"

    def __init__(self, *, fail_on_log: bool = False) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.finished: bool | None = None
        self.fail_on_log = fail_on_log

    def info(self) -> dict[str, Any]:
        return {"run_id": "r1"}

    def log_params(self, params):
        pass

    def log_scalars(self, scalars, *, step):
        if self.fail_on_log:
            raise ConnectionError("service unreachable")
        self.logged.append((step, dict(scalars)))

    def finish(self, *, failed=False):
        self.finished = failed


def test_summary_logger_writes_at_env_steps_and_fans_out(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    good, bad = RecordingTracker(), RecordingTracker(fail_on_log=True)
    summary = SummaryLogger(str(tmp_path), purge_step=1, trackers=[good, bad])
    record = {"iteration": 3, "env_steps": 768}
    summary.write("train", {"loss": 0.5}, record, env_steps=768, iteration=3)
    summary.write("eval", {"average_return": 9.0}, record, env_steps=768, iteration=3)
    assert [t.name for t in summary.trackers] == ["recording"]  # the failing one dropped
    summary.mark_failed()
    summary.close()
    assert good.logged == [
        (768, {"train/loss": 0.5, "train/iteration": 3}),
        (768, {"eval/average_return": 9.0, "eval/iteration": 3}),
    ]
    assert good.finished is True and bad.finished is None
    # progress.jsonl lines are unchanged: the record plus the group's scalars.
    lines = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert lines == [{**record, "train/loss": 0.5}, {**record, "eval/average_return": 9.0}]
    events = EventAccumulator(str(tmp_path / "train"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(768, 0.5)]
    assert [(e.step, e.value) for e in events.Scalars("train/iteration")] == [(768, 3.0)]


# ------------------------------------------------------------------ end to end
# ppo_cart_pole.gin, 4 iterations; every iteration summarised, evaluated every 2.
RUN_PARAMS = (
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.eval_interval=2",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
    "TrainerConfig.checkpoint_interval=2",
    "TrainerConfig.num_checkpoints=5",
    "TrainerConfig.progress_interval_s=0",
    "TrainerConfig.wandb_project='alf-tests'",
    "TrainerConfig.wandb_mode='offline'",
    "TrainerConfig.mlflow_experiment='alf-tests'",
)


def _budget(iterations: int) -> str:
    return f"TrainerConfig.num_env_steps={iterations * STEPS_PER_ITERATION}"


def _wandb_history(run_file: Path) -> list[dict[str, Any]]:
    """The history rows of a W&B ``.wandb`` log, read by wandb's own reader."""
    result = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode == 0:
        records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        return [r["history"]["item"] for r in records if r.get("type") == "history"]
    # wandb releases without `wandb leet`: their Python reader of the log.
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    store = datastore.DataStore()
    store.open_for_scan(str(run_file))
    rows = []
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


def _tensorboard(run_dir: Path, group: str, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / group))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


@pytest.fixture(scope="module")
def tracked_runs(tmp_path_factory) -> dict[str, Any]:
    """A 4-iteration run with W&B (offline) and MLflow (file store), then a resumption
    from its iteration-2 checkpoint (the newest removed) to 6 iterations."""
    tmp = tmp_path_factory.mktemp("tracked")
    monkeypatch = pytest.MonkeyPatch()
    wandb_dir = _offline_environ(tmp, monkeypatch)
    try:
        root = tmp / "ppo_cart_pole" / "seed-0"
        mlruns = tmp / "mlruns"
        params = (*RUN_PARAMS, f"TrainerConfig.mlflow_tracking_uri='{mlruns.as_uri()}'")
        first = run_cli(train_cmd(root, *params, _budget(4)))
        assert first.returncode == 0, first.stderr[-3000:]
        first_info = json.loads((root / layout.METADATA_FILE).read_text())
        first_wandb = sorted(wandb_dir.glob("wandb/offline-run-*"))
        first_progress = read_progress(root)
        (root / "checkpoints" / "ckpt-4.pt").unlink()
        second = run_cli(train_cmd(root, *params, _budget(6)))
        assert second.returncode == 0, second.stderr[-3000:]
    finally:
        monkeypatch.undo()
    return dict(
        root=root,
        mlruns=mlruns,
        wandb_dir=wandb_dir,
        first_info=first_info,
        first_wandb=first_wandb,
        first_progress=first_progress,
        info=json.loads((root / layout.METADATA_FILE).read_text()),
        first=first,
        second=second,
    )


def test_tensorboard_x_axis_is_env_steps_and_resume_purges_in_env_steps(tracked_runs):
    root = tracked_runs["root"]
    steps = [i * STEPS_PER_ITERATION for i in range(1, 7)]
    loss = _tensorboard(root, "train", "train/loss")
    # Iterations 3 and 4 of the first session were redone: their events are purged.
    assert [step for step, _ in loss] == steps
    assert _tensorboard(root, "train", "train/iteration") == [
        (step, float(i)) for i, step in enumerate(steps, start=1)
    ]
    assert _tensorboard(root, "eval", "eval/iteration") == [
        (steps[i - 1], float(i)) for i in (2, 4, 6)
    ]
    # progress.jsonl keeps its keys: iteration and env_steps, no new ones.
    for record in train_records(read_progress(root)):
        assert record["env_steps"] == record["iteration"] * STEPS_PER_ITERATION
        assert "train/iteration" not in record


def test_wandb_offline_run_holds_the_scalars_and_is_resumed(tracked_runs):
    first_info, info = tracked_runs["first_info"], tracked_runs["info"]
    run_id = first_info["trackers"]["wandb"]["run_id"]
    assert run_id and info["trackers"]["wandb"] == {"run_id": run_id, "project": "alf-tests"}
    (first_dir,) = tracked_runs["first_wandb"]
    assert first_dir.name.endswith(f"-{run_id}")
    run_dirs = sorted(tracked_runs["wandb_dir"].glob("wandb/offline-run-*"))
    assert len(run_dirs) == 2 and all(d.name.endswith(f"-{run_id}") for d in run_dirs)
    train_progress = train_records(tracked_runs["first_progress"])

    rows = _wandb_history(next(first_dir.glob(f"run-{run_id}.wandb")))
    train = [r for r in rows if "train/loss" in r]
    assert [r["env_steps"] for r in train] == [r["env_steps"] for r in train_progress]
    assert [r["train/iteration"] for r in train] == [1, 2, 3, 4]
    assert [r["train/loss"] for r in train] == pytest.approx(
        [r["train/loss"] for r in train_progress]
    )
    evals = [r for r in rows if "eval/average_return" in r]
    assert [(r["env_steps"], r["eval/iteration"]) for r in evals] == [(512, 2), (1024, 4)]

    resumed_dir = next(d for d in run_dirs if d != first_dir)
    rows = _wandb_history(next(resumed_dir.glob(f"run-{run_id}.wandb")))
    steps = [r["env_steps"] for r in rows if "train/loss" in r]
    assert steps == [i * STEPS_PER_ITERATION for i in (3, 4, 5, 6)]


def test_mlflow_run_holds_the_scalars_and_is_resumed(tracked_runs, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    first_info, info = tracked_runs["first_info"], tracked_runs["info"]
    run_id = first_info["trackers"]["mlflow"]["run_id"]
    assert info["trackers"]["mlflow"]["run_id"] == run_id  # the same run continued
    client = MlflowClient(tracking_uri=tracked_runs["mlruns"].as_uri())
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "ppo_cart_pole/seed-0"
    assert run.data.params["TrainerConfig.wandb_project"] == "'alf-tests'"
    assert run.data.tags["alf.root_dir"] == str(tracked_runs["root"])
    history = client.get_metric_history(run_id, "train/iteration")
    # The first session's iterations 1-4, then the resumed 3-6 (MLflow keeps both).
    assert sorted((m.step, m.value) for m in history) == sorted(
        (i * STEPS_PER_ITERATION, float(i)) for i in (1, 2, 3, 4, 3, 4, 5, 6)
    )
    evals = client.get_metric_history(run_id, "eval/average_return")
    assert sorted({m.step for m in evals}) == [512, 1024, 1536]


def test_run_info_records_the_resumption(tracked_runs):
    first_info, info = tracked_runs["first_info"], tracked_runs["info"]
    assert info["start_time"] == first_info["start_time"]
    assert info["argv"] == first_info["argv"]
    (resume,) = info["resumes"]
    assert resume["iteration"] == 2 and resume["env_steps"] == 2 * STEPS_PER_ITERATION
    assert resume["argv"][-1] == f"--conf_param={_budget(6)}"
    assert {"time", "command", "git_revision"} <= set(resume)
    assert "Resumed from" in tracked_runs["second"].stderr


def test_bad_wandb_mode_is_a_clean_user_error(tmp_path):
    root = tmp_path / "run"
    result = run_cli(train_cmd(root, "TrainerConfig.wandb_mode='bogus'"))
    assert result.returncode == 2
    stderr = assert_clean_user_error(result, "alf.bin.train", "TrainerConfig.wandb_mode", "bogus")
    assert "invalid configuration" in stderr
    assert not (root / layout.METADATA_FILE).exists()


def test_missing_tracker_package_stops_the_cli_with_one_line(tmp_path):
    """A ``sitecustomize``-free way to hide wandb from the training process: a module
    named ``wandb`` that fails to import, first on ``PYTHONPATH``."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "wandb.py").write_text("raise ImportError('hidden by the test')\n")
    root = tmp_path / "run"
    result = run_cli(
        train_cmd(root, "TrainerConfig.num_env_steps=256", "TrainerConfig.wandb_project='p'"),
        pythonpath=hide,
    )
    assert result.returncode == 2
    assert_clean_user_error(
        result,
        "alf.bin.train",
        "TrainerConfig.wandb_project needs the [wandb] extra",
        "pip install 'alf-rl[wandb]'",
    )
    assert not (root / layout.METADATA_FILE).exists()
