"""What every intrinsic reward (curiosity bonus) gives the algorithms that use it.

An :class:`IntrinsicReward` is a module the RL algorithm *holds* (composition: PPO, APPO
and A2C take ``intrinsic_reward_ctor``, SAC too). It scores transitions ``(s, a, s')``
with a bonus (without gradient) and gives the per-transition losses that train its own
models, which the algorithm adds to its loss so that they are trained by the same
optimizer step, on the learner, and saved in the same checkpoints (the module's
parameters and statistics are in the algorithm's ``state_dict``).

The observation the bonus sees is the whole observation if it is one tensor, or the
entry ``observation_key`` of a ``Dict`` observation (e.g. MiniGrid's ``"image"``). What
cannot be encoded (a ``Dict`` without ``observation_key``, a key that is not there) is an
:class:`IntrinsicRewardError`: a :class:`~alf.errors.UserError`, so ``alf.bin.train``
prints its one line and exits with status 2.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from alf import nest
from alf.algorithms.intrinsic.normalizers import ReturnNormalizer
from alf.data_structures import Experience, StepType
from alf.errors import UserError
from alf.networks.conv_encoder import ConvLayerParams
from alf.tensor_specs import BoundedTensorSpec, TensorSpec, describe_spec
from alf.utils.schedules import Schedule, as_schedule

__all__ = ["IntrinsicReward", "IntrinsicRewardError", "bonus_input_spec", "select_input"]


class IntrinsicRewardError(UserError, ValueError):
    """An intrinsic reward was configured for an observation or action it cannot encode
    (the message names the reward, the observation and the setting to change)."""


def _describe(spec: Any) -> str:
    if isinstance(spec, dict):
        return "Dict(" + ", ".join(f"{k}: {_describe(v)}" for k, v in spec.items()) + ")"
    if isinstance(spec, (tuple, list)):
        return "Tuple(" + ", ".join(_describe(v) for v in spec) + ")"
    if isinstance(spec, BoundedTensorSpec):
        return (
            describe_spec(spec)
            if spec.is_discrete and spec.shape == ()
            else (f"Box(shape={spec.shape}, dtype={str(spec.dtype).removeprefix('torch.')})")
        )
    if isinstance(spec, TensorSpec):
        return f"Box(shape={spec.shape}, dtype={str(spec.dtype).removeprefix('torch.')})"
    return repr(spec)


def bonus_input_spec(owner: str, observation_spec: Any, observation_key: str | None) -> TensorSpec:
    """The spec of what the bonus of ``owner`` encodes: the observation itself (one
    tensor) when ``observation_key`` is None, else the ``Dict`` observation's entry
    ``observation_key``.

    Raises:
        IntrinsicRewardError: the observation is a nest of several tensors and no
            ``observation_key`` is given; ``observation_key`` names no entry of a ``Dict``
            observation, or is given for an observation that is not a ``Dict``; the
            chosen entry is itself a nest.
    """
    described = _describe(observation_spec)
    if observation_key is not None:
        if not isinstance(observation_spec, dict):
            raise IntrinsicRewardError(
                f"{owner}.observation_key='{observation_key}' needs a Dict observation, got "
                f"{described}; leave it None"
            )
        if observation_key not in observation_spec:
            raise IntrinsicRewardError(
                f"{owner}.observation_key='{observation_key}' is not an entry of the "
                f"observation {described}; choose one of {sorted(observation_spec)}"
            )
        spec = observation_spec[observation_key]
        where = f"the entry '{observation_key}' ({_describe(spec)})"
    else:
        spec = observation_spec
        where = f"the observation {described}"
    if isinstance(spec, TensorSpec):
        return spec
    leaves = nest.flatten(spec)
    if isinstance(spec, dict) and observation_key is None:
        hint = (
            f"set {owner}.observation_key to the entry whose novelty counts (one of {sorted(spec)})"
        )
    else:
        hint = "give it one tensor (e.g. wrap the environment with FlattenObservation)"
    raise IntrinsicRewardError(
        f"{owner} cannot encode {where}: it is a nest of {len(leaves)} tensors, and {owner} "
        f"encodes one tensor; {hint}"
    )


def select_input(observation: Any, observation_key: str | None) -> torch.Tensor:
    """The tensor of ``observation`` that the bonus encodes (see :func:`bonus_input_spec`)."""
    return observation if observation_key is None else observation[observation_key]


def flat_float(x: torch.Tensor) -> torch.Tensor:
    """``[N, ...]`` -> ``[N, numel]`` float32."""
    return x.reshape(x.shape[0], -1).to(torch.float32)


class IntrinsicReward(nn.Module):
    """The base of the curiosity bonuses (:class:`~alf.algorithms.intrinsic.RNDReward`,
    :class:`~alf.algorithms.intrinsic.ICMReward`).

    Subclasses implement :meth:`bonus` and :meth:`losses` (and may override
    :meth:`observe` and :meth:`training_inputs`). The algorithm calls, on the learner:

    * on-policy (PPO, APPO, A2C): :meth:`trajectory_bonus` on each ``[T+1, B]``
      trajectory (which calls :meth:`observe`, then :meth:`bonus` on its transitions and
      :meth:`normalize`), then :meth:`losses` in every update on the mini-batch's
      observations, actions and :meth:`training_inputs`;
    * off-policy (SAC): :meth:`observe`, :meth:`bonus` and :meth:`losses` on each sampled
      batch.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: spec of one action.
        observation_key: None: the bonus sees the observation, which must be one tensor.
            A string: the entry of a ``Dict`` observation it sees (e.g. ``"image"``).
        int_coef: the weight of the intrinsic advantage (on-policy) or of the bonus added
            to the reward (SAC): a number, or a :class:`~alf.utils.schedules.Schedule` of
            training progress (e.g. ``@LinearSchedule(start=1.0)``: curiosity fading to
            0 by the end of the run), followed through :meth:`set_progress`.
        ext_coef: the weight of the extrinsic advantage (on-policy; SAC ignores it).
        gamma: the intrinsic discount: of the intrinsic returns (on-policy) and of the
            discounted sums whose std normalises the bonus.
        normalize_reward: divide the bonus by the running std of its discounted sums
            (on-policy: :class:`ReturnNormalizer`; SAC, whose batches are not in time
            order: by the running std of the bonus itself). False: the raw bonus.
        conv_layer_params: the convolutions of the bonus's networks: not empty, they
            take the ``[C, H, W]`` image as it is; empty, the flattened observation
            (:attr:`network_input_spec`).
    """

    name: str = "intrinsic"
    """The prefix of the summaries' names (``intrinsic/<name>_...``)."""

    loss_weights: dict[str, float]
    """The weight of each entry of :meth:`losses` in the algorithm's loss."""

    def __init__(
        self,
        *,
        observation_spec: Any,
        action_spec: Any,
        observation_key: str | None,
        int_coef: float | Schedule,
        ext_coef: float,
        gamma: float,
        normalize_reward: bool,
        conv_layer_params: ConvLayerParams,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.input_spec = bonus_input_spec(owner, observation_spec, observation_key)
        self.observation_key = observation_key
        self.action_spec = action_spec
        self._int_coef_schedule = as_schedule(int_coef)
        self.int_coef = self._int_coef_schedule(0.0)
        """The current weight of the intrinsic reward (see ``int_coef``)."""
        if self.int_coef < 0:
            raise IntrinsicRewardError(f"{owner}.int_coef must be >= 0, got {self.int_coef}")
        self.ext_coef = float(ext_coef)
        if not 0.0 <= gamma < 1.0:
            raise IntrinsicRewardError(
                f"{owner}.gamma={gamma}: the intrinsic discount must be in [0, 1)"
            )
        self.gamma = float(gamma)
        self.normalize_reward = normalize_reward
        self.reward_normalizer = ReturnNormalizer(gamma=gamma)
        shape = tuple(self.input_spec.shape)
        if conv_layer_params and len(shape) != 3:
            raise IntrinsicRewardError(
                f"{owner}.conv_layer_params needs a [C, H, W] image observation, got the "
                f"shape {shape}; leave it () to encode the flattened observation"
            )
        self._image = bool(conv_layer_params)
        self.network_input_spec = TensorSpec(
            shape if self._image else (max(self.input_spec.numel, 1),)
        )
        """The spec of what the bonus's networks take (see :meth:`network_input`)."""

    def set_progress(self, progress: float) -> None:
        """Sets :attr:`int_coef` to its schedule's value at ``progress`` (``0..1``)."""
        self.int_coef = self._int_coef_schedule(progress)

    # ---------------------------------------------------------------- to implement
    def bonus(self, observation: Any, action: Any, next_observation: Any) -> torch.Tensor:
        """The raw ``[N]`` bonus of ``N`` transitions (observation nests of ``[N, ...]``),
        without gradient."""
        raise NotImplementedError

    def losses(self, observation: Any, action: Any, inputs: Any) -> dict[str, torch.Tensor]:
        """The per-transition ``[N]`` losses that train the bonus's models, with gradient,
        by name (weighted by :attr:`loss_weights` in the algorithm's loss).

        Args:
            observation: nest of ``[N, ...]`` observations ``s``.
            action: ``[N, ...]`` actions ``a``.
            inputs: what :meth:`training_inputs` kept for these rows (e.g. ``s'``).
        """
        raise NotImplementedError

    def observe(self, observation: Any) -> None:  # noqa: B027 - optional hook
        """Updates statistics of the observations (``[N, ...]`` nests); default: none."""

    def training_inputs(self, exp: Experience) -> Any:
        """What :meth:`losses` needs beyond a step's observation and action, for the first
        ``T`` rows of a ``[T+1, B]`` trajectory (nest of ``[T, B, ...]``); default: ``()``."""
        return ()

    # ------------------------------------------------------------------- provided
    def select(self, observation: Any) -> torch.Tensor:
        """The tensor of ``observation`` the bonus encodes."""
        return select_input(observation, self.observation_key)

    def network_input(self, selected: torch.Tensor) -> torch.Tensor:
        """The ``[N, ...]`` tensor :meth:`select` chose, as the networks take it: the
        float image when they convolve, else flattened to ``[N, D]`` floats."""
        return selected.to(torch.float32) if self._image else flat_float(selected)

    @torch.no_grad()
    def trajectory_bonus(self, exp: Experience) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The normalised ``[T, B]`` bonus of a ``[T+1, B]`` trajectory's transitions (row
        ``t``: from row ``t`` to ``t + 1``; 0 where row ``t`` is LAST, whose action the
        environment ignored) and its statistics for the summaries."""
        self.observe(nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:]), exp.observation))
        length, batch = exp.step_type.shape
        steps = length - 1

        def rows(x: torch.Tensor, first: int) -> torch.Tensor:
            return x[first : first + steps].reshape(steps * batch, *x.shape[2:])

        raw = self.bonus(
            nest.map_structure(lambda x: rows(x, 0), exp.observation),
            nest.map_structure(lambda x: rows(x, 0), exp.action),
            nest.map_structure(lambda x: rows(x, 1), exp.observation),
        ).reshape(steps, batch)
        raw = raw * (exp.step_type[:-1] != StepType.LAST).to(raw.dtype)
        bonus = self.reward_normalizer(raw) if self.normalize_reward else raw
        return bonus, self.bonus_statistics(raw, bonus)

    @torch.no_grad()
    def batch_bonus(self, raw: torch.Tensor) -> torch.Tensor:
        """A sampled batch's raw bonus divided by the running std of the raw bonus (with
        ``normalize_reward``; SAC's batches are not in time order)."""
        if not self.normalize_reward:
            return raw
        stats = self.reward_normalizer.returns
        stats.update(raw.reshape(-1))
        return raw / stats.std.to(raw.dtype)

    def bonus_statistics(self, raw: torch.Tensor, bonus: torch.Tensor) -> dict[str, torch.Tensor]:
        """``intrinsic/bonus_raw_mean``, ``intrinsic/bonus_mean``, ``intrinsic/bonus_max``
        and ``intrinsic/bonus_scale``: the std the raw bonus was divided by (of the
        discounted intrinsic returns on-policy, of the raw bonus itself in SAC; 1 without
        ``normalize_reward``)."""
        scale = (
            self.reward_normalizer.returns.std.to(torch.float32)
            if self.normalize_reward
            else raw.new_ones((), dtype=torch.float32)
        )
        return {
            "intrinsic/bonus_raw_mean": raw.mean(),
            "intrinsic/bonus_mean": bonus.mean(),
            "intrinsic/bonus_max": bonus.max(),
            "intrinsic/bonus_scale": scale,
        }

    def weighted_loss(
        self, losses: dict[str, torch.Tensor], mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The weighted sum of the means of :meth:`losses`' entries (over the rows where
        ``mask`` is 1, or all rows) and each mean, without gradient, named
        ``intrinsic/<entry>`` for the summaries."""
        terms: list[torch.Tensor] = []
        extra: dict[str, torch.Tensor] = {}
        for name, per_row in losses.items():
            if mask is None:
                mean = per_row.mean()
            else:
                mean = (per_row * mask).sum() / mask.sum().clamp(min=1.0)
            terms.append(self.loss_weights[name] * mean)
            extra[f"intrinsic/{name}"] = mean.detach()
        # summed from the first term: no CPU scalar inside a compiled (CUDA-graph) loss
        return torch.stack(terms).sum(), extra
