"""``OffPolicyAlgorithm``: learns from sequences sampled out of a replay buffer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn
from absl import logging
from torch.func import functional_call

from alf import nest
from alf.algorithms.algorithm import was_skipped
from alf.algorithms.on_policy_algorithm import summarize_updates
from alf.algorithms.rl_algorithm import LearningSetup, RLAlgorithm
from alf.config import invalid_value
from alf.data_structures import Experience, LossInfo, StepType, Trajectory
from alf.datasets import DatasetError, load_datasets
from alf.networks import state_spec_of
from alf.networks.action_mask import ActionMask, ActionMaskError
from alf.replay_buffers import MixedReplay, OfflineBuffer, ReplayBuffer, ReplayBufferError
from alf.replay_buffers.offline import load_offline_buffers
from alf.tensor_specs import TensorSpec
from alf.utils.device import to_device
from alf.utils.target_update import make_target
from alf.utils.value_ops import n_step_return

__all__ = [
    "OffPolicyAlgorithm",
    "bootstrap_observations",
    "build_encoder",
    "critic_loss",
    "detached_call",
    "encode_step",
    "encoder_state_spec",
    "masked_mean",
    "n_step_target",
    "valid_transitions",
]


def build_encoder(
    owner: str,
    encoder_ctor: Callable[..., nn.Module] | None,
    observation_spec: Any,
    action_spec: Any,
) -> tuple[nn.Module | None, nn.Module | None, Any]:
    """The recurrent observation encoder of an off-policy algorithm (``encoder_ctor``), its
    target copy, and the spec of what the networks after it see (the observation's spec
    without an encoder).

    Raises:
        ActionMaskError: the observation carries an action mask, which the encoder would
            hide from the networks that apply it.
    """
    if encoder_ctor is None:
        return None, None, observation_spec
    mask = ActionMask(owner=owner, input_spec=observation_spec, action_spec=action_spec)
    if mask.active:
        raise ActionMaskError(
            f"{owner}: action masks with a recurrent encoder (encoder_ctor) are not supported yet"
        )
    encoder = encoder_ctor(input_spec=observation_spec)
    return encoder, make_target(encoder), TensorSpec((int(encoder.output_size),))


def encoder_state_spec(encoder: nn.Module | None) -> Any:
    """The state spec of an encoder from :func:`build_encoder` (``()`` without one)."""
    return () if encoder is None else state_spec_of(encoder)


def encode_step(encoder: nn.Module | None, observation: Any, state: Any) -> tuple[Any, Any]:
    """One step of the encoder (the observation itself without one) and its new state."""
    if encoder is None:
        return observation, state
    return encoder.step(observation, state)


class OffPolicyAlgorithm(RLAlgorithm):
    """Stores every collected step in a :class:`ReplayBuffer` and trains on samples.

    Each training iteration runs ``num_updates_per_train_iter`` updates. An update
    samples ``mini_batch_size`` sequences of ``mini_batch_length`` consecutive steps
    (time-major ``[mini_batch_length, mini_batch_size]``, with ``batch_info`` set) and
    calls ``train_step(exp, (), exp.rollout_info)``, ``calc_loss`` and
    ``update_with_gradient``. ``mini_batch_length`` is ``n + 1`` for n-step targets
    (2 for one-step TD). With a prioritized buffer, the ``priority`` of ``calc_loss``'s
    :class:`LossInfo` updates the sampled sequences' priorities, and the losses should be
    weighted by ``exp.batch_info.importance_weights``.

    The buffer and any offline buffers are held by a
    :class:`~alf.replay_buffers.mixed_replay.MixedReplay` (:attr:`replay`), which mixes
    them into every mini-batch and says when training may start. With offline buffers
    (:meth:`set_offline_buffers`: earlier runs' saved buffers, ``offline_buffer_dir``, and
    datasets, ``offline_dataset``), ``offline_fraction`` of every mini-batch comes from
    them and the rest from the online buffer (1.0: offline only). An algorithm that
    learns from offline data alone sets :attr:`needs_offline_data`.

    Recurrent algorithms (non-empty ``train_state_spec``; R2D2-style): the buffer stores
    the state given to ``rollout_step`` with every step; sampled sequences are
    ``burn_in + mini_batch_length`` steps long and ``train_step(exp, state,
    rollout_info)`` receives the whole ``[burn_in + mini_batch_length, B]`` batch with
    ``state`` the state stored with its first row. The algorithm runs its networks along
    the first ``burn_in`` rows without gradient (:meth:`burn_in_state`) to refresh that
    stale state, and computes its loss on the remaining rows.

    :meth:`prepare_learning` creates the buffer (:meth:`build_replay_buffer`) once the
    number of environments is known, and loads the offline buffers; its size and
    sampling are configured on :class:`ReplayBuffer` (``ReplayBuffer.max_length``,
    ``ReplayBuffer.prioritized``...). :meth:`learn` stores each collected trajectory's
    new steps and, once ``initial_collect_steps`` are stored, trains on samples.

    Args:
        mini_batch_size: sequences per update (an int >= 1; unlike on-policy
            algorithms there is no whole batch, so no None).
        mini_batch_length: steps per sequence (an int >= 2).
        num_updates_per_train_iter: updates per training iteration (an int >= 1).
        burn_in: recurrent algorithms only: steps at the start of every sampled sequence
            that only warm up the recurrent state (no loss); an int >= 0.
        replay_buffer_ctor: called as ``replay_buffer_ctor(data_spec=..., num_envs=...)``.
        **kwargs: passed to :class:`RLAlgorithm`.
    """

    def __init__(
        self,
        *,
        mini_batch_size: int = 256,
        mini_batch_length: int = 2,
        num_updates_per_train_iter: int = 1,
        burn_in: int = 0,
        replay_buffer_ctor: Callable[..., ReplayBuffer] = ReplayBuffer,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        minimums = {
            "mini_batch_size": (mini_batch_size, 1),
            "mini_batch_length": (mini_batch_length, 2),
            "num_updates_per_train_iter": (num_updates_per_train_iter, 1),
            "burn_in": (burn_in, 0),
        }
        for name, (value, minimum) in minimums.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise invalid_value(f"{type(self).__name__}.{name}", value, f"an int >= {minimum}")
        self.mini_batch_size = mini_batch_size
        self.mini_batch_length = mini_batch_length
        self.num_updates_per_train_iter = num_updates_per_train_iter
        self.burn_in = burn_in
        self._replay_buffer_ctor = replay_buffer_ctor
        self._replay: MixedReplay | None = None
        self._setup: LearningSetup | None = None

    needs_every_step = True

    needs_offline_data: bool = False
    """Whether the algorithm cannot learn without offline data (the offline-RL
    algorithms: BC, TD3+BC, IQL, CQL set it True): :meth:`prepare_learning` refuses a
    run with neither ``TrainerConfig.offline_dataset`` nor ``offline_buffer_dir``."""

    # ------------------------------------------------- learning from collection
    def prepare_learning(self, setup: LearningSetup) -> None:
        """Builds the replay buffer for ``setup.num_envs`` environments and loads the
        offline buffers of ``setup.offline_buffer_dirs`` and the datasets of
        ``setup.offline_datasets`` (checked against this algorithm's specs).

        Raises:
            ValueError: a replay-buffer checkpoint in a data-parallel run, or
                ``offline_fraction=1.0`` without offline data.
            CheckpointError: an offline buffer that cannot be read or does not fit.
            DatasetError: a dataset that cannot be read or does not fit, or no offline
                data for an algorithm that :attr:`needs_offline_data`.
        """
        self._setup = setup
        owner = type(self).__name__
        if self.burn_in and not self.is_recurrent:
            raise invalid_value(
                f"{owner}.burn_in", self.burn_in, "0 for an algorithm without recurrent state"
            )
        self.build_replay_buffer(num_envs=setup.num_envs)
        if self.is_recurrent and self.replay_buffer.prioritized:
            raise ReplayBufferError(
                f"ReplayBuffer.prioritized is not supported with recurrent networks ({owner} "
                f"has the state spec {self.train_state_spec}): sample uniformly"
            )
        if setup.data_parallel and self.replay_buffer.enable_checkpoint:
            raise ValueError(
                "ReplayBuffer.enable_checkpoint is not supported in data-parallel runs "
                "(each rank has its own replay buffer and only rank 0 writes checkpoints)"
            )
        buffers = self._load_offline_data(setup)
        if buffers:
            self.set_offline_buffers(buffers, setup.offline_fraction)
        elif self.needs_offline_data:
            raise DatasetError(
                f"{owner} learns from offline data, and the run has none: set "
                "TrainerConfig.offline_dataset (a dataset directory or a Minari dataset id) "
                "or TrainerConfig.offline_buffer_dir"
            )
        elif setup.offline_fraction >= 1.0:
            raise ValueError(
                "TrainerConfig.offline_fraction=1.0 needs offline data (offline_dataset or "
                "offline_buffer_dir)"
            )

    def _load_offline_data(self, setup: LearningSetup) -> list[OfflineBuffer]:
        """The buffers of ``setup``'s earlier runs, then of its datasets."""
        data_spec = self.replay_buffer.data_spec
        buffers: list[OfflineBuffer] = []
        if setup.offline_buffer_dirs:
            buffers += load_offline_buffers(list(setup.offline_buffer_dirs), data_spec)
        if setup.offline_datasets:
            loaded = load_datasets(
                setup.offline_datasets,
                data_spec=data_spec,
                observation_spec=self.data_transformer.observation_spec,
                action_spec=self.action_spec,
            )
            buffers += [dataset.buffer for dataset in loaded]
        return buffers

    def learn(self, trajectory: Trajectory) -> dict[str, float]:
        """Stores the trajectory's new steps, then runs :meth:`train_from_replay` if
        ``initial_collect_steps`` are stored (or training is on offline data alone) and
        a mini-batch can be sampled, on every rank."""
        for rows in trajectory.new_rows():
            self.observe_for_replay(rows)
        setup = self._setup
        if setup is None:
            raise RuntimeError("OffPolicyAlgorithm.learn() before prepare_learning()")
        ready = self.replay.is_ready(setup.initial_collect_steps)
        if setup.all_ranks_agree(ready and self.can_train()):
            return self.train_from_replay()
        return {}

    def data_checkpoint_state(self) -> Any:
        """The replay buffer's state if ``ReplayBuffer.enable_checkpoint``, else None."""
        buffer = None if self._replay is None else self._replay.online
        if buffer is None or not buffer.enable_checkpoint:
            return None
        return buffer.checkpoint_state()

    def load_data_checkpoint_state(self, state: Any) -> None:
        """Restores the saved replay buffer (if ``ReplayBuffer.enable_checkpoint``) and
        ends its stored episodes at their newest step, as truncations (the environments
        restart with new episodes; the last transitions still bootstrap).

        Without a saved buffer (``state`` None), warns that the buffer starts empty and
        how many steps it will collect before updating again."""
        buffer = self.replay_buffer
        if state is None or not buffer.enable_checkpoint:
            setup = self._setup
            wait = max(setup.initial_collect_steps if setup else 0, 1)
            logging.warning(
                "Resuming without a saved replay buffer (ReplayBuffer.enable_checkpoint is "
                "%s%s): it starts empty, and updates resume once it holds %d new steps "
                "(TrainerConfig.initial_collect_steps), collected by the current policy. "
                "ReplayBuffer.enable_checkpoint = True saves it with every checkpoint "
                "(about %.0f MB each when full).",
                buffer.enable_checkpoint,
                "" if not buffer.enable_checkpoint else ", but the checkpoint holds none",
                wait,
                buffer.nbytes / 2**20,
            )
            return
        buffer.load_checkpoint_state(state)
        buffer.overwrite_newest("step_type", StepType.LAST)

    # ----------------------------------------------------------- replay data
    def build_replay_buffer(self, *, num_envs: int) -> ReplayBuffer:
        """Creates the (empty) replay buffer for ``num_envs`` environments, without
        offline data (:meth:`set_offline_buffers` adds some)."""
        buffer = self._replay_buffer_ctor(data_spec=self.experience_spec(), num_envs=num_envs)
        self._replay = MixedReplay(online=buffer)
        return buffer

    @property
    def replay(self) -> MixedReplay:
        """The online buffer and offline data (after :meth:`build_replay_buffer`)."""
        if self._replay is None:
            raise RuntimeError("build_replay_buffer() has not been called")
        return self._replay

    @property
    def replay_buffer(self) -> ReplayBuffer:
        """The online replay buffer (after :meth:`build_replay_buffer`)."""
        return self.replay.online

    def set_offline_buffers(self, buffers: Sequence[OfflineBuffer], fraction: float) -> None:
        """Mixes ``fraction`` of every mini-batch from ``buffers`` (sampled in proportion
        to their sizes) into training; ``fraction=1`` trains on them alone. Replaces
        :attr:`replay` with a new :class:`MixedReplay` of the online buffer and ``buffers``.

        Raises:
            ValueError: no buffers, or ``fraction`` not in (0, 1].
            RuntimeError: before :meth:`build_replay_buffer`.
        """
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"offline fraction must be in (0, 1], got {fraction}")
        if not buffers:
            raise ValueError("set_offline_buffers needs at least one buffer")
        self._replay = MixedReplay(
            online=self.replay_buffer, offline=buffers, offline_fraction=fraction
        )

    def observe_for_replay(self, exp: Experience) -> None:
        """Adds a ``[T, B]`` trajectory of new (raw) steps to the replay buffer and
        updates the data transformers' ``"rollout"`` statistics from it."""
        self.replay.add(exp)
        exp = exp._replace(batch_info=())
        transformer = self.data_transformer
        if transformer.has_update_mode("rollout"):
            # Statistics from the new steps; the transformed batch itself is not needed.
            transformer.transform_experience(
                self._to_training_device(transformer.pad_history(exp)), update="rollout"
            )

    def sample_batch(self) -> tuple[Experience, int]:
        """A ``[mini_batch_length, mini_batch_size]`` batch with ``batch_info``, on
        :attr:`device` and passed through the data transformers, and the number of its
        leading sequences that came from the online buffer. A buffer with hindsight
        relabelling (``ReplayBuffer.hindsight``) anchors its goals at the first row the
        loss is computed on (after the burn-in and history rows)."""
        batch, info, num_online = self.replay.sample(
            self.mini_batch_size,
            self.sample_length,
            anchor=self.sample_length - self.mini_batch_length,
        )
        batch, info = self._to_training_device((batch, info))
        batch = self.data_transformer.transform_experience(batch, update="replay")
        return batch._replace(batch_info=info), num_online

    def _to_training_device(self, data: Any) -> Any:
        """Replay data (always on the CPU) on :attr:`device`; nothing to do, and no
        per-update traversal, when training on the CPU."""
        device = self.device
        return data if device.type == "cpu" else to_device(data, device)

    @property
    def sample_length(self) -> int:
        """Steps per sampled sequence: ``burn_in + mini_batch_length`` plus the history
        rows the data transformers consume (e.g. ``stack_size - 1`` for frame stacking)."""
        return self.burn_in + self.mini_batch_length + self.data_transformer.history_length

    @property
    def is_recurrent(self) -> bool:
        """Whether ``train_step`` starts from a stored recurrent state."""
        return bool(nest.flatten(self.train_state_spec))

    def _batch_loss(self, exp: Experience) -> LossInfo:
        state: Any = ()
        if self.is_recurrent:
            state = nest.map_structure(lambda x: x[0], exp.state)
        return self.calc_loss(self.train_step(exp, state, exp.rollout_info).info)

    def burn_in_state(
        self, network: nn.Module, exp: Experience, state: Any
    ) -> tuple[Any, Experience]:
        """Runs ``network`` (recurrent, with ``unroll``) along the first
        :attr:`burn_in` rows of a sampled batch from ``state`` without gradient.

        Returns:
            The state after the burn-in (``state`` when ``burn_in`` is 0) and the
            remaining ``[mini_batch_length, B]`` rows of ``exp``.
        """
        n = self.burn_in
        if n == 0:
            return state, exp
        with torch.no_grad():
            first = exp.step_type[:n] == StepType.FIRST
            observation = nest.map_structure(lambda x: x[:n], exp.observation)
            _, state = network.unroll(observation, state, first)
        rest = nest.map_structure(lambda x: x[n:], exp._replace(batch_info=()))
        return state, rest._replace(batch_info=exp.batch_info)

    def can_train(self) -> bool:
        """Whether a mini-batch can be sampled (enough steps stored)."""
        return self.replay.can_sample(self.sample_length)

    # -------------------------------------------------------------- training
    def train_from_replay(self) -> dict[str, float]:
        """Runs ``num_updates_per_train_iter`` updates on sampled mini-batches."""
        stats: list[dict[str, Any]] = []
        num_skipped = 0
        for _ in range(self.num_updates_per_train_iter):
            exp, num_online = self.sample_batch()
            loss_info, update = self.update_on(exp)
            # Known on the host already: update_on asked it for after_update.
            if was_skipped(update):
                num_skipped += 1
                continue
            if isinstance(loss_info.priority, torch.Tensor):
                self.replay.update_priority(exp.batch_info, loss_info.priority, num_online)
            stats.append({"loss": loss_info.loss.detach(), **loss_info.extra, **update})
        self.after_train_iter()
        return summarize_updates(stats, num_skipped)


def valid_transitions(exp: Experience) -> torch.Tensor:
    """``[B]`` float mask of sampled sequences whose first step starts a transition
    (is not LAST)."""
    return (exp.step_type[0] != StepType.LAST).to(torch.float32)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the rows where ``mask`` is 1."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def detached_call(module: nn.Module, *args: Any) -> Any:
    """Calls ``module`` with its parameters detached: gradients flow back to ``args``
    (e.g. an actor's action) but not into the module's parameters (the critic)."""
    params = {name: p.detach() for name, p in module.named_parameters()}
    return functional_call(module, params, args)


def bootstrap_observations(exp: Experience) -> Any:
    """The observations of rows ``1..n`` of a sampled ``[n+1, B]`` batch, flattened to
    ``[n*B, ...]`` (the states whose values bootstrap n-step targets)."""
    return nest.map_structure(lambda x: x[1:].reshape(-1, *x.shape[2:]), exp.observation)


def n_step_target(
    exp: Experience, values: torch.Tensor, *, gamma: float, reward_scale: float = 1.0
) -> torch.Tensor:
    """``[B]`` n-step return targets of row 0 of a sampled ``[n+1, B]`` batch, given the
    ``[n*B]`` bootstrap ``values`` of :func:`bootstrap_observations` (see
    :func:`alf.utils.value_ops.n_step_return`)."""
    values = values.reshape(exp.step_type.shape[0] - 1, -1)
    return n_step_return(
        rewards=exp.reward * reward_scale,
        discounts=exp.discount,
        step_types=exp.step_type,
        values=torch.cat([torch.zeros_like(values[:1]), values]),
        gamma=gamma,
    )


def critic_loss(
    critics: torch.Tensor,
    target: torch.Tensor,
    *,
    weights: torch.Tensor,
    valid: torch.Tensor,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The importance-weighted squared TD error of ``[B, replicas]`` critics against
    ``[B]`` targets, summed over replicas and times ``scale``, averaged over the valid
    transitions; and the ``[B]`` new priorities (mean absolute TD error)."""
    td_error = critics - target.unsqueeze(-1)
    loss = masked_mean(scale * (td_error**2).sum(-1) * weights, valid)
    return loss, td_error.detach().abs().mean(-1)
