"""Learning test on MuJoCo: PPO (``ppo_hopper.gin``) reaches a return of 1,000 on
Hopper-v5 within 300k env steps, through the real command line, and ``play`` agrees."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_cli import (
    CONF,
    eval_records,
    play_cmd,
    played_average_return,
    read_progress,
    run_cli,
    train_cmd,
)

pytest.importorskip("mujoco", reason="needs the [mujoco] extra")

TARGET = 1000.0
BUDGET = 300_000


@pytest.mark.slow
def test_ppo_hopper_reaches_1000_within_300k_steps(tmp_path):
    root = tmp_path / "ppo_hopper"
    proc = run_cli(
        train_cmd(
            root,
            f"TrainerConfig.num_env_steps={BUDGET}",
            f"TrainerConfig.stop_at_eval_return={TARGET}",
            "TrainerConfig.eval_interval=5",  # every 10,240 env steps
            "TrainerConfig.num_eval_episodes=5",
            "TrainerConfig.num_eval_environments=5",
            "TrainerConfig.checkpoint_interval=50",
            conf=CONF.parent / "ppo_hopper.gin",
        ),
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = eval_records(read_progress(Path(root)))
    returns = [round(e["eval/average_return"]) for e in evals]
    print(f"PPO Hopper-v5 evaluations every 10,240 env steps: {returns}")
    assert "reached TrainerConfig.stop_at_eval_return" in proc.stdout, returns
    assert evals[-1]["eval/average_return"] >= TARGET
    assert evals[-1]["env_steps"] <= BUDGET
    # play loads the same checkpoint and normaliser statistics: a comparable return.
    assert played_average_return(run_cli(play_cmd(root, "--num_episodes=5"))) >= 0.5 * TARGET
