"""Learning tests of the off-policy family through the real command line.

Each test trains three seeds at once (one process and one torch thread each) and stops a
run at its first evaluation that reaches the score (``TrainerConfig.stop_at_eval_return``),
then checks that this happened within the issue's env-step budget.
"""

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
SEEDS = (0, 1, 2)
TIMEOUT_S = 900


def _train_seeds(
    tmp: Path, name: str, conf: str, target: float, *params: str, seeds=SEEDS
) -> dict[int, list[dict]]:
    """Trains ``conf`` for every seed until an evaluation reaches ``target``; returns
    each seed's evaluation records."""
    cmds = {
        seed: train_cmd(
            tmp / f"{name}_{seed}",
            f"TrainerConfig.random_seed={seed}",
            f"TrainerConfig.stop_at_eval_return={target}",
            "TrainerConfig.torch_num_threads=1",
            *params,
            conf=EXAMPLES / conf,
        )
        for seed in seeds
    }
    procs = run_many(cmds, max_workers=len(seeds), timeout=TIMEOUT_S)
    for seed, proc in procs.items():
        assert proc.returncode == 0, f"seed {seed}:\n{proc.stderr[-3000:]}"
    return {seed: eval_records(read_progress(tmp / f"{name}_{seed}")) for seed in seeds}


def _steps_to(evals: list[dict], target: float) -> int | None:
    for record in evals:
        if record["eval/average_return"] >= target:
            return record["env_steps"]
    return None


def _check(name: str, runs: dict[int, list[dict]], target: float, budget: int) -> None:
    reached = {seed: _steps_to(evals, target) for seed, evals in runs.items()}
    curves = {
        seed: [(e["env_steps"], round(e["eval/average_return"])) for e in evals]
        for seed, evals in runs.items()
    }
    print(f"{name}: env steps to {target}: {reached}; evaluations: {curves}")
    for seed, steps in reached.items():
        assert steps is not None and steps <= budget, (
            f"{name} seed {seed} did not reach {target} within {budget} env steps: "
            f"{curves[seed]}"
        )


@pytest.fixture(scope="module")
def sac_runs(tmp_path_factory) -> tuple[Path, dict[int, list[dict]]]:  # noqa: ANN001
    """SAC on Pendulum for three seeds, saving their replay buffers."""
    tmp = tmp_path_factory.mktemp("sac")
    runs = _train_seeds(tmp, "sac", "sac_pendulum.gin", -200, "ReplayBuffer.enable_checkpoint=True")
    return tmp, runs


@pytest.mark.slow
def test_sac_pendulum_reaches_minus_200_within_20k_steps(sac_runs):
    tmp, runs = sac_runs
    _check("SAC Pendulum", runs, -200, 20_000)
    played = played_average_return(run_cli(play_cmd(tmp / "sac_0", "--num_episodes=10")))
    assert played >= -250, played


@pytest.mark.slow
def test_hybrid_sac_needs_no_more_online_steps_than_sac(sac_runs):
    """Seed 1 with seed 0's saved buffer mixed into every mini-batch reaches -200 in no
    more online env steps than seed 1 alone."""
    tmp, runs = sac_runs
    hybrid = _train_seeds(
        tmp,
        "hybrid",
        "sac_pendulum.gin",
        -200,
        f"TrainerConfig.offline_buffer_dir='{tmp / 'sac_0'}'",
        "TrainerConfig.offline_fraction=0.5",
        "TrainerConfig.initial_collect_steps=256",
        seeds=(1,),
    )
    online = _steps_to(runs[1], -200)
    mixed = _steps_to(hybrid[1], -200)
    print(f"seed 1 env steps to -200: SAC {online}, hybrid SAC {mixed}")
    assert online is not None and mixed is not None and mixed <= online, (online, mixed)


@pytest.mark.slow
def test_td3_pendulum_reaches_minus_250_within_30k_steps(tmp_path):
    _check("TD3 Pendulum", _train_seeds(tmp_path, "td3", "td3_pendulum.gin", -250), -250, 30_000)


@pytest.mark.slow
def test_dqn_cart_pole_reaches_475_within_100k_steps(tmp_path):
    _check("DQN CartPole", _train_seeds(tmp_path, "dqn", "dqn_cart_pole.gin", 475), 475, 100_000)
