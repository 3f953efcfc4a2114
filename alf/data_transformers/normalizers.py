"""Transformers with running statistics: observation and reward normalisation, and a
fixed reward scale."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from alf import nest
from alf.config import configurable
from alf.data_structures import Experience, StepType
from alf.data_transformers.base import Batch, DataTransformer, check_update_mode
from alf.data_transformers.running_stats import RunningMeanStd
from alf.tensor_specs import TensorSpec


def _float_leaves(spec: Any) -> list[bool]:
    return [s.dtype.is_floating_point for s in nest.flatten(spec)]


@configurable
class ObservationNormalizer(DataTransformer):
    """Normalizes every floating-point observation leaf to zero mean and unit variance
    with running statistics, then clips it to ``[-clip_value, clip_value]``.

    Args:
        observation_spec: nest of specs of the observations.
        clip_value: clipping bound of the normalized values (None: no clipping).
        update_mode: ``"rollout"``: statistics are updated from every newly collected
            batch; ``"replay"``: from every sampled replay batch (off-policy only).
    """

    def __init__(
        self, *, observation_spec: Any, clip_value: float | None = 5.0, update_mode: str = "rollout"
    ) -> None:
        super().__init__(observation_spec=observation_spec)
        self.update_mode = check_update_mode(update_mode)
        self.clip_value = clip_value
        self._selected = _float_leaves(observation_spec)
        if not any(self._selected):
            raise ValueError(
                "ObservationNormalizer: the observation has no floating-point leaf to normalize"
            )
        self.stats = nn.ModuleList(
            RunningMeanStd(shape=s.shape)
            for s, keep in zip(nest.flatten(observation_spec), self._selected, strict=True)
            if keep
        )

    @property
    def transformed_observation_spec(self) -> Any:
        leaves = [
            TensorSpec(s.shape, torch.float32) if keep else s
            for s, keep in zip(nest.flatten(self.observation_spec), self._selected, strict=True)
        ]
        return nest.pack_sequence_as(self.observation_spec, leaves)

    def _transform(self, batch: Batch) -> Batch:
        leaves = nest.flatten(batch.observation)
        stats = iter(self.stats)
        out = [
            next(stats).normalize(x, center=True, clip=self.clip_value) if keep else x
            for x, keep in zip(leaves, self._selected, strict=True)
        ]
        return batch._replace(observation=nest.pack_sequence_as(batch.observation, out))

    def update_statistics(self, exp: Experience) -> None:
        leaves = nest.flatten(exp.observation)
        stats = iter(self.stats)
        for x, keep in zip(leaves, self._selected, strict=True):
            if keep:
                next(stats).update(x)


@configurable
class RewardNormalizer(DataTransformer):
    """Divides rewards by a running standard deviation (and optionally subtracts their
    mean), then clips them. Only the rewards algorithms train on change: episode
    returns in summaries and evaluations stay the environment's.

    By default the standard deviation is that of the rewards themselves. With
    ``return_based=True`` it is that of each environment's running discounted return
    (``G <- gamma * G + r``, reset at episode starts), the scaling Stable-Baselines3's
    ``VecNormalize`` and CleanRL's PPO use on MuJoCo: rewards then come out on the scale
    that makes the value targets roughly unit-sized, whatever the episode length.

    Args:
        observation_spec: nest of specs of the observations (unchanged).
        center: subtract the running mean too (changes the optimal policy of tasks
            whose episodes have varying lengths; off by default; not with
            ``return_based``).
        clip_value: clipping bound (None: no clipping).
        update_mode: ``"rollout"`` or ``"replay"`` (see :class:`ObservationNormalizer`);
            ``return_based`` needs ``"rollout"`` (returns run along whole trajectories).
        return_based: scale by the standard deviation of discounted returns.
        gamma: the discount of those returns (use the algorithm's).
    """

    def __init__(
        self,
        *,
        observation_spec: Any,
        center: bool = False,
        clip_value: float | None = 10.0,
        update_mode: str = "rollout",
        return_based: bool = False,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(observation_spec=observation_spec)
        self.update_mode = check_update_mode(update_mode)
        if return_based and update_mode != "rollout":
            raise ValueError(
                "RewardNormalizer.return_based needs update_mode='rollout': discounted "
                "returns run along whole trajectories, not sampled replay batches"
            )
        if return_based and center:
            raise ValueError("RewardNormalizer: center and return_based exclude each other")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"RewardNormalizer.gamma must be in [0, 1], got {gamma}")
        self.center = center
        self.clip_value = clip_value
        self.return_based = return_based
        self.gamma = gamma
        self.stats = RunningMeanStd(shape=())
        # Each environment's running discounted return, indexed by env_id (a buffer, so
        # it follows the module's device; not saved: after a resume the environments
        # start new episodes anyway).
        self.register_buffer("_returns", torch.zeros(0, dtype=torch.float64), persistent=False)

    def _transform(self, batch: Batch) -> Batch:
        reward = self.stats.normalize(batch.reward, center=self.center, clip=self.clip_value)
        return batch._replace(reward=reward)

    def update_statistics(self, exp: Experience) -> None:
        if not self.return_based:
            # A FIRST step's reward is a placeholder 0, not a reward.
            self.stats.update(exp.reward[exp.step_type != StepType.FIRST])
            return
        self.stats.update(self._discounted_returns(exp))

    def _discounted_returns(self, exp: Experience) -> torch.Tensor:
        """Advances every environment's discounted return over the batch's transitions
        and returns the values it took (one per transition).

        Row 0 of a rollout batch repeats the last row of the previous one (consecutive
        unrolls overlap by a row), so only rows ``1..T`` are new transitions."""
        device = self._returns.device
        reward = exp.reward[1:].detach().to(device, torch.float64)
        first = (exp.step_type[1:] == StepType.FIRST).to(device)
        env_id = exp.env_id[1:].to(device, torch.long)
        if env_id.numel() and int(env_id.max()) >= self._returns.numel():
            grown = torch.zeros(int(env_id.max()) + 1, dtype=torch.float64, device=device)
            grown[: self._returns.numel()] = self._returns
            self._returns = grown
        values = []
        for t in range(reward.shape[0]):
            ids = env_id[t]
            g = torch.where(first[t], 0.0, self._returns[ids] * self.gamma + reward[t])
            self._returns[ids] = g
            values.append(g[~first[t]])
        if not values:
            return reward.reshape(-1)
        return torch.cat(values)


@configurable
class RewardScaling(DataTransformer):
    """Multiplies rewards by a constant ``scale`` (for training only, like
    :class:`RewardNormalizer`).

    Args:
        observation_spec: nest of specs of the observations (unchanged).
        scale: the factor.
    """

    def __init__(self, *, observation_spec: Any, scale: float) -> None:
        super().__init__(observation_spec=observation_spec)
        self.scale = float(scale)

    def _transform(self, batch: Batch) -> Batch:
        return batch._replace(reward=batch.reward * self.scale)
