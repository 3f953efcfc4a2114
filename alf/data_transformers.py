"""Data transformers: observation and reward preprocessing shared by collection and training.

A transformer is applied in two places, with the same result for the same step:

- on the policy's path (:meth:`DataTransformer.transform_timestep`): each time step the
  unrollers, the evaluator and ``play`` give to ``rollout_step``/``predict_step``;
- on training batches (:meth:`DataTransformer.transform_experience`): the unrolled
  trajectory of an on-policy algorithm, or a mini-batch sampled from a replay buffer.

Collected experience (the replay buffer, the actors' fragments) always holds the *raw*
time steps: stacked frames are never stored, and a normalizer's statistics can change
without invalidating stored data. A transformer that needs earlier steps (the
:class:`FrameStacker`) declares :attr:`~DataTransformer.history_length`: training batches
then carry that many extra leading rows, which the transformer consumes.

Statistics (:class:`ObservationNormalizer`, :class:`RewardNormalizer`) are buffers of the
algorithm module, so checkpoints save them, a resumed run and ``play`` restore them, and
async actors receive them with the published parameters. They are updated on the learner
only, after transforming a batch (the batch itself is transformed with the statistics the
policy saw while collecting it), from new rollouts (``update_mode="rollout"``) or from
sampled replay batches (``update_mode="replay"``, off-policy algorithms).

Configure them as a list, applied in order::

    TrainerConfig.data_transformer_ctor = [@ImageScale, @FrameStacker]
    FrameStacker.stack_size = 4
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from alf import nest
from alf.config import configurable
from alf.data_structures import Experience, StepType, TimeStep
from alf.tensor_specs import BoundedTensorSpec, TensorSpec

__all__ = [
    "DataTransformer",
    "DataTransformerChain",
    "FrameStacker",
    "ImageScale",
    "ObservationNormalizer",
    "RewardNormalizer",
    "RewardScaling",
    "RunningMeanStd",
    "build_data_transformer",
]

UPDATE_MODES = ("rollout", "replay")

Batch = TimeStep | Experience
"""Both carry ``step_type``, ``reward`` and ``observation``; transformers change only the
last two."""


class DataTransformer(nn.Module):
    """Base class: the identity.

    Subclasses override :meth:`_transform` for elementwise transforms (the same function
    of a ``[B]`` time step and of a ``[T, B]`` batch), or the two ``transform_*`` methods.

    Args:
        observation_spec: nest of specs of the observations it receives.
    """

    history_length: int = 0
    """Leading rows a training batch must carry for :meth:`transform_experience`."""

    update_mode: str | None = None
    """``"rollout"`` or ``"replay"`` for transformers with statistics, else None."""

    def __init__(self, *, observation_spec: Any) -> None:
        super().__init__()
        self.observation_spec = observation_spec

    @property
    def transformed_observation_spec(self) -> Any:
        """Specs of the observations it produces (what the algorithm is built for)."""
        return self.observation_spec

    @property
    def state_spec(self) -> Any:
        """Specs of the per-environment state of :meth:`transform_timestep`."""
        return ()

    def initial_state(self, batch_size: int) -> Any:
        """The state before the first step of ``batch_size`` environments."""
        return nest.map_structure(lambda s: s.zeros((batch_size,)), self.state_spec)

    def transform_timestep(self, time_step: TimeStep, state: Any) -> tuple[TimeStep, Any]:
        """Transforms a ``[B]`` time step for the policy; never updates statistics."""
        return self._transform(time_step), state

    def transform_experience(self, exp: Experience) -> Experience:
        """Transforms a time-major ``[history_length + T, B]`` batch (its first
        :attr:`history_length` rows only as history) into ``[T, B]``; never updates
        statistics (:class:`DataTransformerChain` does, after transforming)."""
        return self._transform(exp)

    def update_statistics(self, exp: Experience) -> None:  # noqa: B027 - optional hook
        """Updates statistics from a batch of its inputs (none by default)."""

    def _transform(self, batch: Batch) -> Batch:
        return batch


class DataTransformerChain(DataTransformer):
    """Applies transformers in order (an empty chain is the identity).

    Args:
        transformers: the transformers; each one's observation spec is the previous
            one's transformed spec.
        observation_spec: spec of the raw observations.
    """

    def __init__(self, *, transformers: Sequence[DataTransformer], observation_spec: Any) -> None:
        super().__init__(observation_spec=observation_spec)
        self.transformers = nn.ModuleList(transformers)
        self.history_length = sum(t.history_length for t in transformers)

    @property
    def is_identity(self) -> bool:
        """Whether the chain is empty (collection then skips it entirely)."""
        return len(self.transformers) == 0

    @property
    def transformed_observation_spec(self) -> Any:
        if self.is_identity:
            return self.observation_spec
        return self.transformers[-1].transformed_observation_spec

    @property
    def state_spec(self) -> Any:
        return tuple(t.state_spec for t in self.transformers)

    def has_update_mode(self, mode: str) -> bool:
        """Whether any transformer updates its statistics from batches of ``mode``."""
        return any(t.update_mode == mode for t in self.transformers)

    def transform_timestep(self, time_step: TimeStep, state: Any) -> tuple[TimeStep, Any]:
        new_state = []
        for transformer, s in zip(self.transformers, state, strict=True):
            time_step, s = transformer.transform_timestep(time_step, s)
            new_state.append(s)
        return time_step, tuple(new_state)

    def transform_experience(self, exp: Experience, *, update: str | None = None) -> Experience:
        """Transforms a ``[history_length + T, B]`` batch into ``[T, B]``.

        Args:
            exp: the batch, its first :attr:`history_length` rows only as history.
            update: ``"rollout"`` or ``"replay"``: the batch's origin; transformers whose
                :attr:`update_mode` matches update their statistics from its own rows
                (not the history rows) *after* transforming it.
        """
        batch_info = exp.batch_info
        exp = exp._replace(batch_info=())
        history = self.history_length  # history rows still in ``exp``
        for transformer in self.transformers:
            out = transformer.transform_experience(exp)
            if update is not None and update == transformer.update_mode:
                # Statistics come from the batch's own steps, not its history rows.
                transformer.update_statistics(nest.map_structure(lambda x, h=history: x[h:], exp))
            history -= transformer.history_length
            exp = out
        return exp._replace(batch_info=batch_info)

    def fit_fresh_statistics(self, batches: Sequence[Experience]) -> list[str]:
        """Starts the statistics of the transformers that have seen no data yet (a new
        :class:`ObservationNormalizer`, or :class:`RewardNormalizer` unless
        ``return_based``) from whole time-major ``[T, B]`` batches, e.g. every step of
        an offline dataset before training on it (offline RL normalises with the
        dataset's moments). Each one learns from the output of the transformers before
        it (themselves fitted first).

        Returns:
            The names of the transformers fitted (empty if none was fresh).
        """
        fresh = [_is_fresh(t) for t in self.transformers]
        if not any(fresh):
            return []
        for exp in batches:
            exp = exp._replace(batch_info=())
            for transformer, is_fresh in zip(self.transformers, fresh, strict=True):
                if is_fresh:
                    transformer.update_statistics(exp)
                exp = transformer.transform_experience(exp)
        return [type(t).__name__ for t, f in zip(self.transformers, fresh, strict=True) if f]

    def set_sum_over_ranks(self, fn: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        """Makes every running statistic of the chain combine all ranks' batches (see
        :attr:`RunningMeanStd.sum_over_ranks`); the trainer sets it in data-parallel runs."""
        for module in self.modules():
            if isinstance(module, RunningMeanStd):
                module.sum_over_ranks = fn

    def pad_history(self, exp: Experience) -> Experience:
        """Prepends :attr:`history_length` copies of row 0 to a ``[T, B]`` batch that has
        no history (its row 0 must be FIRST for frame stacking to be exact)."""
        h = self.history_length
        if h == 0:
            return exp
        batch_info = exp.batch_info
        exp = nest.map_structure(
            lambda x: torch.cat([x[:1].expand(h, *x.shape[1:]), x]), exp._replace(batch_info=())
        )
        return exp._replace(batch_info=batch_info)


def build_data_transformer(
    ctors: Sequence[Callable[..., DataTransformer]] | None, observation_spec: Any
) -> DataTransformerChain:
    """Builds ``ctors`` (each called as ``ctor(observation_spec=...)``) into a chain."""
    transformers: list[DataTransformer] = []
    spec = observation_spec
    for ctor in ctors or ():
        transformer = ctor(observation_spec=spec)
        if not isinstance(transformer, DataTransformer):
            raise TypeError(
                f"TrainerConfig.data_transformer_ctor: {ctor} built "
                f"{type(transformer).__name__}, not a DataTransformer"
            )
        transformers.append(transformer)
        spec = transformer.transformed_observation_spec
    return DataTransformerChain(transformers=transformers, observation_spec=observation_spec)


def _is_fresh(transformer: DataTransformer) -> bool:
    """Whether ``transformer`` has statistics of single steps (not of running returns)
    and none has seen data yet."""
    if getattr(transformer, "return_based", False):
        return False
    stats = [m for m in transformer.modules() if isinstance(m, RunningMeanStd)]
    return bool(stats) and all(float(m.count) == 0.0 for m in stats)


def _check_update_mode(update_mode: str) -> str:
    if update_mode not in UPDATE_MODES:
        raise ValueError(f"update_mode must be one of {UPDATE_MODES}, got '{update_mode}'")
    return update_mode


class RunningMeanStd(nn.Module):
    """Running mean and variance of a tensor's elements over batches (float64 buffers).

    Args:
        shape: shape of one element.
    """

    def __init__(self, *, shape: Sequence[int]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(tuple(shape), dtype=torch.float64))
        self.register_buffer("var", torch.ones(tuple(shape), dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.sum_over_ranks: Callable[[torch.Tensor], torch.Tensor] | None = None
        """Set in data-parallel runs: sums a float64 tensor over the ranks, so that every
        rank adds the moments of all ranks' batches (and the statistics stay identical)."""

    def update(self, x: torch.Tensor) -> None:
        """Adds the elements of ``x`` (``[N, *shape]``) to the statistics (in a
        data-parallel run, those of every rank's ``x``: a collective)."""
        x = x.detach().reshape(-1, *self.mean.shape).to(torch.float64)
        n = x.shape[0]
        if self.sum_over_ranks is not None:
            n, batch_mean, batch_var = self._moments_over_ranks(x)
        elif n:
            batch_mean = x.mean(0)
            batch_var = x.var(0, unbiased=False)
        if n == 0:
            return
        total = self.count + n
        delta = batch_mean - self.mean
        # Chan et al.'s parallel combination of two sets' moments.
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def _moments_over_ranks(self, x: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        # Sums (count, sum, sum of squares) travel, and are turned back into moments.
        size = self.mean.numel()
        local = torch.cat(
            [
                torch.tensor([float(x.shape[0])], dtype=torch.float64),
                x.sum(0).reshape(-1).cpu(),
                (x * x).sum(0).reshape(-1).cpu(),
            ]
        )
        total = self.sum_over_ranks(local).to(self.mean.device)
        n = float(total[0])
        if n == 0:
            return 0, self.mean, self.var
        mean = (total[1 : 1 + size] / n).reshape(self.mean.shape)
        var = (total[1 + size :] / n).reshape(self.mean.shape) - mean**2
        return n, mean, var.clamp(min=0.0)

    def normalize(self, x: torch.Tensor, *, center: bool, clip: float | None) -> torch.Tensor:
        """``(x - mean) / std`` (or ``x / std`` without ``center``), clipped, float32."""
        std = torch.sqrt(self.var + 1e-8).to(torch.float32)
        y = x.to(torch.float32)
        if center:
            y = y - self.mean.to(torch.float32)
        y = y / std
        return y.clamp(-clip, clip) if clip is not None else y


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
        self.update_mode = _check_update_mode(update_mode)
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
        self.update_mode = _check_update_mode(update_mode)
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
