"""Learning tests of the off-policy family through the real command line.

Each test trains three seeds at once (one process and one torch thread each) and stops a
run at its first evaluation that reaches the score (``TrainerConfig.stop_at_eval_return``),
then checks that this happened within the issue's env-step budget.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_cli import play_cmd, played_average_return, run_cli
from helpers_learning import check_reached, steps_to, train_seeds


@pytest.fixture(scope="module")
def sac_runs(tmp_path_factory) -> tuple[Path, dict[int, list[dict]]]:  # noqa: ANN001
    """SAC on Pendulum for three seeds, saving their replay buffers."""
    tmp = tmp_path_factory.mktemp("sac")
    runs = train_seeds(tmp, "sac", "sac_pendulum.gin", -200, "ReplayBuffer.enable_checkpoint=True")
    return tmp, runs


@pytest.mark.slow
def test_sac_pendulum_reaches_minus_200_within_20k_steps(sac_runs):
    tmp, runs = sac_runs
    check_reached("SAC Pendulum", runs, -200, 20_000)
    played = played_average_return(run_cli(play_cmd(tmp / "sac_0", "--num_episodes=10")))
    assert played >= -250, played


@pytest.mark.slow
def test_hybrid_sac_needs_no_more_online_steps_than_sac(sac_runs):
    """Seed 1 with seed 0's saved buffer mixed into every mini-batch reaches -200 in no
    more online env steps than seed 1 alone."""
    tmp, runs = sac_runs
    hybrid = train_seeds(
        tmp,
        "hybrid",
        "sac_pendulum.gin",
        -200,
        f"TrainerConfig.offline_buffer_dir='{tmp / 'sac_0'}'",
        "TrainerConfig.offline_fraction=0.5",
        "TrainerConfig.initial_collect_steps=256",
        seeds=(1,),
    )
    online = steps_to(runs[1], -200)
    mixed = steps_to(hybrid[1], -200)
    print(f"seed 1 env steps to -200: SAC {online}, hybrid SAC {mixed}")
    assert online is not None and mixed is not None and mixed <= online, (online, mixed)


@pytest.mark.slow
def test_td3_pendulum_reaches_minus_250_within_30k_steps(tmp_path):
    runs = train_seeds(tmp_path, "td3", "td3_pendulum.gin", -250)
    check_reached("TD3 Pendulum", runs, -250, 30_000)


@pytest.mark.slow
def test_dqn_cart_pole_reaches_475_within_100k_steps(tmp_path):
    runs = train_seeds(tmp_path, "dqn", "dqn_cart_pole.gin", 475)
    check_reached("DQN CartPole", runs, 475, 100_000)
