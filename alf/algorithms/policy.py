"""Acting with a trained algorithm on raw observations: :func:`greedy_step` (the step
evaluation, ``play`` and ``export`` take) and :class:`Policy`, the object a user calls
with an observation and gets an action back (``alf.load(run).policy``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm, reset_state_on_first
from alf.data_structures import StepType, TimeStep
from alf.tensor_specs import zeros_from_spec

__all__ = ["Policy", "greedy_step"]


def greedy_step(
    algorithm: RLAlgorithm, time_step: TimeStep, state: Any, transform_state: Any
) -> tuple[Any, Any, Any]:
    """The greedy action for a raw ``[B]`` time step, as evaluation and ``play`` choose it:
    the recurrent state is zeroed where the step is FIRST, the time step goes through the
    algorithm's data transformers (statistics fixed), then ``predict_step``.

    :class:`~alf.trainers.evaluator.Evaluator` and :class:`Policy` act through it, and
    :mod:`alf.export` traces it, so an exported policy is this function.

    Args:
        algorithm: the policy (in eval mode, under ``no_grad`` or tracing).
        time_step: the environment's time step, raw observations.
        state: the state of ``predict_step`` (``algorithm.predict_state_spec``).
        transform_state: the data transformers' state (``data_transformer.state_spec``).

    Returns:
        ``(action, state, transform_state)`` after this step.
    """
    state = reset_state_on_first(state, time_step.step_type)
    transformer = algorithm.data_transformer
    if not transformer.is_identity:
        time_step, transform_state = transformer.transform_timestep(time_step, transform_state)
    step = algorithm.predict_step(time_step, state)
    return step.output, step.state, transform_state


class Policy:
    """A trained algorithm's greedy policy, called with raw observations: the same
    actions as ``alf.bin.play`` (:func:`greedy_step`: data transformers with their saved
    statistics, recurrent state carried from call to call and reset by :meth:`reset`).

    Call it with one observation (as the environment returns it) to get one action, or
    with a batch (a leading dimension on every observation leaf) to get a batch::

        policy = alf.load("runs/ppo").policy
        obs, _ = env.reset()
        policy.reset()
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            ...

    Args:
        algorithm: the trained algorithm (on the CPU; put in eval mode).
    """

    def __init__(self, *, algorithm: RLAlgorithm) -> None:
        self.algorithm = algorithm.eval()
        self.observation_spec = algorithm.data_transformer.observation_spec
        self.action_spec = algorithm.action_spec
        self._state: tuple[Any, Any] | None = None
        self._batch_size: int | None = None

    def reset(self) -> None:
        """Starts new episodes: the next call is the first step of each."""
        self._state = None
        self._batch_size = None

    def _batch(self, observation: Any) -> tuple[Any, bool]:
        """``observation`` as ``[B, ...]`` tensors of the spec's dtypes, and whether it was
        a single observation."""
        leaves = nest.flatten(observation)
        specs = nest.flatten(self.observation_spec)
        if len(leaves) != len(specs):
            raise ValueError(
                f"Policy expects an observation of {len(specs)} array(s) "
                f"({self.observation_spec}), got {len(leaves)}"
            )
        first = np.asarray(leaves[0])
        single = first.ndim == len(specs[0].shape)
        tensors = []
        for leaf, spec in zip(leaves, specs, strict=True):
            tensor = torch.as_tensor(np.asarray(leaf), dtype=spec.dtype)
            if tuple(tensor.shape[single ^ 1 :]) != tuple(spec.shape) or (
                not single and tensor.ndim != len(spec.shape) + 1
            ):
                raise ValueError(
                    f"Policy: an observation of shape {tuple(tensor.shape)} fits neither "
                    f"{tuple(spec.shape)} nor a batch of it"
                )
            tensors.append(tensor.unsqueeze(0) if single else tensor)
        return nest.pack_sequence_as(self.observation_spec, tensors), single

    @torch.no_grad()
    def __call__(self, observation: Any) -> Any:
        """The greedy action(s) for ``observation`` (numpy arrays, nested as the action
        space; no batch dimension for a single observation).

        Raises:
            ValueError: the observation does not fit the policy's observation spec.
        """
        batch, single = self._batch(observation)
        batch_size = nest.flatten(batch)[0].shape[0]
        if self._state is None or self._batch_size != batch_size:
            self._batch_size = batch_size
            step_type = StepType.FIRST
            state = (
                self.algorithm.zero_state(self.algorithm.predict_state_spec, batch_size),
                self.algorithm.data_transformer.initial_state(batch_size),
            )
        else:
            step_type, state = StepType.MID, self._state
        time_step = TimeStep(
            step_type=torch.full((batch_size,), step_type, dtype=torch.int32),
            reward=torch.zeros(batch_size),
            discount=torch.ones(batch_size),
            observation=batch,
            prev_action=zeros_from_spec(self.action_spec, (batch_size,)),
            env_id=torch.arange(batch_size, dtype=torch.int32),
        )
        action, policy_state, transform_state = greedy_step(self.algorithm, time_step, *state)
        self._state = (policy_state, transform_state)
        return nest.map_structure(lambda a: a[0].numpy() if single else a.numpy(), action)
