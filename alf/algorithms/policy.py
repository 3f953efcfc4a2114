"""``Policy``: the one object through which an algorithm acts, everywhere.

Collection (:class:`~alf.unrollers.SyncUnroller`, :class:`~alf.unrollers.DoubleBufferedUnroller`
and the actors of :class:`~alf.unrollers.AsyncUnroller`), evaluation
(:class:`~alf.trainers.evaluator.Evaluator`), ``alf.bin.play``, :mod:`alf.export` and the
Python API (``alf.load(run).policy``) all act through a :class:`Policy`. It owns what
acting needs beyond the algorithm's ``rollout_step`` / ``predict_step`` hooks:

- the state carried between steps (:class:`PolicyState`: the algorithm's recurrent state
  and the data transformers' state), zeroed where an episode starts (``FIRST``);
- the data transformers' acting half (each time step is transformed before the step; the
  statistics stay fixed);
- the device hop, when the policy acts on an accelerator (time steps go there, actions
  and the information kept for training come back to the host);
- the rollout session (parameters fixed for one unroll), the eval-mode switch of
  greedy acting, and the schedules' progress;
- its parameters, which reach it only through :meth:`Policy.load_parameters` (a
  collector's ``publish``).

A policy has a :attr:`~Policy.name`, under which a run with several policies keeps each
one's summaries and checkpoint entry apart (the default one is ``"policy"``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import torch

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm, reset_state_on_first
from alf.data_structures import StepType, TimeStep
from alf.tensor_specs import zeros_from_spec
from alf.utils.device import to_device

__all__ = ["DEFAULT_POLICY_NAME", "ExploringStep", "Policy", "PolicyState"]

DEFAULT_POLICY_NAME = "policy"
"""The name of a run's (first) policy."""


class PolicyState(NamedTuple):
    """What a policy carries from one step to the next for a batch of environments.

    Attributes:
        algorithm: the recurrent state of the algorithm's ``predict_step`` (greedy) or
            ``rollout_step`` (exploring); ``()`` when stateless.
        transform: the data transformers' state (e.g. stacked frames).
    """

    algorithm: Any
    transform: Any


class ExploringStep(NamedTuple):
    """One exploring step of a policy (:meth:`Policy.explore_step`).

    Attributes:
        action: the actions, on the host.
        info: what ``rollout_step`` keeps for training, on the host.
        state: the algorithm state the actions were chosen from (reset where the step
            was FIRST), on the host: what the experience records.
        next_state: the state of the next step (on the policy's device).
    """

    action: Any
    info: Any
    state: Any
    next_state: PolicyState


class Policy:
    """The acting half of an algorithm: greedy and exploring steps on raw time steps.

    It acts with ``algorithm``'s ``predict_step`` (:meth:`greedy_step`) or
    ``rollout_step`` (:meth:`explore_step`); see the module docstring for what it owns.
    The algorithm may be the learner itself or a copy of it (e.g. the CPU copy of a
    model trained on a GPU); :meth:`load_parameters` brings a copy up to date.

    Called with an observation, it returns the greedy action, carrying the recurrent
    state from call to call (reset by :meth:`reset`)::

        policy = alf.load("runs/ppo").policy
        obs, _ = env.reset()
        policy.reset()
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            ...

    Args:
        algorithm: the algorithm that acts.
        name: the policy's name in summaries and checkpoints.
        device: where ``algorithm`` acts, when it is not the CPU: time steps are copied
            there and the steps' actions and info back (None: the CPU, no copies).
    """

    def __init__(
        self,
        *,
        algorithm: RLAlgorithm,
        name: str = DEFAULT_POLICY_NAME,
        device: torch.device | None = None,
    ) -> None:
        if not name or "/" in name:
            raise ValueError(f"A policy's name must be non-empty and have no '/', got {name!r}")
        self.algorithm = algorithm
        self.name = name
        self.device = device
        self._transformer = algorithm.data_transformer
        self._transforms = not self._transformer.is_identity
        # (the per-step state reset is skipped for a stateless algorithm)
        self._stateful = bool(
            nest.flatten(algorithm.rollout_state_spec) or nest.flatten(algorithm.predict_state_spec)
        )
        self._call_state: PolicyState | None = None
        self._call_batch_size: int | None = None

    # ------------------------------------------------------------------ specs
    @property
    def observation_spec(self) -> Any:
        """Specs of one raw observation (before the data transformers)."""
        return self._transformer.observation_spec

    @property
    def action_spec(self) -> Any:
        """Specs of one action."""
        return self.algorithm.action_spec

    @property
    def history_length(self) -> int:
        """Past time steps the data transformers look at (frame stacking)."""
        return self._transformer.history_length

    def state_spec(self, *, greedy: bool) -> PolicyState:
        """Specs of the :class:`PolicyState` of greedy or exploring steps."""
        algorithm = self.algorithm
        spec = algorithm.predict_state_spec if greedy else algorithm.rollout_state_spec
        return PolicyState(algorithm=spec, transform=self._transformer.state_spec)

    def initial_state(self, batch_size: int, *, greedy: bool) -> PolicyState:
        """The state of ``batch_size`` environments before their first step (zeros, on
        the policy's device)."""
        algorithm = self.algorithm
        spec = algorithm.predict_state_spec if greedy else algorithm.rollout_state_spec
        transform = self._transformer.initial_state(batch_size)
        if self.device is not None:  # (the algorithm's zero state is already there)
            transform = to_device(transform, self.device)
        return PolicyState(algorithm=algorithm.zero_state(spec, batch_size), transform=transform)

    # ------------------------------------------------------------------ acting
    def _prepare(self, time_step: TimeStep, state: PolicyState) -> tuple[TimeStep, Any, Any]:
        """The time step as the algorithm sees it (on its device, transformed), the
        algorithm state reset where the step is FIRST, and the transformers' next state."""
        if self.device is not None:
            time_step = to_device(time_step, self.device)
        algorithm_state = state.algorithm
        if self._stateful:
            algorithm_state = reset_state_on_first(algorithm_state, time_step.step_type)
        transform_state = state.transform
        if self._transforms:
            time_step, transform_state = self._transformer.transform_timestep(
                time_step, transform_state
            )
        return time_step, algorithm_state, transform_state

    def explore_step(self, time_step: TimeStep, state: PolicyState) -> ExploringStep:
        """One step of ``rollout_step`` on a raw ``[B]`` time step (collection); call it
        within :meth:`session` and under ``no_grad``."""
        policy_input, algorithm_state, transform_state = self._prepare(time_step, state)
        step = self.algorithm.rollout_step(policy_input, algorithm_state)
        next_state = PolicyState(algorithm=step.state, transform=transform_state)
        if self.device is None:
            return ExploringStep(step.output, step.info, algorithm_state, next_state)
        action, info, algorithm_state = to_device((step.output, step.info, algorithm_state), "cpu")
        return ExploringStep(action, info, algorithm_state, next_state)

    def greedy_step(self, time_step: TimeStep, state: PolicyState) -> tuple[Any, PolicyState]:
        """One step of ``predict_step`` on a raw ``[B]`` time step (evaluation, play,
        export): the actions (on the host) and the next state. Call it under ``no_grad``
        (or tracing), within :meth:`evaluating` unless the algorithm is already in eval
        mode."""
        policy_input, algorithm_state, transform_state = self._prepare(time_step, state)
        step = self.algorithm.predict_step(policy_input, algorithm_state)
        action = step.output if self.device is None else to_device(step.output, "cpu")
        return action, PolicyState(algorithm=step.state, transform=transform_state)

    def session(self) -> contextlib.AbstractContextManager[None]:
        """The span of one unroll, in which the parameters stay fixed (see
        :meth:`~alf.algorithms.rl_algorithm.RLAlgorithm.rollout_session`)."""
        return self.algorithm.rollout_session()

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Puts the algorithm in eval mode for greedy acting, and back as it was after."""
        was_training = self.algorithm.training
        self.algorithm.eval()
        try:
            yield
        finally:
            self.algorithm.train(was_training)

    # ------------------------------------------------------------------ parameters
    def load_parameters(self, source: RLAlgorithm) -> None:
        """Takes ``source``'s parameters and statistics (nothing to do when ``source`` is
        the algorithm this policy acts with)."""
        if source is not self.algorithm:
            self.algorithm.load_state_dict(source.state_dict())

    def set_progress(self, progress: float) -> None:
        """Tells the acting algorithm how far training is (its scheduled values, e.g. an
        exploration rate)."""
        self.algorithm.set_progress(progress)

    # ------------------------------------------------------------------ user calls
    def reset(self) -> None:
        """Starts new episodes: the next call is the first step of each."""
        self._call_state = None
        self._call_batch_size = None

    @torch.no_grad()
    def __call__(self, observation: Any) -> Any:
        """The greedy action(s) for ``observation`` (numpy arrays, nested as the
        observation space; no batch dimension for a single observation), as
        ``alf.bin.play`` would choose them.

        Raises:
            ValueError: the observation does not fit the policy's observation spec.
        """
        batch, single = batch_observation(observation, self.observation_spec)
        batch_size = nest.flatten(batch)[0].shape[0]
        if self._call_state is None or self._call_batch_size != batch_size:
            self._call_batch_size = batch_size
            step_type = StepType.FIRST
            state = self.initial_state(batch_size, greedy=True)
        else:
            step_type, state = StepType.MID, self._call_state
        time_step = TimeStep(
            step_type=torch.full((batch_size,), step_type, dtype=torch.int32),
            reward=torch.zeros(batch_size),
            discount=torch.ones(batch_size),
            observation=batch,
            prev_action=zeros_from_spec(self.action_spec, (batch_size,)),
            env_id=torch.arange(batch_size, dtype=torch.int32),
        )
        with self.evaluating():
            action, self._call_state = self.greedy_step(time_step, state)
        return nest.map_structure(lambda a: a[0].numpy() if single else a.numpy(), action)


def batch_observation(observation: Any, spec: Any) -> tuple[Any, bool]:
    """``observation`` as ``[B, ...]`` tensors of ``spec``'s dtypes, and whether it was a
    single observation (no batch dimension).

    Raises:
        ValueError: the observation does not fit ``spec``.
    """
    leaves = nest.flatten(observation)
    specs = nest.flatten(spec)
    if len(leaves) != len(specs):
        raise ValueError(
            f"Policy expects an observation of {len(specs)} array(s) ({spec}), got {len(leaves)}"
        )
    first = np.asarray(leaves[0])
    single = first.ndim == len(specs[0].shape)
    tensors = []
    for leaf, leaf_spec in zip(leaves, specs, strict=True):
        tensor = torch.as_tensor(np.asarray(leaf), dtype=leaf_spec.dtype)
        if tuple(tensor.shape[single ^ 1 :]) != tuple(leaf_spec.shape) or (
            not single and tensor.ndim != len(leaf_spec.shape) + 1
        ):
            raise ValueError(
                f"Policy: an observation of shape {tuple(tensor.shape)} fits neither "
                f"{tuple(leaf_spec.shape)} nor a batch of it"
            )
        tensors.append(tensor.unsqueeze(0) if single else tensor)
    return nest.pack_sequence_as(spec, tensors), single
