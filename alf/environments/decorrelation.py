"""Spreading the environments' episode phases at the start of training.

Environments built together start their first episodes together, so at first every
fragment holds the same phase of an episode in every environment (all starts, then all
middles, then all ends on a fixed-length task), which skews the first updates and makes
episode ends arrive in bursts. Sample Factory therefore steps each environment a
different number of times before collection starts (``decorrelate_envs_on_one_worker``).
:class:`DecorrelateStart` does this as a Gymnasium wrapper, so it works on every backend
that builds environments through ``suite_gym.load`` (sync, subprocess, async actors)::

    suite_gym.load.wrappers = [@DecorrelateStart]
    DecorrelateStart.max_steps = 300

The steps happen inside the wrapper's first ``reset()``: ALF never sees them, so they are
neither training data nor counted as env steps.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from alf.config import configurable
from alf.errors import UserError

__all__ = ["DecorrelateStart"]


@configurable
class DecorrelateStart(gym.Wrapper):
    """At its first reset, takes a random number of uniformly random actions (0 to
    ``max_steps``, drawn from the reset's seed) and returns the observation reached, as
    if the episode had just started there; later resets are plain.

    An episode that ends during those steps is reset and stepping goes on, so the
    environment may start anywhere in its second or later episode. The number of steps
    taken is :attr:`decorrelation_steps` (None before the first reset).

    Args:
        env: the environment to wrap.
        max_steps: most random steps at the first reset (0: none).

    Raises:
        UserError: ``max_steps`` is negative or not an integer.
    """

    def __init__(self, env: gym.Env, *, max_steps: int = 100) -> None:
        super().__init__(env)
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 0:
            raise UserError(
                f"DecorrelateStart.max_steps must be an integer >= 0, got {max_steps!r}"
            )
        self._max_steps = max_steps
        self.decorrelation_steps: int | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if self.decorrelation_steps is not None:
            return obs, info
        rng = np.random.default_rng(seed)
        steps = int(rng.integers(0, self._max_steps + 1))
        self.decorrelation_steps = steps
        self.env.action_space.seed(int(rng.integers(2**31)))
        for _ in range(steps):
            obs, _, terminated, truncated, info = self.env.step(self.env.action_space.sample())
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        return obs, info
