"""Small environments for ALF's less common action spaces, registered with Gymnasium
when :mod:`alf.environments` is imported:

* ``alf/MaskedChoice-v0`` (:class:`MaskedChoiceEnv`): a ``Discrete`` action under an
  invalid-action mask (the ``"action_mask"`` observation key).
* ``alf/MultiDiscreteMatch-v0`` (:class:`MultiDiscreteMatchEnv`): a ``MultiDiscrete``
  action.
* ``alf/HybridMatch-v0`` (:class:`HybridMatchEnv`): a ``Dict`` of a ``Discrete`` with a
  non-zero ``start`` and a ``Box`` (a hybrid action).

Each is a sequence of independent one-step decisions (the observation of a step does
not depend on the actions taken before), so a small feed-forward policy can reach the
optimum in a few thousand steps: they check that the action spaces and masks work end to
end, cheaply. They import nothing from ALF.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from alf.errors import TrainingError

__all__ = ["HybridMatchEnv", "InvalidActionError", "MaskedChoiceEnv", "MultiDiscreteMatchEnv"]


class InvalidActionError(TrainingError, ValueError):
    """A strict :class:`MaskedChoiceEnv` was given an action its mask forbids (ALF's own
    one-line error, so the environment guard passes it on as it is)."""


class MaskedChoiceEnv(gym.Env):
    """Pick the most valuable *allowed* action, ``episode_length`` times.

    Each step shows the values of the ``num_actions`` actions (a random permutation of
    ``0, 1/(n-1), ..., 1``) under ``"values"`` and which actions are allowed under
    ``"action_mask"`` (``MultiBinary(n)``, 1: allowed). The most valuable action is
    forbidden half of the time and every other one with probability 0.3 (at least one is
    always allowed). Taking the most valuable allowed action earns 1, another allowed
    one 0; a forbidden one costs ``invalid_penalty`` and ends the episode (with
    ``strict=True`` it raises :class:`InvalidActionError` instead, so a run that takes a
    masked action fails). The optimum return is ``episode_length``; a policy that
    ignores the mask and takes the most valuable action ends half of its episodes at
    the first step or so, and a uniformly random allowed action earns about 0.35 per
    step.

    Args:
        num_actions: the number of actions.
        episode_length: decisions per episode.
        start: the ``start`` of the ``Discrete`` action space (actions ``start ..
            start + num_actions - 1``).
        invalid_penalty: the reward of a forbidden action.
        strict: raise on a forbidden action instead of ending the episode.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        *,
        num_actions: int = 5,
        episode_length: int = 8,
        start: int = 0,
        invalid_penalty: float = -1.0,
        strict: bool = False,
    ) -> None:
        self.num_actions = num_actions
        self.episode_length = episode_length
        self.start = start
        self.invalid_penalty = invalid_penalty
        self.strict = strict
        self.action_space = gym.spaces.Discrete(num_actions, start=start)
        self.observation_space = gym.spaces.Dict(
            {
                "values": gym.spaces.Box(0.0, 1.0, (num_actions,), np.float32),
                "action_mask": gym.spaces.MultiBinary(num_actions),
            }
        )
        self.num_invalid_actions = 0
        """Forbidden actions taken so far."""
        self._t = 0
        self._obs: dict[str, np.ndarray] = {}

    def _observe(self) -> dict[str, np.ndarray]:
        rng = self.np_random
        values = rng.permutation(np.linspace(0.0, 1.0, self.num_actions)).astype(np.float32)
        mask = (rng.random(self.num_actions) >= 0.3).astype(np.int8)
        mask[int(values.argmax())] = int(rng.random() >= 0.5)
        if not mask.any():
            mask[int(rng.integers(self.num_actions))] = 1
        self._obs = {"values": values, "action_mask": mask}
        return self._obs

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        index = int(action) - self.start
        if not 0 <= index < self.num_actions:
            raise ValueError(f"action {action} is outside {self.action_space}")
        mask, values = self._obs["action_mask"], self._obs["values"]
        self._t += 1
        if not mask[index]:
            self.num_invalid_actions += 1
            if self.strict:
                raise InvalidActionError(
                    f"MaskedChoice: action {action} is masked at step {self._t} "
                    f"(mask {mask.tolist()})"
                )
            return self._observe(), self.invalid_penalty, True, False, {"invalid": True}
        best = int(np.where(mask.astype(bool), values, -1.0).argmax())
        reward = 1.0 if index == best else 0.0
        return self._observe(), reward, self._t >= self.episode_length, False, {}


class MultiDiscreteMatchEnv(gym.Env):
    """Match a target with a ``MultiDiscrete(nvec)`` action, ``episode_length`` times.

    The observation is the one-hot encoding of a random target (one value per element,
    concatenated); the reward is the fraction of the elements matched. The optimum
    return is ``episode_length``; uniformly random actions earn ``mean(1 / nvec)`` per
    step (about 0.26 with the default ``nvec = (3, 4, 5)``).

    Args:
        nvec: the number of values of each element.
        episode_length: decisions per episode.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, *, nvec: Sequence[int] = (3, 4, 5), episode_length: int = 10) -> None:
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.episode_length = episode_length
        self.action_space = gym.spaces.MultiDiscrete(self.nvec)
        size = int(self.nvec.sum())
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,), np.float32)
        self._offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
        self._t = 0
        self._target = np.zeros(len(self.nvec), dtype=np.int64)

    def _observe(self) -> np.ndarray:
        self._target = self.np_random.integers(0, self.nvec)
        obs = np.zeros(int(self.nvec.sum()), dtype=np.float32)
        obs[self._offsets + self._target] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = np.asarray(action)
        if not self.action_space.contains(action.astype(self.action_space.dtype)):
            raise ValueError(f"action {action} is outside {self.action_space}")
        reward = float((action == self._target).mean())
        self._t += 1
        return self._observe(), reward, self._t >= self.episode_length, False, {}


class HybridMatchEnv(gym.Env):
    """Choose a target's category and amount with one ``Dict`` action.

    The action is ``{"choice": Discrete(num_choices, start=start), "amount": Box(-1, 1,
    (1,))}``; the observation is the one-hot target choice and the target amount. The
    reward is ``1`` for the right choice plus ``1 - |amount - target|`` (at most 2 per
    step, ``2 * episode_length`` per episode). A choice outside the space (e.g. without
    its ``start``) raises ``ValueError``.

    Args:
        num_choices: the number of choices.
        start: the ``start`` of the choice's ``Discrete`` space.
        episode_length: decisions per episode.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, *, num_choices: int = 3, start: int = 1, episode_length: int = 10) -> None:
        self.num_choices = num_choices
        self.start = start
        self.episode_length = episode_length
        self.action_space = gym.spaces.Dict(
            {
                "choice": gym.spaces.Discrete(num_choices, start=start),
                "amount": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
            }
        )
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (num_choices + 1,), np.float32)
        self._t = 0
        self._choice = 0
        self._amount = 0.0

    def _observe(self) -> np.ndarray:
        self._choice = int(self.np_random.integers(self.num_choices))
        self._amount = float(self.np_random.uniform(-1.0, 1.0))
        obs = np.zeros(self.num_choices + 1, dtype=np.float32)
        obs[self._choice] = 1.0
        obs[-1] = self._amount
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: dict[str, Any]) -> tuple[np.ndarray, float, bool, bool, dict]:
        choice = int(action["choice"])
        if not self.action_space["choice"].contains(np.int64(choice)):
            raise ValueError(f"choice {choice} is outside {self.action_space['choice']}")
        amount = float(np.asarray(action["amount"]).reshape(-1)[0])
        reward = float(choice - self.start == self._choice) + 1.0 - abs(amount - self._amount)
        self._t += 1
        return self._observe(), reward, self._t >= self.episode_length, False, {}


def register() -> None:
    """Registers the environments with Gymnasium (idempotent)."""
    for env_id, cls in (
        ("alf/MaskedChoice-v0", MaskedChoiceEnv),
        ("alf/MultiDiscreteMatch-v0", MultiDiscreteMatchEnv),
        ("alf/HybridMatch-v0", HybridMatchEnv),
    ):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=f"{__name__}:{cls.__name__}")


register()
