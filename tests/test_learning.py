"""Learning tests: the example configs reach their scores through the real command line."""

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

EXAMPLES = CONF.parent
TRAIN_TIMEOUT_S = 600


def _train(conf: str, root_dir: str, *params: str) -> list[dict]:
    proc = run_cli(train_cmd(root_dir, *params, conf=EXAMPLES / conf), timeout=TRAIN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return eval_records(read_progress(Path(root_dir)))


def _play(root_dir: str, episodes: int = 10) -> float:
    return played_average_return(run_cli(play_cmd(root_dir, f"--num_episodes={episodes}")))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_cart_pole_reaches_475_within_100k_steps(tmp_path, seed):
    root = str(tmp_path / f"ppo_{seed}")
    evals = _train("ppo_cart_pole.gin", root, f"TrainerConfig.random_seed={seed}")
    assert evals[-1]["env_steps"] <= 100_000 + 256
    solved = [e for e in evals if e["eval/average_return"] >= 475]
    assert solved, f"seed {seed}: evaluations {[e['eval/average_return'] for e in evals]}"
    print(
        f"seed {seed}: first >= 475 at {solved[0]['env_steps']} env steps; "
        f"final {evals[-1]['eval/average_return']}"
    )
    assert evals[-1]["eval/average_return"] >= 475
    assert _play(root) >= 475


@pytest.mark.slow
def test_a2c_cart_pole_reaches_195(tmp_path):
    evals = _train("ac_cart_pole.gin", str(tmp_path / "ac"))
    returns = [e["eval/average_return"] for e in evals]
    print(f"A2C CartPole evaluations: {returns}")
    assert max(returns) >= 195, returns
    assert returns[-1] >= 195, returns


@pytest.mark.slow
def test_ppo_pendulum_beats_minus_400(tmp_path):
    evals = _train("ppo_pendulum.gin", str(tmp_path / "pendulum"))
    returns = [e["eval/average_return"] for e in evals]
    print(f"PPO Pendulum evaluations: {[round(r) for r in returns]}")
    assert returns[-1] > -400, returns
