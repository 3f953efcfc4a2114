"""What the offline RL algorithms (:mod:`~alf.algorithms.bc`, :mod:`~alf.algorithms.td3bc`,
:mod:`~alf.algorithms.iql`, :mod:`~alf.algorithms.cql`) share: the statistics of their
offline data, computed once before training, and the behaviour-cloning error.

Offline RL methods normalise with the moments of the whole dataset, not with running
statistics: :func:`prepare_offline_data` starts every data transformer that has seen
no data yet (a new :class:`~alf.data_transformers.ObservationNormalizer` or
:class:`~alf.data_transformers.RewardNormalizer`) from all the offline steps, so that
the very first update already sees normalised observations (TD3+BC's state
normalisation), and computes the reward scale that makes the episode returns of the
offline data span a given range (IQL's and CORL's reward normalisation for MuJoCo).
"""

from __future__ import annotations

from typing import Any

import torch
from absl import logging

from alf import nest
from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf.data_structures import Experience, StepType
from alf.replay_buffers import ReplayBuffer, ReplayBufferError
from alf.tensor_specs import BoundedTensorSpec, UnsupportedActionSpaceError, describe_spec

__all__ = [
    "OfflineDataError",
    "check_action_box",
    "episode_returns",
    "first_row",
    "normalized_squared_error",
    "offline_batches",
    "prepare_offline_data",
    "return_range_scale",
]


class OfflineDataError(ReplayBufferError):
    """The offline data cannot give a statistic an algorithm asked for (e.g. no whole
    episode to measure the return range of)."""


def offline_batches(algorithm: OffPolicyAlgorithm) -> list[Experience]:
    """Every step of the algorithm's offline buffers: one time-major ``[T, B]`` batch
    per buffer (raw, as stored), on the CPU: a saved replay buffer's
    ``gather_all()`` (``B`` its environments), a dataset's ``experience()`` (its
    episodes one after the other, ``B = 1``).

    Raises:
        ReplayBufferError: a buffer whose environments hold different numbers of steps.
    """
    return [
        buffer.gather_all() if isinstance(buffer, ReplayBuffer) else buffer.experience()
        for buffer in algorithm.replay.offline
    ]


def episode_returns(exp: Experience) -> torch.Tensor:
    """The undiscounted returns of the whole episodes (a FIRST step, through its LAST
    one) in a time-major ``[T, B]`` batch, as a 1-d float64 tensor (in no particular
    order). An episode cut by either end of the batch is left out."""
    step_type, reward = exp.step_type, exp.reward.to(torch.float64)
    returns = []
    for column in range(step_type.shape[1]):
        kinds = step_type[:, column]
        starts = (kinds == StepType.FIRST).nonzero().flatten()
        ends = (kinds == StepType.LAST).nonzero().flatten()
        following = torch.searchsorted(ends, starts, right=True)  # each start's LAST
        whole = following < ends.numel()
        following = following.clamp(max=max(ends.numel() - 1, 0))
        if ends.numel():  # ... before the next FIRST (else the episode has no end here)
            next_start = torch.cat([starts[1:], torch.tensor([kinds.numel()])])
            whole &= ends[following] < next_start
        sums = torch.cumsum(reward[:, column], 0)
        # The rewards of the steps after FIRST, through LAST.
        if ends.numel():
            returns.append(sums[ends[following[whole]]] - sums[starts[whole]])
    if not returns:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat(returns)


def return_range_scale(batches: list[Experience], return_range: float) -> float:
    """The factor that scales rewards so that the episode returns of ``batches`` span
    ``return_range`` (max minus min), as the IQL paper and CORL normalise MuJoCo
    rewards with 1000.

    Raises:
        OfflineDataError: fewer than two whole episodes, or all of equal return.
    """
    returns = torch.cat([episode_returns(exp) for exp in batches])
    spread = float(returns.max() - returns.min()) if returns.numel() >= 2 else 0.0
    if spread <= 0.0:
        raise OfflineDataError(
            f"cannot scale rewards to a return range: the offline data holds "
            f"{returns.numel()} whole episode(s) with a return spread of {spread:g}; set "
            "return_range = None to train on the rewards as they are"
        )
    return return_range / spread


def _fit_fresh_transformers(algorithm: OffPolicyAlgorithm, batches: list[Experience]) -> None:
    transformer = algorithm.data_transformer
    fitted = transformer.fit_fresh_statistics(batches)
    if fitted:
        logging.info(
            "Data transformers %s start from the statistics of the offline data (%d steps)",
            ", ".join(fitted),
            sum(exp.step_type.numel() for exp in batches),
        )


def prepare_offline_data(algorithm: OffPolicyAlgorithm, *, return_range: float | None) -> float:
    """Starts the algorithm's fresh data transformers from its offline data and returns
    the reward scale of ``return_range`` (see :func:`return_range_scale`; 1.0 when it
    is None), measured on the transformed rewards. Nothing to do without offline data
    (then 1.0).

    Raises:
        OfflineDataError: ``return_range`` is set and the data cannot give it.
    """
    if not algorithm.replay.offline:
        return 1.0
    try:
        batches = offline_batches(algorithm)
    except ReplayBufferError as err:
        if return_range is not None:
            raise OfflineDataError(f"cannot read the offline data as episodes: {err}") from err
        logging.warning("Data transformers keep their own statistics: %s", err)
        return 1.0
    _fit_fresh_transformers(algorithm, batches)
    if return_range is None:
        return 1.0
    transformer = algorithm.data_transformer
    with torch.no_grad():
        transformed = [transformer.transform_experience(exp) for exp in batches]
    scale = return_range_scale(transformed, return_range)
    logging.info("Rewards are scaled by %.6g (offline returns span %g)", scale, return_range)
    return scale


def normalized_squared_error(
    action: torch.Tensor, target: torch.Tensor, half_range: torch.Tensor
) -> torch.Tensor:
    """``[B]`` mean over action elements of the squared difference of two ``[B, ...]``
    continuous actions in units of half the action range (so ``[-1, 1]`` actions, as
    behaviour-cloning terms are written, whatever the bounds)."""
    error = ((action - target) / half_range) ** 2
    return error.reshape(error.shape[0], -1).mean(-1)


def first_row(value: Any) -> Any:
    """Row 0 of every leaf of a sampled ``[L, B, ...]`` nest (the transitions' start)."""
    return nest.map_structure(lambda x: x[0], value)


def check_action_box(owner: str, action_spec: Any) -> None:
    """Raises :class:`~alf.tensor_specs.UnsupportedActionSpaceError` naming ``owner``
    unless ``action_spec`` is one continuous (Box) spec."""
    if not isinstance(action_spec, BoundedTensorSpec) or action_spec.is_discrete:
        raise UnsupportedActionSpaceError(
            f"{owner} supports only a Box action space, got {describe_spec(action_spec)}; "
            "use BcAlgorithm or DiscreteCqlAlgorithm for discrete actions offline"
        )
