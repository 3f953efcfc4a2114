"""Image transformers: byte images to floats, and stacking an episode's recent frames."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from alf import nest
from alf.config import configurable
from alf.data_structures import Experience, StepType, TimeStep
from alf.data_transformers.base import Batch, DataTransformer
from alf.tensor_specs import BoundedTensorSpec, TensorSpec


@configurable
class ImageScale(DataTransformer):
    """Maps every ``uint8`` observation leaf from ``[0, 255]`` to float32
    ``[min, max]``.

    Args:
        observation_spec: nest of specs of the observations.
        min: value of a 0 byte.
        max: value of a 255 byte.
    """

    def __init__(self, *, observation_spec: Any, min: float = 0.0, max: float = 1.0) -> None:  # noqa: A002
        super().__init__(observation_spec=observation_spec)
        self._selected = [s.dtype == torch.uint8 for s in nest.flatten(observation_spec)]
        if not any(self._selected):
            raise ValueError("ImageScale: the observation has no uint8 leaf to scale")
        self.low = float(min)
        self.scale = (float(max) - float(min)) / 255.0

    @property
    def transformed_observation_spec(self) -> Any:
        leaves = [
            BoundedTensorSpec(
                s.shape, torch.float32, minimum=self.low, maximum=self.low + 255 * self.scale
            )
            if keep
            else s
            for s, keep in zip(nest.flatten(self.observation_spec), self._selected, strict=True)
        ]
        return nest.pack_sequence_as(self.observation_spec, leaves)

    def _transform(self, batch: Batch) -> Batch:
        leaves = [
            x.to(torch.float32) * self.scale + self.low if keep else x
            for x, keep in zip(nest.flatten(batch.observation), self._selected, strict=True)
        ]
        return batch._replace(observation=nest.pack_sequence_as(batch.observation, leaves))


_WHERE_DTYPES = (torch.uint8, torch.int8, torch.int32, torch.int64)
"""Non-floating dtypes whose ``where`` ONNX Runtime implements (not bool or int16)."""


def _where(condition: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``torch.where``, through int32 for the dtypes ONNX Runtime's ``Where`` lacks, so
    an exported policy (:mod:`alf.export`) runs there (e.g. a bool action mask)."""
    if x.dtype.is_floating_point or x.dtype in _WHERE_DTYPES:
        return torch.where(condition, x, y)
    return torch.where(condition, x.to(torch.int32), y.to(torch.int32)).to(x.dtype)


@configurable
class FrameStacker(DataTransformer):
    """Concatenates each observation leaf with its ``stack_size - 1`` predecessors of the
    same episode along its first axis (the channel axis of a ``[C, H, W]`` image; a
    ``[D]`` vector becomes ``[stack_size * D]``), oldest first. At the start of an episode
    the missing predecessors are copies of its first observation.

    On the policy's path the predecessors are the transformer's state; on training
    batches they are the batch's own earlier rows (:attr:`history_length` extra leading
    rows), so the replay buffer stores single frames.

    Args:
        observation_spec: nest of specs of the observations (every leaf is stacked).
        stack_size: frames per stacked observation.
    """

    def __init__(self, *, observation_spec: Any, stack_size: int = 4) -> None:
        super().__init__(observation_spec=observation_spec)
        if stack_size < 1:
            raise ValueError(f"FrameStacker.stack_size must be >= 1, got {stack_size}")
        for spec in nest.flatten(observation_spec):
            if len(spec.shape) == 0:
                raise ValueError("FrameStacker needs observations with at least one axis")
        self.stack_size = stack_size
        self.history_length = stack_size - 1

    @property
    def transformed_observation_spec(self) -> Any:
        def stacked(spec: TensorSpec) -> TensorSpec:
            shape = (spec.shape[0] * self.stack_size, *spec.shape[1:])
            if isinstance(spec, BoundedTensorSpec):
                return BoundedTensorSpec(
                    shape,
                    spec.dtype,
                    minimum=self._tile(spec.minimum, spec),
                    maximum=self._tile(spec.maximum, spec),
                )
            return TensorSpec(shape, spec.dtype)

        return nest.map_structure(stacked, self.observation_spec)

    def _tile(self, bound: Any, spec: TensorSpec) -> Any:
        # A full-shape bound repeats along the stacked axis; a scalar one broadcasts.
        if np.ndim(bound) == len(spec.shape):
            return np.concatenate([np.asarray(bound)] * self.stack_size, axis=0)
        return bound

    @property
    def state_spec(self) -> Any:
        return nest.map_structure(
            lambda s: TensorSpec((self.history_length, *s.shape), s.dtype), self.observation_spec
        )

    def transform_timestep(self, time_step: TimeStep, state: Any) -> tuple[TimeStep, Any]:
        if self.history_length == 0:
            return time_step, state
        first = time_step.step_type == StepType.FIRST

        def step(x: torch.Tensor, history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            shape = (-1,) + (1,) * (history.dim() - 1)
            repeated = x.unsqueeze(1).expand_as(history)
            history = _where(first.reshape(shape), repeated, history)
            frames = torch.cat([history, x.unsqueeze(1)], dim=1)  # [B, k, C, ...]
            return frames.flatten(1, 2), frames[:, 1:]

        leaves = nest.flatten(time_step.observation)
        results = [step(x, h) for x, h in zip(leaves, nest.flatten(state), strict=True)]
        observation = nest.pack_sequence_as(time_step.observation, [r[0] for r in results])
        new_state = nest.pack_sequence_as(state, [r[1] for r in results])
        return time_step._replace(observation=observation), new_state

    def transform_experience(self, exp: Experience) -> Experience:
        h = self.history_length
        if h == 0:
            return exp
        num_rows, batch = exp.step_type.shape[:2]
        device = exp.step_type.device
        rows = torch.arange(num_rows, device=device).unsqueeze(1).expand(num_rows, batch)
        # Row of the latest FIRST at or before each row (0 if none in the window).
        episode_start = torch.where(exp.step_type == StepType.FIRST, rows, 0).cummax(0).values
        out_rows = rows[h:]  # [T, B]
        offsets = torch.arange(-h, 1, device=device)  # oldest first
        source = torch.maximum(
            out_rows.unsqueeze(-1) + offsets, episode_start[h:].unsqueeze(-1)
        )  # [T, B, k]
        columns = torch.arange(batch, device=device).reshape(1, batch, 1).expand_as(source)

        def stack(x: torch.Tensor) -> torch.Tensor:
            return x[source, columns].flatten(2, 3)  # [T, B, k * C, ...]

        stacked = nest.map_structure(stack, exp.observation)
        rest = nest.map_structure(lambda x: x[h:], exp._replace(observation=()))
        return rest._replace(observation=stacked)
