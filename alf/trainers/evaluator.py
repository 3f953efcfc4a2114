"""``Evaluator``: plays a policy's greedy (or exploring) steps for a fixed number of
episodes."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch
from absl import logging

from alf.algorithms.policy import Policy, PolicyState
from alf.data_structures import TimeStep
from alf.environments.alf_environment import AlfEnvironment
from alf.unrollers.episode_tracker import EpisodeTracker, success_rate

__all__ = ["DEFAULT_MAX_EVAL_EPISODE_STEPS", "EvalResult", "Evaluator"]


DEFAULT_MAX_EVAL_EPISODE_STEPS = 100_000
"""The cap of an evaluated (or played) episode of an environment without a time limit of
its own (``TrainerConfig.max_eval_episode_steps``, ``play --max_episode_steps``)."""


@dataclass
class EvalResult:
    """Returns and lengths of the evaluated episodes; ``cut[i]``: episode ``i`` was cut
    at the step cap ``max_episode_steps`` (its return is partial); ``env_ids[i]``: the
    batch row that played it (in a multi-agent game, ``env_id mod A`` is its agent);
    ``successes[i]``: ``info["is_success"]`` at episode ``i``'s last step (goal
    environments; NaN where the environment reports none, or the episode was cut)."""

    returns: list[float]
    lengths: list[int]
    cut: list[bool] = field(default_factory=list)
    max_episode_steps: int | None = None
    env_ids: list[int] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)

    def average_return_by_group(self, groups: tuple[str, ...]) -> dict[str, float]:
        """The mean return of each group of rows: row ``r`` is in ``groups[r mod
        len(groups)]`` (e.g. the agent groups of a multi-agent game)."""
        by_group: dict[str, list[float]] = {}
        for env_id, ret in zip(self.env_ids, self.returns, strict=True):
            by_group.setdefault(groups[env_id % len(groups)], []).append(ret)
        return {group: sum(r) / len(r) for group, r in by_group.items()}

    @property
    def num_cut_episodes(self) -> int:
        """Episodes cut at the step cap."""
        return sum(self.cut)

    @property
    def average_return(self) -> float:
        """Mean undiscounted return."""
        return sum(self.returns) / len(self.returns)

    @property
    def average_episode_length(self) -> float:
        """Mean episode length."""
        return sum(self.lengths) / len(self.lengths)

    @property
    def success_rate(self) -> float | None:
        """The mean success of the episodes that report one (None if none does)."""
        return success_rate(self.successes)


class Evaluator:
    """Plays ``num_episodes`` full episodes with the policy's greedy steps
    (:meth:`~alf.algorithms.policy.Policy.greedy_step`: the algorithm's ``predict_step``
    on time steps passed through its data transformers, whose statistics stay fixed), or
    with its exploring steps (``exploring``: :meth:`~alf.algorithms.policy.Policy.
    explore_step`, the algorithm's ``rollout_step``: actions sampled from a stochastic
    policy, epsilon-greedy for the DQN family, noisy for DDPG/TD3), as SB3's
    ``evaluate_policy(deterministic=False)``. Nothing is trained or stored either way.

    Each of the ``B`` environments plays its share of the episodes (the first
    ``num_episodes % B`` play one more), so short episodes are not over-represented.

    An episode that reaches ``max_episode_steps`` steps without ending is cut there: it
    counts with its return so far (:attr:`EvalResult.num_cut_episodes`, and a warning
    line), and its environment waits until every environment with episodes left to play
    waits too; then the whole batch is reset and play goes on. So an environment that
    never ends an episode cannot hang evaluation.

    Args:
        env: the evaluation environment (separate from the training one).
        policy: the policy that acts.
        num_episodes: episodes per evaluation.
        max_episode_steps: the cap of an episode (None: the environment's own time limit,
            ``env.max_episode_steps``, if it has one, else
            :data:`DEFAULT_MAX_EVAL_EPISODE_STEPS`).
        cap_setting: the setting that chooses the cap, named in the warning.
        exploring: act with the exploring steps instead of the greedy ones.
    """

    def __init__(
        self,
        *,
        env: AlfEnvironment,
        policy: Policy,
        num_episodes: int,
        max_episode_steps: int | None = None,
        cap_setting: str = "TrainerConfig.max_eval_episode_steps",
        exploring: bool = False,
    ) -> None:
        if num_episodes < 1:
            raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"{cap_setting} must be >= 1 or None, got {max_episode_steps}")
        self.env = env
        self.policy = policy
        self.num_episodes = num_episodes
        own_limit = getattr(env, "max_episode_steps", None)
        self.max_episode_steps = max_episode_steps or own_limit or DEFAULT_MAX_EVAL_EPISODE_STEPS
        self.cap_setting = cap_setting
        self.exploring = exploring

    def with_policy(self, policy: Policy) -> Evaluator:
        """An evaluator of ``policy`` in the same environment, with the same settings."""
        return Evaluator(
            env=self.env,
            policy=policy,
            num_episodes=self.num_episodes,
            max_episode_steps=self.max_episode_steps,
            cap_setting=self.cap_setting,
            exploring=self.exploring,
        )

    @torch.no_grad()
    def evaluate(self, max_steps: int = 10_000_000) -> EvalResult:
        """Plays the episodes and returns their returns and lengths (at most
        ``max_steps`` batched steps in all)."""
        session = self.policy.session() if self.exploring else contextlib.nullcontext()
        with self.policy.evaluating(), session:
            result = self._play(max_steps)
        if not result.returns:
            raise RuntimeError(f"No evaluation episode finished within {max_steps} steps")
        if result.num_cut_episodes:
            logging.warning(
                "%d of %d episodes played did not end within %d steps and were cut "
                "there (%s): their returns are partial",
                result.num_cut_episodes,
                len(result.returns),
                self.max_episode_steps,
                self.cap_setting,
            )
        return result

    def _restart(self) -> tuple[TimeStep, PolicyState]:
        """Resets the batch: its first time step and the policy's state."""
        time_step = self.env.reset()
        greedy = not self.exploring
        return time_step, self.policy.initial_state(self.env.batch_size, greedy=greedy)

    def _play(self, max_steps: int) -> EvalResult:
        batch, cap = self.env.batch_size, self.max_episode_steps
        quota = np.array(
            [self.num_episodes // batch + (i < self.num_episodes % batch) for i in range(batch)]
        )
        done = np.zeros(batch, dtype=np.int64)
        waiting = np.zeros(batch, dtype=bool)  # cut, waiting for the batch's reset
        result = EvalResult(returns=[], lengths=[], max_episode_steps=cap)
        tracker = EpisodeTracker(batch_size=batch)
        time_step, state = self._restart()
        for _ in range(max_steps):
            tracker.update(time_step)
            completed = zip(
                tracker.completed_env_ids,
                tracker.completed_returns,
                tracker.completed_lengths,
                tracker.completed_successes,
                strict=True,
            )
            for env_id, ret, length, success in completed:
                if not waiting[env_id] and done[env_id] < quota[env_id]:
                    done[env_id] += 1
                    result.returns.append(ret)
                    result.lengths.append(length)
                    result.cut.append(False)
                    result.env_ids.append(int(env_id))
                    result.successes.append(success)
            tracker.pop_completed()
            # (An episode that ended on this step is complete, whatever its length.)
            playing = ~waiting & (done < quota) & ~time_step.is_last().numpy()
            for env_id in np.flatnonzero(playing & (tracker.current_lengths >= cap)):
                done[env_id] += 1
                waiting[env_id] = True
                result.returns.append(float(tracker.current_returns[env_id]))
                result.lengths.append(int(tracker.current_lengths[env_id]))
                result.cut.append(True)
                result.env_ids.append(int(env_id))
                result.successes.append(float("nan"))
            if len(result.returns) >= self.num_episodes:
                break
            if waiting.any() and not (~waiting & (done < quota)).any():
                waiting[:] = False
                time_step, state = self._restart()
                continue
            if self.exploring:
                step = self.policy.explore_step(time_step, state)
                action, state = step.action, step.next_state
            else:
                action, state = self.policy.greedy_step(time_step, state)
            time_step = self.env.step(action)
        return result
