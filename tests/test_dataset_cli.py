"""``alf.bin.dataset`` end to end: datasets from a tiny SAC run's policy (greedy,
exploring, noisy, an older checkpoint), a uniform policy, the run's saved replay buffer
and other datasets; measured references; pinned checkpoints and
``TrainerConfig.keep_checkpoint_every`` surviving rotation; and bad input (one line,
status 2, nothing written)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_cli import REPO, run_cli, train_cmd

pytest.importorskip("minari")

from alf.datasets import read_episodes, read_info  # noqa: E402

SAC_CONF = REPO / "alf" / "examples" / "sac_pendulum.gin"
TOOL = "alf.bin.dataset"
RUN_PARAMS = (
    "TrainerConfig.num_env_steps=300",
    "TrainerConfig.initial_collect_steps=100",
    "TrainerConfig.checkpoint_interval=100",
    "TrainerConfig.num_checkpoints=1",
    "TrainerConfig.keep_checkpoint_every=200",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_episodes=1",
    "TrainerConfig.progress_interval_s=1000",
    "ReplayBuffer.enable_checkpoint=True",
    "ActorDistributionNetwork.fc_layer_params=(16,)",
    "CriticNetwork.fc_layer_params=(16,)",
    "SacAlgorithm.mini_batch_size=32",
)


def dataset_cmd(*flags: str) -> list[str]:
    return [sys.executable, "-m", TOOL, *flags]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A SAC Pendulum run of 300 steps whose checkpoints hold the replay buffer."""
    root = tmp_path_factory.mktemp("dataset_cli") / "sac"
    result = run_cli(train_cmd(root, *RUN_PARAMS, conf=SAC_CONF))
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def _ok(*flags: str) -> str:
    result = run_cli(dataset_cmd(*flags))
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def _checkpoints(root: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in (root / "checkpoints").glob("ckpt-*.pt"))


def test_policy_random_and_noisy_datasets(run_dir, tmp_path):
    line = _ok(f"--root_dir={run_dir}", f"--out={tmp_path / 'greedy'}", "--num_steps=250")
    assert line.startswith(f"{TOOL}: wrote {tmp_path / 'greedy'}: 2 episodes, 250 steps")
    info = read_info(str(tmp_path / "greedy"))
    assert info.env_id == "Pendulum-v1" and info.total_steps == 250
    made = info.made_by
    assert made["source"] == "checkpoint" and made["policy"] == "greedy"
    assert made["iteration"] == 300 and made["env_name"] == "Pendulum-v1"
    lengths = [e.length for e in read_episodes(info)]
    assert lengths == [200, 50] and info.total_episodes == 2  # the last one cut

    _ok(
        f"--root_dir={run_dir}",
        f"--out={tmp_path / 'noisy'}",
        "--num_episodes=1",
        "--exploring",
        "--noise=0.5",
        "--checkpoint=200",
        "--seed=3",
    )
    info = read_info(str(tmp_path / "noisy"))
    assert info.made_by["policy"] == "exploring" and info.made_by["noise"] == 0.5
    assert info.made_by["iteration"] == 200 and info.total_steps == 200
    (episode,) = read_episodes(info)
    assert np.abs(episode.actions).max() <= 2.0  # noise clipped to the bounds

    _ok("--random", "--env_name=Pendulum-v1", f"--out={tmp_path / 'random'}", "--num_steps=10")
    info = read_info(str(tmp_path / "random"))
    assert info.made_by["policy"] == "random" and info.total_steps == 10


def test_replay_buffer_datasets_keep_the_first_steps_stored(run_dir, tmp_path):
    _ok(
        "--from_replay_buffer",
        f"--root_dir={run_dir}",
        f"--out={tmp_path / 'replay'}",
        "--num_steps=150",
    )
    info = read_info(str(tmp_path / "replay"))
    assert info.total_steps == 150 and info.made_by["source"] == "replay_buffer"
    state = torch.load(run_dir / "checkpoints" / "ckpt-300.pt", weights_only=True)
    stored = state["replay_buffer"]["storage"]["observation"][0]
    episodes = list(read_episodes(info))
    np.testing.assert_array_equal(episodes[0].observations, stored[:151].numpy())
    np.testing.assert_array_equal(
        episodes[0].actions, state["replay_buffer"]["storage"]["action"][0][:150].numpy()
    )
    assert episodes[0].truncations[-1] and not episodes[0].terminations.any()


def test_references_and_concatenation(run_dir, tmp_path):
    line = _ok(
        f"--root_dir={run_dir}",
        f"--out={tmp_path / 'a'}",
        "--num_episodes=1",
        "--measure_references",
        "--reference_episodes=1",
    )
    info = read_info(str(tmp_path / "a"))
    assert info.has_references and "normalised score of the data" in line
    assert info.made_by["references"]["random"].startswith("uniformly random actions")
    _ok(
        "--random",
        f"--root_dir={run_dir}",
        f"--out={tmp_path / 'b'}",
        "--num_steps=30",
        "--random_return=-1300",
        "--expert_return=-150",
    )
    _ok(f"--from_datasets={tmp_path / 'a'},{tmp_path / 'b'}", f"--out={tmp_path / 'ab'}")
    both = read_info(str(tmp_path / "ab"))
    assert (both.total_episodes, both.total_steps) == (2, 230)
    assert both.random_return == info.random_return  # the first dataset's references
    assert [d["steps"] for d in both.made_by["datasets"]] == [200, 30]


def test_pinned_and_kept_checkpoints_survive_rotation(run_dir, tmp_path):
    # num_checkpoints=1 and keep_checkpoint_every=200: 100 went, 200 stayed.
    assert _checkpoints(run_dir) == [200, 300]
    line = _ok(f"--root_dir={run_dir}", "--pin=300")
    assert (
        line
        == f"{TOOL}: pinned {run_dir / 'checkpoints' / 'ckpt-300.pt'}: rotation never removes it"
    )
    resumed = run_cli(
        train_cmd(run_dir, *RUN_PARAMS, "TrainerConfig.num_env_steps=500", conf=SAC_CONF)
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _checkpoints(run_dir) == [200, 300, 400, 500]  # 400: kept every 200


@pytest.mark.parametrize(
    ("flags", "culprit"),
    [
        (("--num_steps=0",), "--num_steps must be >= 1, got 0"),
        (("--num_steps=5", "--num_episodes=5"), "give --num_steps or --num_episodes, not both"),
        (("--random", "--num_steps=5", "--root_dir="), "--random needs --root_dir or --env_name"),
        (("--from_replay_buffer", "--exploring"), "--exploring chooses how the run's policy"),
        (("--random", "--checkpoint=1", "--num_steps=5"), "--checkpoint chooses the run's"),
        (("--noise=-1", "--num_steps=5"), "--noise must be >= 0"),
        (("--num_steps=5", "--checkpoint=7"), "No checkpoint for iteration 7"),
        (("--pin=7",), "No checkpoint for iteration 7"),
        (("--from_datasets=/nonexistent/ds",), "dataset '/nonexistent/ds' not found"),
    ],
)
def test_bad_input_is_one_line_status_2_nothing_written(run_dir, tmp_path, flags, culprit):
    out = tmp_path / "out"
    result = run_cli(dataset_cmd(f"--root_dir={run_dir}", f"--out={out}", *flags))
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{TOOL}: error: "), result.stderr
    assert culprit in lines[0]
    assert not list(tmp_path.iterdir())


def test_an_existing_dataset_is_never_overwritten(run_dir, tmp_path):
    out = tmp_path / "ds"
    _ok("--random", "--env_name=Pendulum-v1", f"--out={out}", "--num_steps=5")
    before = (out / "data" / "main_data.hdf5").read_bytes()
    result = run_cli(
        dataset_cmd("--random", "--env_name=Pendulum-v1", f"--out={out}", "--num_steps=9")
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"{TOOL}: error: --out '{out}' exists: a dataset is never overwritten"
    )
    assert (out / "data" / "main_data.hdf5").read_bytes() == before
