"""``RLAlgorithm``: the hooks through which unrollers and trainers drive an RL method."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from alf import nest
from alf.algorithms.algorithm import Algorithm, was_skipped
from alf.data_structures import AlgStep, Experience, LossInfo, StepType, TimeStep, Trajectory
from alf.data_transformers import DataTransformerChain
from alf.tensor_specs import TensorSpec, zeros_from_spec
from alf.utils.device import to_device

__all__ = ["LearningSetup", "RLAlgorithm", "reset_state_on_first"]


def reset_state_on_first(state: Any, step_type: torch.Tensor) -> Any:
    """Zeroes the recurrent state of the environments whose step is FIRST."""
    if not nest.flatten(state):  # stateless: nothing to do on this per-step path
        return state
    return nest.zero_rows(state, step_type != StepType.FIRST)


def _all_ranks_agree(flag: bool) -> bool:
    return flag


@dataclass(frozen=True)
class LearningSetup:
    """What a trainer tells an algorithm about the data it will learn from (see
    :meth:`RLAlgorithm.prepare_learning`).

    Attributes:
        num_envs: environments whose steps this learner receives (this rank's share).
        unroll_length: steps per environment per iteration
            (``TrainerConfig.unroll_length``; fractional for off-policy training).
        initial_collect_steps: steps (this rank's share) stored before training starts
            (``TrainerConfig.initial_collect_steps``).
        offline_buffer_dirs: runs whose saved replay buffers are mixed into training.
        offline_datasets: datasets (directories or Minari ids, see :mod:`alf.datasets`)
            mixed into training.
        offline_fraction: the share of every mini-batch taken from the offline data.
        data_parallel: whether this is one rank of a data-parallel run.
        all_ranks_agree: ``all_ranks_agree(flag)`` is True if ``flag`` is True on every
            rank (a collective; the identity outside data-parallel runs, and where the
            ranks' data arrive in step so that they agree anyway).
    """

    num_envs: int
    unroll_length: float = 1
    initial_collect_steps: int = 0
    offline_buffer_dirs: tuple[str, ...] = ()
    offline_datasets: tuple[str, ...] = ()
    offline_fraction: float = 0.0
    data_parallel: bool = False
    all_ranks_agree: Callable[[bool], bool] = _all_ranks_agree


class RLAlgorithm(Algorithm):
    """A reinforcement-learning algorithm.

    Subclasses fill in the hooks:

    ========================================  ===============================================
    ``predict_step(time_step, state)``        greedy/deterministic action (evaluation, play)
    ``rollout_step(time_step, state)``        exploring action + ``info`` kept for training
    ``train_step(exp, state, rollout_info)``  recomputes the step with gradients
    ``train_sequence(exp, state)``            the same along ``[L, B]`` sequences
    ``calc_loss(info)``                       turns ``train_step``'s ``info`` into a loss
    ``preprocess_experience(exp)``            e.g. advantages, before training on a batch
    ``after_update()``                        after every applied gradient update
    ``after_train_iter()``                    after every training iteration
    ========================================  ===============================================

    and :meth:`train_from_unroll`, which the family classes
    (:class:`~alf.algorithms.on_policy_algorithm.OnPolicyAlgorithm`) implement.

    How the algorithm learns from what is collected is its own: the trainer calls
    :meth:`prepare_learning` once and :meth:`learn` with every collected
    :class:`~alf.data_structures.Trajectory`. By default (the on-policy way) ``learn``
    trains on the whole trajectory with :meth:`train_from_unroll`;
    :class:`~alf.algorithms.off_policy_algorithm.OffPolicyAlgorithm` stores it in a
    replay buffer and trains on samples instead.

    Recurrent state is declared with ``*_state_spec`` (a nest of specs, ``()`` when
    stateless); unrollers reset it to zeros at FIRST steps.

    Args:
        observation_spec: nest of specs of one observation.
        action_spec: nest of bounded specs of one action.
        **kwargs: passed to :class:`Algorithm` (optimizer, learning rate, clipping).
    """

    def __init__(self, *, observation_spec: Any, action_spec: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.observation_spec = observation_spec
        self.action_spec = action_spec
        self.data_transformer = DataTransformerChain(
            transformers=[], observation_spec=observation_spec
        )

    def set_data_transformer(self, transformer: DataTransformerChain) -> None:
        """Installs the transformers of raw observations and rewards (see
        :mod:`alf.data_transformers`); their output spec must be :attr:`observation_spec`.
        They become part of the module, so checkpoints hold their statistics."""

        def signature(spec: Any) -> Any:
            return nest.map_structure(lambda s: (tuple(s.shape), s.dtype), spec)

        if signature(transformer.transformed_observation_spec) != signature(self.observation_spec):
            raise ValueError(
                "The data transformers produce observations of spec "
                f"{transformer.transformed_observation_spec}, but the algorithm was built for "
                f"{self.observation_spec}"
            )
        self.data_transformer = transformer

    @property
    def predict_state_spec(self) -> Any:
        """Specs of the state of :meth:`predict_step`."""
        return ()

    @property
    def rollout_state_spec(self) -> Any:
        """Specs of the state of :meth:`rollout_step`."""
        return self.predict_state_spec

    @property
    def train_state_spec(self) -> Any:
        """Specs of the state of :meth:`train_step`."""
        return self.rollout_state_spec

    def predict_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        """The action to take when evaluating (usually greedy)."""
        raise NotImplementedError

    def rollout_session(self) -> contextlib.AbstractContextManager[None]:
        """A context in which the collector calls :meth:`rollout_step` while the
        parameters stay fixed (one ``unroll`` of a collector): the algorithm may keep
        what it derives from its parameters for the session's steps and must drop it at
        the end (e.g. :class:`~alf.algorithms.ActorCriticAlgorithm`'s fused weights).
        Sessions may nest (a :class:`~alf.unrollers.DoubleBufferedUnroller`'s two
        groups). Default: nothing is kept."""
        return contextlib.nullcontext()

    def rollout_step(self, time_step: TimeStep, state: Any) -> AlgStep:
        """The action to take when collecting experience; ``info`` is stored with it."""
        raise NotImplementedError

    def train_step(self, exp: Experience, state: Any, rollout_info: Any) -> AlgStep:
        """Recomputes a step of stored experience with gradients; ``info`` goes to
        :meth:`calc_loss`."""
        raise NotImplementedError

    def train_sequence(self, exp: Experience, state: Any) -> AlgStep:
        """Recomputes ``[L, B]`` sequences of stored experience with gradients, starting
        from ``state`` (``[B, ...]``) and resetting it to zeros at FIRST steps (row 0
        included).

        The default steps :meth:`train_step` along the rows
        (:meth:`step_through_sequence`); a recurrent algorithm overrides it to run its
        networks along whole sequences at once (e.g. with
        :func:`~alf.networks.unroll_network`), which must give the same ``info``.

        Returns:
            An :class:`AlgStep` whose ``info`` is a nest of ``[L, B, ...]`` tensors (what
            ``train_step`` returns for each row, stacked) and whose ``state`` is the state
            after the last row.
        """
        return self.step_through_sequence(exp, state)

    def step_through_sequence(self, exp: Experience, state: Any) -> AlgStep:
        """:meth:`train_sequence` by :meth:`train_step`, one row at a time (the reference
        path: one network call per time step)."""
        infos = []
        for t in range(exp.step_type.shape[0]):
            row = nest.map_structure(lambda x, t=t: x[t], exp)
            state = reset_state_on_first(state, row.step_type)
            step = self.train_step(row, state, row.rollout_info)
            state = step.state
            infos.append(step.info)
        return AlgStep(output=(), state=state, info=nest.stack(infos))

    def calc_loss(self, info: Any) -> LossInfo:
        """The loss of a batch from the ``info`` of :meth:`train_step`."""
        raise NotImplementedError

    def preprocess_experience(self, exp: Experience) -> Experience:
        """Transforms a ``[T+1, B]`` trajectory before training (identity by default).

        On-policy algorithms return the ``[T, B]`` trajectory with targets (e.g. GAE
        advantages) added to ``rollout_info``; it runs without autograd. Rows whose step
        is LAST are still present here and are dropped afterwards by
        :class:`~alf.algorithms.on_policy_algorithm.OnPolicyAlgorithm`.
        """
        return exp

    learner_only_state: tuple[str, ...] = ()
    """Prefixes of ``state_dict`` names that acting never reads (e.g. an intrinsic
    reward's predictor): asynchronous actors are not sent them."""

    record_statistics: bool = True
    """Whether this iteration's updates compute the statistics that only summaries use
    (e.g. PPO's clip fraction, an entropy that is not in the loss). The trainer sets it
    to True only on iterations whose summary it writes; losses are always returned."""

    def after_update(self) -> None:  # noqa: B027 - optional hook
        """Called after every gradient update that was applied (not after one skipped
        for a non-finite loss), e.g. for target-network updates."""

    def after_train_iter(self) -> None:  # noqa: B027 - optional hook
        """Called once per training iteration, after all its updates."""

    def update_on(self, exp: Experience) -> tuple[LossInfo, dict[str, Any]]:
        """One gradient update on a (mini-)batch: :meth:`train_step` (stateless) and
        :meth:`calc_loss` (through :meth:`compute_loss`), :meth:`update_with_gradient`,
        then :meth:`after_update` if the update was applied.

        Returns:
            The loss and what ``update_with_gradient`` returned (its ``"skipped"`` is 1
            when the loss or gradient was not finite).
        """
        loss_info = self.compute_loss(self._batch_loss, exp)
        update = self.update_with_gradient(loss_info)
        self.after_applied_update(update)
        return loss_info, update

    def after_applied_update(self, update: dict[str, Any]) -> None:
        """Calls :meth:`after_update` if ``update`` was applied. An algorithm that does not
        override :meth:`after_update` never waits here for the device to say so."""
        if type(self).after_update is not RLAlgorithm.after_update and not was_skipped(update):
            self.after_update()

    def _batch_loss(self, exp: Experience) -> LossInfo:
        return self.calc_loss(self.train_step(exp, (), exp.rollout_info).info)

    def train_from_unroll(self, exp: Experience) -> dict[str, float]:
        """Trains on a freshly unrolled ``[T+1, B]`` trajectory.

        Returns:
            Scalars to report in summaries (losses, entropy, ...).
        """
        raise NotImplementedError

    # -------------------------------------------------- learning from collection
    needs_every_step: bool = False
    """Whether learning needs every collected step (True for a replay buffer, where a
    dropped fragment would leave a gap inside an episode): async collection then keeps
    every fragment, however old."""

    def prepare_learning(self, setup: LearningSetup) -> None:
        """Called once by the trainer before training (and before a checkpoint is
        restored): checks that the algorithm can learn from the collection ``setup``
        describes, and builds what it learns with.

        The default (training on each whole trajectory) needs whole unroll lengths and
        no initial collection or offline data.

        Raises:
            ValueError: a setting this algorithm cannot use, naming it.
        """
        if setup.unroll_length != int(setup.unroll_length):
            raise ValueError(
                f"TrainerConfig.unroll_length={setup.unroll_length}: fractional unroll "
                "lengths need an off-policy algorithm"
            )
        if setup.initial_collect_steps:
            raise ValueError("TrainerConfig.initial_collect_steps needs an off-policy algorithm")
        if setup.offline_buffer_dirs:
            raise ValueError("TrainerConfig.offline_buffer_dir needs an off-policy algorithm")
        if setup.offline_datasets:
            raise ValueError("TrainerConfig.offline_dataset needs an off-policy algorithm")

    def learn(self, trajectory: Trajectory) -> dict[str, float]:
        """Learns from one collected trajectory (one training iteration).

        Returns:
            Scalars to report in summaries; empty if nothing was trained.
        """
        return self.train_from_unroll(trajectory.experience())

    def data_checkpoint_state(self) -> Any:
        """Collected data to keep across a resume (e.g. a replay buffer), or None."""
        return None

    def load_data_checkpoint_state(self, state: Any) -> None:  # noqa: B027 - optional hook
        """Restores what :meth:`data_checkpoint_state` returned."""

    def experience_spec(self) -> Any:
        """Specs of one collected step: an :class:`Experience` of what ``rollout_step``
        returns for this algorithm's action spec, with *raw* observations (before the
        data transformers)."""
        transformer = self.data_transformer
        device = self.device
        time_step = TimeStep(
            step_type=torch.full((1,), StepType.FIRST, dtype=torch.int32),
            reward=torch.zeros(1),
            discount=torch.ones(1),
            observation=zeros_from_spec(transformer.observation_spec, (1,)),
            prev_action=zeros_from_spec(self.action_spec, (1,)),
            env_id=torch.zeros(1, dtype=torch.int64),
        )
        time_step = to_device(time_step, device)
        state = self.zero_state(self.rollout_state_spec, 1)
        with torch.no_grad():
            transformed, _ = transformer.transform_timestep(
                time_step, to_device(transformer.initial_state(1), device)
            )
            step = self.rollout_step(transformed, state)
        exp = Experience.from_time_step(time_step, step.output, step.info, state)
        return nest.map_structure(lambda x: TensorSpec(tuple(x.shape[1:]), x.dtype), exp)

    def zero_state(self, spec: Any, batch_size: int) -> Any:
        """A zero state of ``spec`` for ``batch_size`` environments, on :attr:`device`."""
        device = self.device
        return nest.map_structure(lambda s: s.zeros((batch_size,), device), spec)
