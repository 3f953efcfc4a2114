"""The environment interface ALF's unrollers and evaluators talk to."""

from __future__ import annotations

import abc
from typing import Any

import torch

from alf import nest
from alf.data_structures import TimeStep
from alf.tensor_specs import BoundedTensorSpec, TensorSpec

__all__ = ["AlfEnvironment"]


class AlfEnvironment(abc.ABC):
    """A batch of environments stepped together, speaking in :class:`TimeStep` tensors.

    ``reset()`` returns FIRST steps for every environment. ``step(action)`` advances all
    of them; an environment whose previous step was LAST ignores its action and returns
    a FIRST step with the reset observation (reward 0, discount 1).

    ``step`` may also be split in two: :meth:`step_async` starts the step and
    :meth:`step_wait` returns its result. Backends whose environments step outside the
    calling thread (:attr:`steps_in_background`: EnvPool's threads, subprocess workers)
    run the step in between, so the caller can compute something else meanwhile (a
    collector's bookkeeping, double buffering); the others step inside :meth:`step_wait`.
    """

    steps_in_background: bool = False
    """Whether the step runs between :meth:`step_async` and :meth:`step_wait`."""

    @property
    @abc.abstractmethod
    def batch_size(self) -> int:
        """Number of environments stepped together."""

    @abc.abstractmethod
    def observation_spec(self) -> nest.Nest:
        """Nest of :class:`TensorSpec` of one environment's observation."""

    @abc.abstractmethod
    def action_spec(self) -> nest.Nest:
        """Nest of :class:`BoundedTensorSpec` of one environment's action."""

    @abc.abstractmethod
    def reset(self) -> TimeStep:
        """Resets every environment and returns their FIRST steps."""

    @abc.abstractmethod
    def step(self, action: Any) -> TimeStep:
        """Applies ``action`` (nest of ``[B, ...]`` tensors) and returns the next steps."""

    def step_async(self, action: Any) -> None:
        """Starts a step with ``action``; :meth:`step_wait` returns its result. Until
        then, no other method may be called."""
        if getattr(self, "_pending_action", None) is not None:
            raise RuntimeError("step_async called twice without step_wait")
        self._pending_action = action

    def step_wait(self) -> TimeStep:
        """The result of the step started by :meth:`step_async`."""
        action = getattr(self, "_pending_action", None)
        if action is None:
            raise RuntimeError("step_wait called without step_async")
        self._pending_action = None
        return self.step(action)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases the environments' resources."""

    def render(self) -> Any:
        """Frames of the environments (``rgb_array`` render mode), if supported."""
        raise NotImplementedError(f"{type(self).__name__} does not render")

    def time_step_spec(self) -> TimeStep:
        """Specs of one environment's :class:`TimeStep`."""
        return TimeStep(
            step_type=TensorSpec((), torch.int32),
            reward=TensorSpec((), torch.float32),
            discount=TensorSpec((), torch.float32),
            observation=self.observation_spec(),
            prev_action=self.action_spec(),
            env_id=TensorSpec((), torch.int64),
        )

    def __enter__(self) -> AlfEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_bounded(spec: TensorSpec) -> bool:
    """Whether ``spec`` carries bounds."""
    return isinstance(spec, BoundedTensorSpec)
