"""Training on a dataset: ``alf.bin.train`` with SAC on the committed Pendulum dataset
(``TrainerConfig.offline_dataset``, offline only), its D4RL-normalised score in
``alf.bin.report`` and ``alf.bin.plot``; and a run that cannot use its dataset (spaces
that differ, a missing dataset, an on-policy algorithm, an offline algorithm without
data): one line, status 2, nothing written."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from helpers_cli import REPO, run_cli, train_cmd

pytest.importorskip("minari")

from alf import config as alf_config  # noqa: E402
from alf.algorithms.sac import SacAlgorithm  # noqa: E402
from alf.datasets import DatasetError  # noqa: E402
from alf.trainers import RLTrainer, TrainerConfig  # noqa: E402

SAC_CONF = REPO / "alf" / "examples" / "sac_pendulum.gin"
DATASET = REPO / "tests" / "data" / "datasets" / "pendulum-sac-v0"
RANDOM_RETURN, EXPERT_RETURN = -1263.9664936510846, -155.33204455194064
OFFLINE_PARAMS = (
    f"TrainerConfig.offline_dataset='{DATASET}'",
    "TrainerConfig.offline_fraction=1.0",
    "TrainerConfig.num_iterations=30",
    "TrainerConfig.num_env_steps=0",
    "TrainerConfig.initial_collect_steps=0",
    "TrainerConfig.summary_interval=10",
    "TrainerConfig.eval_interval=15",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
    "TrainerConfig.progress_interval_s=1000",
    "ActorDistributionNetwork.fc_layer_params=(32, 32)",
    "CriticNetwork.fc_layer_params=(32, 32)",
    "SacAlgorithm.mini_batch_size=64",
)


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("offline_training") / "sac_offline"
    result = run_cli(train_cmd(root, *OFFLINE_PARAMS, conf=SAC_CONF))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Finished at iteration 30 (0 env steps)" in result.stdout
    return root


def _evaluations(root: Path) -> list[dict]:
    records = [json.loads(line) for line in (root / "progress.jsonl").read_text().splitlines()]
    return [r for r in records if "eval/average_return" in r]


def test_sac_trains_on_the_dataset_alone_and_evaluates(offline_run):
    evaluations = _evaluations(offline_run)
    assert [(e["iteration"], e["env_steps"]) for e in evaluations] == [(15, 0), (30, 0)]
    info = json.loads((offline_run / "run_info.json").read_text())
    assert info["reference_returns"]["random"] == RANDOM_RETURN
    assert info["reference_returns"]["expert"] == EXPERT_RETURN
    (dataset,) = info["offline_datasets"]
    assert dataset["steps"] == 10_000 and dataset["dataset_id"] == "alf/pendulum-sac-v0"


def test_report_and_plot_show_normalised_scores(offline_run, tmp_path):
    final = _evaluations(offline_run)[-1]["eval/average_return"]
    score = 100 * (final - RANDOM_RETURN) / (EXPERT_RETURN - RANDOM_RETURN)
    result = run_cli([sys.executable, "-m", "alf.bin.report", str(offline_run), "--reps=50"])
    assert result.returncode == 0, result.stderr
    header, _, row = result.stdout.splitlines()[:3]
    columns = [c.strip() for c in header.strip("|").split("|")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[columns.index("normalized score (mean ± std)")] == f"{score:.1f}"
    assert "Normalised score: D4RL's 100 * (R - random) / (expert - random)" in result.stdout

    out = tmp_path / "curves.png"
    result = run_cli(
        [sys.executable, "-m", "alf.bin.plot", str(offline_run), f"--out={out}", "--normalized"]
    )
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_steps"]) for r in rows] == [15, 30]  # iterations of an offline run
    assert float(rows[-1]["center"]) == pytest.approx(score)


@pytest.mark.parametrize(
    ("params", "culprit"),
    [
        (
            ("create_environment.env_name='MountainCarContinuous-v0'",),
            "does not fit the run: observation has shape (3,), the run's has (2,)",
        ),
        (("TrainerConfig.offline_dataset='/nonexistent/dataset'",), "not found"),
        (
            ("TrainerConfig.algorithm_ctor=@PPOAlgorithm",),
            "TrainerConfig.offline_dataset needs an off-policy algorithm",
        ),
    ],
)
def test_a_run_that_cannot_use_its_dataset_is_one_line(tmp_path, params, culprit):
    root = tmp_path / "run"
    result = run_cli(train_cmd(root, *OFFLINE_PARAMS, *params, conf=SAC_CONF))
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alf.bin.train: error: "), result.stderr
    assert culprit in lines[0]
    assert not root.exists()


class _OfflineOnlySac(SacAlgorithm):
    needs_offline_data = True


def test_an_offline_algorithm_without_data_is_refused_before_writing(tmp_path):
    alf_config.load_config(str(SAC_CONF), ["TrainerConfig.num_iterations=5"])
    config = TrainerConfig(algorithm_ctor=_OfflineOnlySac, num_iterations=5)
    root = tmp_path / "run"
    with pytest.raises(DatasetError) as info:
        RLTrainer(config=config, root_dir=str(root))
    assert str(info.value).startswith("_OfflineOnlySac learns from offline data")
    assert "TrainerConfig.offline_dataset" in str(info.value)
    assert not root.exists()


def test_offline_fraction_defaults_to_offline_rl_with_a_dataset():
    alf_config.load_config(None, [])
    with_dataset = TrainerConfig(
        algorithm_ctor=SacAlgorithm, num_iterations=1, offline_dataset=str(DATASET)
    )
    assert with_dataset.offline_fraction == 1.0 and with_dataset.offline_only
    with_buffers = TrainerConfig(
        algorithm_ctor=SacAlgorithm, num_iterations=1, offline_buffer_dir="/runs/a"
    )
    assert with_buffers.offline_fraction == 0.5 and not with_buffers.offline_only
    both = TrainerConfig(
        algorithm_ctor=SacAlgorithm,
        num_iterations=1,
        offline_dataset=[str(DATASET), "D4RL/pen/human-v2"],
        offline_fraction=0.25,
    )
    assert both.offline_datasets == (str(DATASET), "D4RL/pen/human-v2")
    assert both.offline_fraction == 0.25 and not both.offline_only
