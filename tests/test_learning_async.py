"""Learning tests of asynchronous collection through the real command line: actor
processes collect while the learner trains (``TrainerConfig.async_unroll``)."""

from __future__ import annotations

import pytest
from helpers_learning import check_reached, train_seeds

ASYNC_SEEDS = (0, 1)  # each run is a learner and two actors: two runs fill two cores


@pytest.mark.slow
def test_async_sac_pendulum_reaches_minus_200_within_30k_steps(tmp_path):
    runs = train_seeds(tmp_path, "async_sac", "async_sac_pendulum.gin", -200, seeds=ASYNC_SEEDS)
    check_reached("Async SAC Pendulum", runs, -200, 30_000)


@pytest.mark.slow
def test_appo_cart_pole_reaches_475(tmp_path):
    runs = train_seeds(
        tmp_path, "appo", "appo_cart_pole.gin", 475, "TrainerConfig.eval_interval=10"
    )
    check_reached("APPO CartPole (async)", runs, 475, 100_000)
