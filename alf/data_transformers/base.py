"""The transformer interface, the chain that applies a list of them, and its builder
(see :mod:`alf.data_transformers`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from alf import nest
from alf.data_structures import Experience, TimeStep
from alf.data_transformers.running_stats import RunningMeanStd

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


def check_update_mode(update_mode: str) -> str:
    """``update_mode`` if it is one of :data:`UPDATE_MODES`, else a ``ValueError``."""
    if update_mode not in UPDATE_MODES:
        raise ValueError(f"update_mode must be one of {UPDATE_MODES}, got '{update_mode}'")
    return update_mode
