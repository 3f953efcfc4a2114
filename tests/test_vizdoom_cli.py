"""VizDoom through the real command line: async training and headless video recording
of ``appo_doom_basic.gin``, and its bad inputs (one ``error:`` line naming the culprit,
exit status 2, nothing written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers_cli import (
    REPO,
    assert_clean_user_error,
    cli_env,
    play_cmd,
    played_average_return,
    run_cli,
    run_many,
    train_cmd,
)

pytest.importorskip("vizdoom")

DOOM_CONF = REPO / "alf" / "examples" / "appo_doom_basic.gin"
TRAIN = "alf.bin.train"

# Two async iterations of 2 actors x 2 environments at a small resolution.
TINY = (
    "TrainerConfig.num_iterations=2",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_episodes=1",
    "TrainerConfig.num_eval_environments=1",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.unroll_length=8",
    "create_environment.num_parallel_environments=4",
    "AsyncUnroller.fragments_per_iteration=2",
    "AsyncUnroller.num_buffers=4",
    "AppoAlgorithm.mini_batch_size=32",
    "VizdoomPreset.width=64",
    "VizdoomPreset.height=36",
)


def test_async_training_and_headless_recording(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    root = tmp_path / "run"
    trained = run_cli(train_cmd(root, *TINY, conf=DOOM_CONF), cwd=cwd)
    assert trained.returncode == 0, trained.stderr
    video = tmp_path / "doom.mp4"
    played = run_cli(
        play_cmd(root, "--num_episodes=1", f"--record_file={video}"),
        cwd=cwd,
    )
    assert played.returncode == 0, played.stderr
    assert -500 <= played_average_return(played) <= 100  # Basic's scores
    assert video.stat().st_size > 1000
    # The engine's _vizdoom.ini went to temporary folders, not the working directory.
    assert list(cwd.iterdir()) == []


def _bad(tmp_path: Path, name: str, *params: str) -> tuple[Path, list[str]]:
    root = tmp_path / name
    return root, train_cmd(root, *TINY, *params, conf=DOOM_CONF)


def test_bad_inputs_are_one_line_each(tmp_path):
    cases = {
        "unknown_scenario": _bad(
            tmp_path, "unknown", 'create_environment.env_name="VizdoomBasik-v1"'
        ),
        "not_doom": _bad(tmp_path, "not_doom", 'create_environment.env_name="CartPole-v1"'),
        "resolution": _bad(tmp_path, "resolution", "VizdoomPreset.width=16"),
        "render_resolution": _bad(
            tmp_path, "render_resolution", 'VizdoomPreset.render_resolution="RES_1X1"'
        ),
    }
    results = run_many({name: cmd for name, (_, cmd) in cases.items()})
    keywords = {
        "unknown_scenario": ("VizdoomBasik-v1", "VizdoomBasic-v1"),
        "not_doom": ("vizdoom", "CartPole-v1"),
        "resolution": ("conv", "does not fit", "16"),
        "render_resolution": ("VizdoomPreset.render_resolution", "RES_1X1"),
    }
    for name, result in results.items():
        assert result.returncode == 2, (name, result.stderr)
        assert_clean_user_error(result, TRAIN, *keywords[name])
        assert not cases[name][0].exists(), f"{name}: the failed command wrote its root_dir"


def test_missing_package_names_the_extra(tmp_path):
    # A vizdoom package that cannot be imported, first on the path.
    fake = tmp_path / "fake" / "vizdoom"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'vizdoom'\")\n")
    env = cli_env()
    env["PYTHONPATH"] = str(fake.parent)
    root = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", TRAIN, f"--root_dir={root}", f"--conf={DOOM_CONF}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert_clean_user_error(result, TRAIN, "VizdoomBasic-v1", "pip install 'alf-rl[vizdoom]'")
    assert not root.exists()
