"""Learning test of VizDoom through the asynchronous path: ``appo_doom_basic.gin`` (two
actor processes, V-trace) learns Doom Basic on the CPU within CI's budget.

To fit a few minutes of 2 CPU cores the frames are 64x36 instead of 128x72 (the same
Sample Factory 'convnet_simple' encoder still fits: a 128 x 1 x 2 feature map), about 5x
cheaper per step. The score: an evaluation return of 50 (10 greedy episodes; the
scenario's own score: random play about -160, the no-op or a stuck policy -300, a kill
within a second about 80-95).
"""

from __future__ import annotations

import pytest
from helpers_learning import check_reached, train_seeds

pytest.importorskip("vizdoom")

TARGET = 50.0
BUDGET = 60_000  # agent env steps (240k frames)
SEEDS = (0,)  # a learner and two actors: one run fills the 2 cores


@pytest.mark.slow
def test_appo_doom_basic_reaches_50(tmp_path):
    runs = train_seeds(
        tmp_path,
        "appo_doom_basic",
        "appo_doom_basic.gin",
        TARGET,
        "VizdoomPreset.width=64",
        "VizdoomPreset.height=36",
        # (held: the config's decay to 0 would be over this test's small budget)
        "AppoAlgorithm.learning_rate=1e-3",
        f"TrainerConfig.num_env_steps={BUDGET}",
        "TrainerConfig.eval_interval=5",
        "TrainerConfig.checkpoint_interval=1000",
        seeds=SEEDS,
    )
    check_reached("APPO Doom Basic (async, 64x36)", runs, TARGET, BUDGET)
