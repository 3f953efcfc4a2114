"""Tests of DecorrelateStart: random steps at the first reset spread episode phases."""

from __future__ import annotations

import gin
import gymnasium as gym
import pytest
import torch

from alf.data_structures import StepType
from alf.environments import DecorrelateStart, create_environment
from alf.errors import UserError


def _wrapped(max_steps: int) -> DecorrelateStart:
    return DecorrelateStart(gym.make("CartPole-v1"), max_steps=max_steps)


def test_first_reset_takes_seeded_random_steps():
    counts = []
    for seed in range(8):
        env = _wrapped(50)
        env.reset(seed=seed)
        counts.append(env.decorrelation_steps)
        again = _wrapped(50)
        again.reset(seed=seed)
        assert again.decorrelation_steps == env.decorrelation_steps  # seeded
    assert all(0 <= c <= 50 for c in counts) and len(set(counts)) > 3


def test_only_the_first_reset_steps():
    env = _wrapped(30)
    env.reset(seed=1)
    first = env.decorrelation_steps
    plain = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=5)
    expected, _ = plain.reset(seed=5)
    assert env.decorrelation_steps == first and (obs == expected).all()


def test_zero_steps_is_a_plain_reset():
    env = _wrapped(0)
    obs, _ = env.reset(seed=3)
    expected, _ = gym.make("CartPole-v1").reset(seed=3)
    assert env.decorrelation_steps == 0 and (obs == expected).all()


def test_episode_ends_spread_over_the_environments():
    """Eight CartPole environments pushed one way: without decorrelation they fall
    within a few steps of each other; with it, their first episode ends spread out."""

    def first_ends(wrappers: str) -> list[int]:
        gin.clear_config()
        gin.parse_config(wrappers)
        env = create_environment("CartPole-v1", 8, seed=0)
        try:
            env.reset()
            ends = [0] * 8
            for t in range(1, 200):
                step_type = env.step(torch.ones(8, dtype=torch.int64)).step_type
                for i in range(8):
                    if step_type[i] == StepType.LAST and not ends[i]:
                        ends[i] = t
            return ends
        finally:
            env.close()

    plain = first_ends("")
    spread = first_ends(
        "suite_gym.load.wrappers = [@DecorrelateStart]\nDecorrelateStart.max_steps = 40"
    )
    assert max(plain) - min(plain) <= 5
    assert max(spread) - min(spread) > 5


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_max_steps(bad):
    with pytest.raises(UserError, match="DecorrelateStart.max_steps"):
        _wrapped(bad)
