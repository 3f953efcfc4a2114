"""Learning test of an intrinsic reward (issue 35): PPO + RND solves a sparse MiniGrid
room through the real command line, within a few minutes on one CPU thread."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_cli import CONF, eval_records, read_progress, run_cli, train_cmd

RND_CONF = CONF.parent / "ppo_rnd_minigrid.gin"
BUDGET = 80_000


@pytest.mark.slow
def test_ppo_rnd_solves_doorkey_5x5(tmp_path: Path) -> None:
    """``MiniGrid-DoorKey-5x5-v0``: pick up the key, open the door, reach the goal; a
    random policy almost never does within an episode. With ``ppo_rnd_minigrid.gin``'s
    settings (seed 0, unrolls of 64) the greedy policy solved it (evaluation return 0.96)
    from about 30k env steps on, in 25 s on this project's 2-core machine; the test asks
    for 0.8 by 80k steps."""
    pytest.importorskip("minigrid")
    root = tmp_path / "run"
    proc = run_cli(
        train_cmd(
            root,
            "create_environment.env_name='MiniGrid-DoorKey-5x5-v0'",
            f"TrainerConfig.num_env_steps={BUDGET}",
            "TrainerConfig.unroll_length=64",
            "TrainerConfig.eval_interval=10",
            "TrainerConfig.num_eval_episodes=10",
            "TrainerConfig.random_seed=0",
            conf=RND_CONF,
        ),
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_progress(root)
    evals = eval_records(records)
    assert evals and max(e["eval/average_return"] for e in evals) >= 0.8, evals
    assert evals[-1]["eval/average_return"] >= 0.8, evals
    bonus = [r["train/intrinsic/bonus_mean"] for r in records if "train/intrinsic/bonus_mean" in r]
    assert bonus[-1] < bonus[0]  # the rooms became familiar
