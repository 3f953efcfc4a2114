"""Environments that misbehave on purpose, for the data-guard tests (importable as
``alf_test_bad_envs:BadCartPole-v0`` with ``tests/`` on the path).

``BadCartPole-v0`` is CartPole-v1 until the step ``ALF_TEST_BAD_AT`` (environment
variable; unset: never) of every episode of the environment first reset with the seed
``ALF_TEST_BAD_SEED`` (default 1: environment 1 of a batch seeded from 0; ``all``: of
every environment), where it
returns, by
``ALF_TEST_BAD_KIND``: ``nan_obs`` (default), ``inf_reward`` or ``shape`` (an observation
of shape (5,)). The misbehaviour is read from the environment so that a run can be
resumed with the same config on a broken environment.

``BadMaskedChoice-v0`` is ``alf/MaskedChoice-v0`` with an action mask of the wrong size
(``mask_size``) or all false at a chosen step (``all_false_at``), both constructor
keywords (``create_environment.env_kwargs``).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from alf.environments.action_space_envs import MaskedChoiceEnv


class BadCartPole(gym.Wrapper):
    """CartPole-v1 that returns bad data at a chosen step (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(gym.make("CartPole-v1", **kwargs).unwrapped)
        at = os.environ.get("ALF_TEST_BAD_AT")
        self.bad_at = int(at) if at else None
        bad_seed = os.environ.get("ALF_TEST_BAD_SEED", "1")
        self.bad_seed = None if bad_seed == "all" else int(bad_seed)
        self.bad = self.bad_seed is None
        self.kind = os.environ.get("ALF_TEST_BAD_KIND", "nan_obs")
        self.t = 0

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        if kwargs.get("seed") is not None and self.bad_seed is not None:
            self.bad = kwargs["seed"] == self.bad_seed
        self.t = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        if self.bad and self.t == self.bad_at:
            if self.kind == "nan_obs":
                obs = obs.copy()
                obs[2] = np.nan
            elif self.kind == "inf_reward":
                reward = float("inf")
            elif self.kind == "shape":
                obs = np.zeros(5, dtype=obs.dtype)
        return obs, reward, terminated, truncated or self.t >= 500, info


gym.register(id="BadCartPole-v0", entry_point=BadCartPole)


class BadMaskedChoice(MaskedChoiceEnv):
    """``alf/MaskedChoice-v0`` with a broken action mask: ``mask_size`` entries (instead
    of one per action), or all false at step ``all_false_at`` of every episode."""

    def __init__(self, *, mask_size: int | None = None, all_false_at: int | None = None) -> None:
        super().__init__()
        self.mask_size = mask_size or self.num_actions
        self.all_false_at = all_false_at
        self.observation_space = gym.spaces.Dict(
            {
                "values": self.observation_space["values"],
                "action_mask": gym.spaces.MultiBinary(self.mask_size),
            }
        )

    def _observe(self) -> dict[str, np.ndarray]:
        obs = super()._observe()
        mask = np.ones(self.mask_size, dtype=np.int8)
        mask[: self.num_actions] = obs["action_mask"][: self.mask_size]
        if self.all_false_at is not None and self._t + 1 == self.all_false_at:
            mask[:] = 0
        obs["action_mask"] = mask
        return obs


gym.register(id="BadMaskedChoice-v0", entry_point=BadMaskedChoice)


class FaultyEnv(gym.Env):
    """A tiny environment (4 observations, 2 actions, episodes of ``length`` steps,
    reward 1) with a fault chosen by constructor keywords
    (``create_environment.env_kwargs``), for the environment-fault tests.

    ``fault``: ``raise_reset`` (reset raises ``ZeroDivisionError``), ``raise_step``
    (the ``at``-th step since the environment was made raises ``ZeroDivisionError``; the
    faults below also start there), ``legacy_step`` (step returns the old
    4-tuple), ``vector_reward`` (a reward of shape (2,)), ``none_reward`` (reward None),
    ``never_ends`` (no episode ends), ``hang_reset`` (reset sleeps for an hour),
    ``hang_step`` (a step sleeps for an hour), ``spin_step`` (a step loops in Python for
    an hour), ``kill_self`` (SIGKILL to its own process: an actor killed), or None.
    ``only_seed``: only the environment first reset with this seed misbehaves (None: all
    of them).
    """

    def __init__(
        self,
        *,
        fault: str | None = None,
        at: int = 1,
        only_seed: int | None = None,
        length: int = 20,
    ) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.fault, self.at, self.only_seed, self.length = fault, at, only_seed, length
        self.faulty = only_seed is None
        self.t = 0
        self.total = 0  # steps since the environment was made

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None and self.only_seed is not None:
            self.faulty = seed == self.only_seed
        self.t = 0
        if self.faulty and self.fault == "raise_reset":
            _ = 1 / 0  # the user's bug
        if self.faulty and self.fault == "hang_reset":
            import time

            time.sleep(3600)
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        self.total += 1
        obs = np.full(4, 0.01 * (self.t % 50), np.float32)
        reward: Any = 1.0
        ends = self.t >= self.length and self.fault != "never_ends"
        if self.faulty and self.total >= self.at:
            if self.fault == "raise_step":
                _ = self.t / 0  # the user's bug
            if self.fault == "hang_step":
                import time

                time.sleep(3600)
            if self.fault == "kill_self":  # as kill -9 of the process stepping it
                import signal

                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "spin_step":
                import time

                end = time.monotonic() + 3600
                while time.monotonic() < end:
                    pass
            if self.fault == "legacy_step":
                return obs, reward, ends, {}
            if self.fault == "vector_reward":
                reward = np.ones(2)
            if self.fault == "none_reward":
                reward = None
        return obs, reward, ends, False, {}


gym.register(id="FaultyEnv-v0", entry_point=FaultyEnv)
