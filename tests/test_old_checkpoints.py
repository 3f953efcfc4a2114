"""A run written by an earlier ALF (``tests/data/run_235a112``: PPO CartPole, 2
iterations, by commit 235a112) still plays, acts from Python and resumes training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers_cli import REPO, play_cmd, played_average_return, run_cli, train_cmd

import alf

OLD_RUN = Path(__file__).with_name("data") / "run_235a112"
CONF = REPO / "alf" / "examples" / "ppo_cart_pole.gin"
PARAMS = ("TrainerConfig.num_eval_episodes=2", "TrainerConfig.num_eval_environments=2")


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    return Path(shutil.copytree(OLD_RUN, tmp_path / "run"))


def test_an_old_run_plays_and_acts(old_run: Path) -> None:
    assert played_average_return(run_cli(play_cmd(old_run, "--num_episodes=2"))) > 0
    policy = alf.load(str(old_run)).policy
    assert policy(np.zeros(4, dtype=np.float32)) in (0, 1)


def test_an_old_run_resumes_training(old_run: Path) -> None:
    result = run_cli(train_cmd(old_run, *PARAMS, "TrainerConfig.num_env_steps=1024", conf=CONF))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Finished at iteration 4" in result.stdout, result.stdout
    status = json.loads((old_run / "status.json").read_text())
    assert status["state"] == "finished" and status["iteration"] == 4
    assert (old_run / "checkpoints" / "ckpt-4.pt").is_file()
