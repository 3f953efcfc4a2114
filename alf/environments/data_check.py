"""Checking what environments return, where it enters ALF: shared by the backends.

Every batch of observations and rewards a backend returns is checked once, cheaply
(one sum over each floating leaf and the reward, which a NaN or infinity anywhere makes
non-finite, and one shape comparison per leaf; only a non-finite total looks further): a
non-finite value or a shape that does not fit the observation spec stops the run with
one line naming the environment, its index, the step of its episode and the
observation key (:class:`EnvironmentDataError`). With ``drop=True`` a non-finite value
instead ends that environment's episode at its last finite step (the backend resets it)
and is counted in :attr:`DataChecker.num_dropped_episodes`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from alf import nest
from alf.errors import TrainingError
from alf.tensor_specs import action_mask_key

__all__ = ["EnvironmentDataError", "DataChecker", "describe_observation_mismatch"]


class EnvironmentDataError(TrainingError, ValueError):
    """An environment returned a non-finite observation or reward, or an observation
    that does not fit its spec."""


def _leaf_name(path: str) -> str:
    return f"observation[{path!r}]" if path else "observation"


def _paths(spec: Any) -> list[str]:
    return nest.flatten(nest.map_structure_with_path(lambda path, _: path, spec))


def describe_observation_mismatch(
    observation: Any, space: Any, *, env_name: str, index: int, step: int | None = None
) -> str | None:
    """Why one environment's ``observation`` does not fit its Gymnasium ``space`` (None
    if it does, as far as shapes and dtypes go): the line of an
    :class:`EnvironmentDataError`."""
    import gymnasium as gym

    def check(obs: Any, sub: Any, path: str) -> str | None:
        if isinstance(sub, gym.spaces.Dict):
            if not isinstance(obs, dict):
                return f"{_leaf_name(path)} is a {type(obs).__name__}, expected a dict"
            for key, child in sub.spaces.items():
                if key not in obs:
                    return f"observation key {key!r} is missing"
                found = check(obs[key], child, f"{path}.{key}" if path else str(key))
                if found:
                    return found
            return None
        if isinstance(sub, gym.spaces.Tuple):
            for i, child in enumerate(sub.spaces):
                found = check(obs[i], child, f"{path}.{i}" if path else str(i))
                if found:
                    return found
            return None
        array = np.asarray(obs)
        if sub.shape is not None and array.shape != tuple(sub.shape):
            return (
                f"{_leaf_name(path)} has shape {array.shape}, expected {tuple(sub.shape)} "
                "by its observation space"
            )
        if sub.dtype is not None and not np.can_cast(array.dtype, sub.dtype, "same_kind"):
            return (
                f"{_leaf_name(path)} has dtype {array.dtype}, which does not fit the "
                f"observation space's {sub.dtype}"
            )
        return None

    problem = check(observation, space, "")
    if problem is None:
        return None
    at = "" if step is None else f" at step {step} of its episode"
    return f"environment {index} of '{env_name}'{at}: {problem}"


_add = np.add.reduce


def _sum(array: np.ndarray | torch.Tensor) -> float:
    """The sum of ``array``'s elements, non-finite if any element is (or, rarely, if
    finite ones overflow: the caller then looks at the elements). Through numpy for a
    numpy array or CPU tensor: cheaper than torch's dispatch for small batches."""
    if isinstance(array, np.ndarray):
        return float(_add(array, None))
    if array.device.type == "cpu":
        return float(_add(array.numpy(), None))
    return float(array.sum())


class DataChecker:
    """Checks batches of observations and rewards of ``batch_size`` environments.

    Args:
        env_name: the environments' id (named in errors).
        observation_spec: nest of :class:`~alf.tensor_specs.TensorSpec` of one
            observation.
        batch_size: environments per batch.
        first_index: the run-wide index of the batch's first environment (a worker's
            group, a rank's share).
        drop: end an environment's episode at a non-finite value instead of raising.
    """

    def __init__(
        self,
        *,
        env_name: str,
        observation_spec: Any,
        batch_size: int,
        first_index: int = 0,
        drop: bool = False,
    ) -> None:
        self.env_name = env_name
        self.first_index = first_index
        self.drop = drop
        self.num_dropped_episodes = 0
        """Episodes ended early for a non-finite observation or reward."""
        specs = nest.flatten(observation_spec)
        self._single = nest.is_single(observation_spec)
        self._paths = _paths(observation_spec)
        self._shapes = [(batch_size, *spec.shape) for spec in specs]
        self._floating = [i for i, spec in enumerate(specs) if spec.dtype.is_floating_point]
        self._step = 0  # batch steps since the last reset
        self._episode_start = np.zeros(batch_size, dtype=np.int64)  # ... at each one's start
        key = action_mask_key()
        self._mask_key = (
            key if isinstance(observation_spec, dict) and key in observation_spec else None
        )

    def restart(self) -> None:
        """Every environment was reset: their episodes start."""
        self._step = 0
        self._episode_start[:] = 0

    def step_of(self, index: int) -> int:
        """The step of its episode environment ``index`` (in the batch) is at."""
        return self._step - int(self._episode_start[index])

    def advance(self, first: np.ndarray | None) -> None:
        """Counts a step; ``first`` marks the environments that started an episode with
        it (None: none did)."""
        self._step += 1
        if first is not None and first.any():
            self._episode_start[first] = self._step

    def check(self, observation: Any, reward: Any) -> np.ndarray | None:
        """Checks a batch (numpy arrays or tensors, ``[batch_size, ...]``); returns None
        if it is fine, else (``drop``) the mask of the environments whose episode must
        end.

        Raises:
            EnvironmentDataError: a leaf of the wrong shape, or (without ``drop``) a
                non-finite value.
        """
        leaves = [observation] if self._single else nest.flatten(observation)
        for leaf, shape, path in zip(leaves, self._shapes, self._paths, strict=True):
            if tuple(leaf.shape) != shape:
                raise EnvironmentDataError(
                    f"the batch of '{self.env_name}' has {_leaf_name(path)} of shape "
                    f"{tuple(leaf.shape)}, expected {shape} ({shape[0]} environments x the "
                    "observation spec's shape)"
                )
        total = 0.0 if reward is None else _sum(reward)
        for i in self._floating:
            total += _sum(leaves[i])
        if math.isfinite(total):
            return None
        return self._non_finite(leaves, reward)

    def check_action_mask(self, observation: Any, ignore: np.ndarray | None = None) -> None:
        """Checks that the invalid-action mask (the observation key
        :func:`~alf.tensor_specs.action_mask_key`, if the observations have it) allows
        at least one action in every environment whose action is taken, i.e. all but
        those marked in ``ignore`` (the LAST steps, whose action is ignored: a terminal
        state may allow nothing).

        Raises:
            EnvironmentDataError: an all-false mask, naming the environment and its step.
        """
        if self._mask_key is None:
            return
        mask = np.asarray(observation[self._mask_key])
        empty = ~mask.reshape(mask.shape[0], -1).any(axis=1)
        if ignore is not None:
            empty &= ~ignore
        if empty.any():
            env = int(np.flatnonzero(empty)[0])
            raise EnvironmentDataError(
                f"environment {self.first_index + env} of '{self.env_name}' returned an "
                f"all-false action mask (observation[{self._mask_key!r}]) at step "
                f"{self.step_of(env)} of its episode: no action is allowed where one must "
                "be taken (end the episode there instead)"
            )

    def _non_finite(self, leaves: Sequence[Any], reward: Any) -> np.ndarray:
        bad = np.zeros(len(self._episode_start), dtype=bool)
        first_problem = None
        named = [(leaves[i], _leaf_name(self._paths[i])) for i in self._floating]
        if reward is not None:
            named.append((reward, "reward"))
        for array, name in named:
            tensor = torch.as_tensor(array)
            rows = ~torch.isfinite(tensor.reshape(tensor.shape[0], -1)).all(dim=1)
            rows_np = rows.numpy()
            if first_problem is None and rows_np.any():
                env = int(np.flatnonzero(rows_np)[0])
                values = tensor[env].reshape(-1)
                value = values[~torch.isfinite(values)][0].item()
                first_problem = (env, name, value)
            bad |= rows_np
        if first_problem is None:  # finite values whose sum overflowed
            return None
        env, name, value = first_problem
        shown = (
            f"{value}; a reward of None, not a number, arrives as nan"
            if (name == "reward" and math.isnan(value))
            else str(value)
        )
        where = (
            f"environment {self.first_index + env} of '{self.env_name}' returned a "
            f"non-finite {name} ({shown}) at step {self.step_of(env)} of its "
            "episode"
        )
        if not self.drop:
            raise EnvironmentDataError(
                f"{where}. Fix the environment, or bind TrainerConfig.nonfinite_data = "
                "'drop_episode' to end such episodes and go on"
            )
        self.num_dropped_episodes += int(bad.sum())
        from absl import logging

        logging.warning(
            "%s: that step is dropped and the episode ends at its previous step "
            "(TrainerConfig.nonfinite_data = 'drop_episode')",
            where,
        )
        return bad
