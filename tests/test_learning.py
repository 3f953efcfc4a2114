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
    run_many,
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


PPO_SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def ppo_cart_pole_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, list]]:
    """The three seeds' runs of ``ppo_cart_pole.gin``, trained at once (each run uses one
    thread): ``seed -> (root_dir, evaluations)``."""
    tmp = tmp_path_factory.mktemp("ppo_cart_pole")
    roots = {seed: str(tmp / f"ppo_{seed}") for seed in PPO_SEEDS}
    cmds = {
        seed: train_cmd(
            root, f"TrainerConfig.random_seed={seed}", conf=EXAMPLES / "ppo_cart_pole.gin"
        )
        for seed, root in roots.items()
    }
    procs = run_many(cmds, max_workers=len(cmds), timeout=TRAIN_TIMEOUT_S)
    runs = {}
    for seed, proc in procs.items():
        assert proc.returncode == 0, f"seed {seed}: {proc.stderr[-3000:]}"
        runs[seed] = (roots[seed], eval_records(read_progress(Path(roots[seed]))))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("seed", PPO_SEEDS)
def test_ppo_cart_pole_reaches_475_within_100k_steps(ppo_cart_pole_runs, seed):
    root, evals = ppo_cart_pole_runs[seed]
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
