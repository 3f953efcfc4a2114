"""Checking the actions an environment backend is given: shared by the backends."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from alf import nest
from alf.data_structures import StepType, TimeStep

__all__ = ["ActionChecker", "first_time_step", "numpy_dtype"]


def numpy_dtype(spec: Any) -> np.dtype:
    """The numpy dtype of a :class:`TensorSpec`."""
    return torch.empty((), dtype=spec.dtype).numpy().dtype


class ActionChecker:
    """Turns a batch of actions into numpy for an environment, clipping continuous ones.

    Continuous actions outside the action space are clipped to it and counted in
    :attr:`num_clipped_actions` (except in environments about to reset, which ignore
    their action); discrete actions outside it raise ``ValueError``.

    Args:
        action_spec: nest of bounded specs of one action.
    """

    def __init__(self, action_spec: Any) -> None:
        self._spec = action_spec
        self._specs = nest.flatten(action_spec)
        self._single = nest.is_single(action_spec)
        self._bounds = [
            (
                np.asarray(spec.minimum, dtype=numpy_dtype(spec)),
                np.asarray(spec.maximum, dtype=numpy_dtype(spec)),
            )
            for spec in self._specs
        ]
        # Bounds that are one number for every element: the batch is checked by its
        # minimum and maximum (two reductions, no per-element masks).
        self._scalar_bounds = [low.ndim == 0 and high.ndim == 0 for low, high in self._bounds]
        self.num_clipped_actions = 0

    @property
    def single_leaf(self) -> bool:
        """Whether the action is one tensor (not a nest)."""
        return self._single

    def __call__(self, action: Any, about_to_reset: np.ndarray) -> tuple[Any, Any]:
        """The action as numpy for the environment, and as applied (clipped) tensors."""
        arrays = []
        leaves = [action] if self._single else nest.flatten(action)
        checks = zip(leaves, self._specs, self._bounds, self._scalar_bounds, strict=True)
        for a, spec, (low, high), scalar_bounds in checks:
            a = a.numpy(force=True)  # detached, on the CPU (a view of a CPU tensor)
            if scalar_bounds and a.size:
                any_outside = a.min() < low or a.max() > high
            else:
                any_outside = bool(((a < low) | (a > high)).any())
            if any_outside and spec.is_discrete:
                raise ValueError(
                    f"Discrete action {a.tolist()} is outside [{spec.minimum}, {spec.maximum}]"
                )
            if any_outside:
                outside = (a < low) | (a > high)
                counted = outside.reshape(len(a), -1).any(1) & ~about_to_reset
                self.num_clipped_actions += int(counted.sum())
                a = np.clip(a, low, high).astype(a.dtype, copy=False)
            arrays.append(a)
        if self._single:
            return arrays[0], torch.from_numpy(arrays[0])
        np_action = nest.pack_sequence_as(self._spec, arrays)
        applied = nest.pack_sequence_as(self._spec, [torch.from_numpy(a) for a in arrays])
        return np_action, applied


def first_time_step(observation: Any, zero_action: Any, env_id: torch.Tensor) -> TimeStep:
    """The FIRST steps of a reset batch (reward 0, discount 1, zero ``prev_action``)."""
    n = env_id.shape[0]
    return TimeStep(
        step_type=torch.full((n,), StepType.FIRST, dtype=torch.int32),
        reward=torch.zeros(n),
        discount=torch.ones(n),
        observation=observation,
        prev_action=zero_action,
        env_id=env_id,
    )
