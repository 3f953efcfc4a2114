"""``Evaluator``: runs ``predict_step`` for a fixed number of episodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import TimeStep
from alf.environments.alf_environment import AlfEnvironment
from alf.unrollers.episode_tracker import EpisodeTracker
from alf.unrollers.sync_unroller import reset_state_on_first
from alf.utils.device import to_device

__all__ = ["EvalResult", "Evaluator", "greedy_step"]


def greedy_step(
    algorithm: RLAlgorithm, time_step: TimeStep, state: Any, transform_state: Any
) -> tuple[Any, Any, Any]:
    """The greedy action for a raw ``[B]`` time step, as evaluation and ``play`` choose it:
    the recurrent state is zeroed where the step is FIRST, the time step goes through the
    algorithm's data transformers (statistics fixed), then ``predict_step``.

    :class:`Evaluator` acts through it, and :mod:`alf.export` traces it, so an exported
    policy is this function.

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


@dataclass
class EvalResult:
    """Returns and lengths of the evaluated episodes."""

    returns: list[float]
    lengths: list[int]

    @property
    def average_return(self) -> float:
        """Mean undiscounted return."""
        return sum(self.returns) / len(self.returns)

    @property
    def average_episode_length(self) -> float:
        """Mean episode length."""
        return sum(self.lengths) / len(self.lengths)


class Evaluator:
    """Plays ``num_episodes`` full episodes with the algorithm's ``predict_step`` (on
    time steps passed through its data transformers, whose statistics stay fixed).

    Each of the ``B`` environments plays its share of the episodes (the first
    ``num_episodes % B`` play one more), so short episodes are not over-represented.

    Args:
        env: the evaluation environment (separate from the training one).
        algorithm: supplies ``predict_step``.
        num_episodes: episodes per evaluation.
        device: the algorithm's device when it is not the CPU (time steps are copied
            there, actions back).
    """

    def __init__(
        self,
        *,
        env: AlfEnvironment,
        algorithm: RLAlgorithm,
        num_episodes: int,
        device: torch.device | None = None,
    ) -> None:
        if num_episodes < 1:
            raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
        self.env = env
        self.algorithm = algorithm
        self.num_episodes = num_episodes
        self.device = device

    @torch.no_grad()
    def evaluate(self, max_steps: int = 10_000_000) -> EvalResult:
        """Plays the episodes and returns their returns and lengths."""
        batch = self.env.batch_size
        quota = [self.num_episodes // batch + (i < self.num_episodes % batch) for i in range(batch)]
        done = [0] * batch
        returns: list[float] = []
        lengths: list[int] = []
        tracker = EpisodeTracker(batch_size=batch)
        was_training = self.algorithm.training
        self.algorithm.eval()
        try:
            time_step = self.env.reset()
            state = self.algorithm.zero_state(self.algorithm.predict_state_spec, batch)
            transformer = self.algorithm.data_transformer
            transform_state = transformer.initial_state(batch)
            device = self.device
            if device is not None:  # (the state is already there: zero_state)
                transform_state = to_device(transform_state, device)
            for _ in range(max_steps):
                tracker.update(time_step)
                completed = zip(
                    tracker.completed_env_ids,
                    tracker.completed_returns,
                    tracker.completed_lengths,
                    strict=True,
                )
                for env_id, ret, length in completed:
                    if done[env_id] < quota[env_id]:
                        done[env_id] += 1
                        returns.append(ret)
                        lengths.append(length)
                tracker.pop_completed()
                if len(returns) >= self.num_episodes:
                    break
                policy_input = time_step if device is None else to_device(time_step, device)
                action, state, transform_state = greedy_step(
                    self.algorithm, policy_input, state, transform_state
                )
                action = action if device is None else to_device(action, "cpu")
                time_step = self.env.step(action)
        finally:
            self.algorithm.train(was_training)
        if not returns:
            raise RuntimeError(f"No evaluation episode finished within {max_steps} steps")
        return EvalResult(returns=returns, lengths=lengths)
