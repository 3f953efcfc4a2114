"""Learning tests of the action-space examples, through the real command line: PPO with
invalid-action masking reaches the optimum of ``alf/MaskedChoice-v0`` without ever
taking a masked action, and PPO on ``alf/MultiDiscreteMatch-v0`` learns far above
random. Each run stops at its first evaluation that reaches the score."""

from __future__ import annotations

import pytest
from helpers_learning import check_reached, train_seeds

# MaskedChoice: 8 decisions, 1 for the best allowed action. Optimum 8.0 (every one of
# the 20 evaluation episodes perfect); random allowed actions earn about 2.8.
MASKED_OPTIMUM = 8.0
MASKED_BUDGET = 20_000

# MultiDiscreteMatch: 10 decisions, the fraction of 3 elements matched. Optimum 10;
# uniformly random actions earn about 2.6.
MULTI_DISCRETE_TARGET = 9.0
MULTI_DISCRETE_BUDGET = 20_000


@pytest.mark.slow
def test_masked_ppo_reaches_the_optimum_and_never_takes_a_masked_action(tmp_path):
    # strict=True: a masked action raises in the environment (training and evaluation
    # environments alike), so a finished run took none: the count of masked actions
    # taken over training is 0.
    runs = train_seeds(
        tmp_path,
        "ppo_masked",
        "ppo_masked.gin",
        MASKED_OPTIMUM,
        'create_environment.env_kwargs={"strict": True}',
    )
    check_reached("ppo_masked", runs, MASKED_OPTIMUM, MASKED_BUDGET)


@pytest.mark.slow
def test_multi_discrete_ppo_learns(tmp_path):
    runs = train_seeds(
        tmp_path, "ppo_multi_discrete", "ppo_multi_discrete.gin", MULTI_DISCRETE_TARGET
    )
    check_reached("ppo_multi_discrete", runs, MULTI_DISCRETE_TARGET, MULTI_DISCRETE_BUDGET)
