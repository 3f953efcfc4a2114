"""Making datasets (what ``alf.bin.dataset`` runs): episodes played in a run's environment
by its trained policy (greedy ``predict_step`` or exploring ``rollout_step``, with
optional Gaussian or epsilon noise) or by a uniformly random policy, or read back from the
replay buffer saved in a run's checkpoint.

Episodes are :class:`~alf.datasets.Episode` records (numpy) in the order they were
played; :mod:`alf.datasets` writes them in Minari's format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from alf import nest
from alf.algorithms.policy import Policy
from alf.data_structures import StepType, TimeStep
from alf.datasets import DatasetError, Episode
from alf.environments import AlfEnvironment, create_environment
from alf.run_dir.layout import check_run_dir
from alf.saved_config import load_saved_config
from alf.tensor_specs import BoundedTensorSpec, sample_uniform

__all__ = [
    "ActionChooser",
    "DEFAULT_MAX_EPISODE_STEPS",
    "add_noise",
    "environment_spaces",
    "mean_return",
    "play_episodes",
    "policy_chooser",
    "random_chooser",
    "replay_buffer_episodes",
    "run_environment",
]

DEFAULT_MAX_EPISODE_STEPS = 100_000
"""The cap of an episode of an environment without a time limit of its own."""

ActionChooser = Callable[[TimeStep, Any], tuple[Any, Any]]
"""``choose(time_step, state) -> (action, state)`` for a batch of one environment;
``state`` starts as None."""


def run_environment(
    root_dir: str | None,
    *,
    env_name: str | None = None,
    seed: int = 0,
    conf_params: Sequence[str] = (),
    trusted_modules: Sequence[str] = (),
) -> AlfEnvironment:
    """One environment of the run in ``root_dir`` (its ``config.gin``, then
    ``conf_params``), or of ``env_name`` (with ``conf_params``) without a run.

    Raises:
        RunDirError: ``root_dir`` holds no run.
        ConfigError: a binding is wrong.
    """
    from alf import config as alf_config

    if root_dir is not None:
        load_saved_config(check_run_dir(root_dir), conf_params, trusted_modules=trusted_modules)
    else:
        alf_config.load_config(None, conf_params)
    options = {} if env_name is None else {"env_name": env_name}
    return create_environment(
        num_parallel_environments=1, seed=seed, for_evaluation=True, **options
    )


def environment_spaces(env: AlfEnvironment) -> tuple[gym.Space, gym.Space, Any]:
    """The Gymnasium observation and action spaces of one of ``env``'s environments, and
    its Gymnasium spec (None if unknown).

    Raises:
        DatasetError: the environment is not a Gymnasium one (no spaces to record).
    """
    vector = getattr(env, "gym_env", None)
    observation_space = getattr(vector, "single_observation_space", None)
    action_space = getattr(vector, "single_action_space", None)
    if observation_space is None or action_space is None:
        raise DatasetError(
            f"{type(env).__name__} has no Gymnasium spaces to record: datasets are made "
            "in environments of the sync backend"
        )
    envs = getattr(vector, "envs", None) or [None]
    spec = getattr(envs[0], "spec", None) or getattr(vector, "spec", None)
    if spec is not None:  # ALF's own wrappers (guards, checks) are not the environment's
        wrappers = tuple(
            w for w in spec.additional_wrappers if not str(w.entry_point).startswith("alf.")
        )
        spec = dataclasses.replace(spec, additional_wrappers=wrappers)
    return observation_space, action_space, spec


def policy_chooser(policy: Policy, *, greedy: bool) -> ActionChooser:
    """The actions of ``policy``: ``predict_step`` (``greedy``) or ``rollout_step``."""

    def choose(time_step: TimeStep, state: Any) -> tuple[Any, Any]:
        if state is None:
            state = policy.initial_state(1, greedy=greedy)
        if greedy:
            return policy.greedy_step(time_step, state)
        step = policy.explore_step(time_step, state)
        return step.action, step.next_state

    return choose


def random_chooser(action_spec: Any) -> ActionChooser:
    """Uniformly random actions of ``action_spec`` (bounded)."""

    def choose(time_step: TimeStep, state: Any) -> tuple[Any, Any]:
        return sample_uniform(action_spec, 1), state

    return choose


def add_noise(
    choose: ActionChooser, action_spec: Any, noise: float, generator: torch.Generator
) -> ActionChooser:
    """``choose``'s actions with noise: Gaussian of standard deviation ``noise`` times
    half the range of each float action (clipped to the bounds); for an integer action,
    a uniformly random value with probability ``noise`` (epsilon-greedy)."""
    specs = nest.flatten(action_spec)

    def perturb(action: torch.Tensor, spec: BoundedTensorSpec) -> torch.Tensor:
        low = torch.as_tensor(np.asarray(spec.minimum), dtype=torch.float64)
        high = torch.as_tensor(np.asarray(spec.maximum), dtype=torch.float64)
        if spec.dtype.is_floating_point:
            half = (high - low) / 2
            draw = torch.randn(action.shape, generator=generator, dtype=torch.float64)
            noisy = action.to(torch.float64) + noise * half * draw
            return torch.minimum(torch.maximum(noisy, low), high).to(action.dtype)
        replace = torch.rand(action.shape, generator=generator) < noise
        span = (high - low + 1).expand(action.shape)
        draw = low.expand(action.shape) + torch.floor(
            torch.rand(action.shape, generator=generator, dtype=torch.float64) * span
        )
        return torch.where(replace, draw.to(action.dtype), action)

    def noisy(time_step: TimeStep, state: Any) -> tuple[Any, Any]:
        action, state = choose(time_step, state)
        leaves = [perturb(a, s) for a, s in zip(nest.flatten(action), specs, strict=True)]
        return nest.pack_sequence_as(action, leaves), state

    return noisy


def _numpy(data: Any) -> Any:
    """Row 0 of a batch of one, as numpy."""
    return nest.map_structure(lambda x: np.asarray(x[0].cpu()), data)


def _stack(rows: list[Any]) -> Any:
    return nest.map_structure(lambda *xs: np.stack(xs), *rows)


class _EpisodeRecord:
    """The arrays of an episode being played."""

    def __init__(self, observation: Any) -> None:
        self.observations = [observation]
        self.actions: list[Any] = []
        self.rewards: list[float] = []

    def episode(self, *, terminated: bool) -> Episode:
        length = len(self.rewards)
        terminations = np.zeros(length, dtype=bool)
        terminations[-1] = terminated
        return Episode(
            observations=_stack(self.observations),
            actions=_stack(self.actions),
            rewards=np.asarray(self.rewards, dtype=np.float32),
            terminations=terminations,
            truncations=~terminations & (np.arange(length) == length - 1),
        )


@torch.no_grad()
def play_episodes(
    env: AlfEnvironment,
    choose: ActionChooser,
    *,
    num_steps: int | None = None,
    num_episodes: int | None = None,
    max_episode_steps: int | None = None,
) -> Iterator[Episode]:
    """Plays ``choose``'s actions in ``env`` (one environment) and yields each episode
    when it ends: ``num_episodes`` whole episodes, or ``num_steps`` transitions (the last
    episode cut there, as a truncation).

    An episode that has not ended after ``max_episode_steps`` (default: the
    environment's own time limit, else :data:`DEFAULT_MAX_EPISODE_STEPS`) is cut there.
    """
    if env.batch_size != 1:
        raise ValueError(f"play_episodes plays one environment, got {env.batch_size}")
    cap = max_episode_steps or getattr(env, "max_episode_steps", None)
    cap = cap or DEFAULT_MAX_EPISODE_STEPS
    steps = episodes = 0
    state = None
    record: _EpisodeRecord | None = None
    time_step = env.reset()
    while True:
        step_type = int(time_step.step_type[0])
        if step_type == StepType.FIRST or record is None:
            record = _EpisodeRecord(_numpy(time_step.observation))
        else:
            record.observations.append(_numpy(time_step.observation))
            record.rewards.append(float(time_step.reward[0]))
            steps += 1
        ended = step_type == StepType.LAST
        cut = not ended and (
            len(record.rewards) >= cap or (num_steps is not None and steps >= num_steps)
        )
        if (ended or cut) and record.rewards:
            terminated = ended and float(time_step.discount[0]) == 0.0
            yield record.episode(terminated=terminated)
            episodes += 1
            record = None
            if (num_steps is not None and steps >= num_steps) or episodes == num_episodes:
                return
            if cut:
                time_step, state = env.reset(), None
                continue
        action, state = choose(time_step, state)
        if record is not None and not ended:
            record.actions.append(_numpy(action))
        time_step = env.step(action)


def mean_return(env: AlfEnvironment, choose: ActionChooser, num_episodes: int) -> float:
    """The average return of ``num_episodes`` whole episodes of ``choose`` in ``env``."""
    returns = [e.episode_return for e in play_episodes(env, choose, num_episodes=num_episodes)]
    return float(np.mean(returns))


def _leaves(state: dict[str, Any], prefix: str) -> list[np.ndarray]:
    """The saved storage tensors of the fields under ``prefix``, in spec order."""
    paths = [p for p, _, _ in state["spec"] if p == prefix or p.startswith(prefix + ".")]
    return [state["storage"][p].numpy() for p in paths]


def _buffer_columns(
    state: dict[str, Any], observation_spec: Any, action_spec: Any
) -> tuple[list[dict[str, Any]], list[int]]:
    """Each environment's held rows (oldest first) as numpy columns, and how many."""
    positions = state["positions"].numpy()
    length = int(state["max_length"])
    observation = _leaves(state, "observation")
    action = _leaves(state, "action")
    names = {"step_type": "step_type", "reward": "reward", "discount": "discount"}
    columns, counts = [], []
    for env_index, pos in enumerate(positions):
        held = min(int(pos), length)
        slots = (np.arange(int(pos) - held, int(pos)) % length).astype(np.int64)

        def rows(leaf: np.ndarray, env_index: int = env_index, slots: np.ndarray = slots) -> Any:
            return leaf[env_index][slots]

        column = {k: rows(state["storage"][v].numpy()) for k, v in names.items()}
        column["observation"] = nest.pack_sequence_as(
            observation_spec, [rows(x) for x in observation]
        )
        column["action"] = nest.pack_sequence_as(action_spec, [rows(x) for x in action])
        columns.append(column)
        counts.append(held)
    return columns, counts


def _transition_rows(step_type: np.ndarray) -> np.ndarray:
    """The rows that start a transition: inside an episode (after its FIRST), not LAST,
    and followed by a row of the same episode."""
    inside = np.cumsum(step_type == StepType.FIRST) > 0
    follows = np.zeros_like(inside)
    follows[:-1] = step_type[1:] != StepType.FIRST
    return np.flatnonzero(inside & (step_type != StepType.LAST) & follows)


def _rows(data: Any, start: int, stop: int) -> Any:
    return nest.map_structure(lambda x: x[start:stop], data)


def _column_episodes(column: dict[str, Any], end: int) -> Iterator[Episode]:
    """The episodes of one environment's rows ``[0, end)`` (a last one cut is truncated)."""
    step_type = column["step_type"][:end]
    starts = np.flatnonzero(step_type == StepType.FIRST)
    for i, start in enumerate(starts):
        stop = int(starts[i + 1]) if i + 1 < len(starts) else end
        lasts = np.flatnonzero(step_type[start:stop] == StepType.LAST)
        last = start + int(lasts[0]) if len(lasts) else stop - 1
        if last <= start:
            continue
        terminated = bool(len(lasts)) and float(column["discount"][last]) == 0.0
        length = last - start
        terminations = np.zeros(length, dtype=bool)
        terminations[-1] = terminated
        yield Episode(
            observations=_rows(column["observation"], start, last + 1),
            actions=_rows(column["action"], start, last),
            rewards=np.asarray(column["reward"][start + 1 : last + 1], dtype=np.float32),
            terminations=terminations,
            truncations=~terminations & (np.arange(length) == length - 1),
        )


def replay_buffer_episodes(
    state: dict[str, Any],
    *,
    observation_spec: Any,
    action_spec: Any,
    num_steps: int | None = None,
) -> list[Episode]:
    """The episodes of a replay buffer's checkpoint state (``ReplayBuffer``'s
    ``checkpoint_state()``), environment by environment, oldest first: with
    ``num_steps``, only the first ``num_steps`` transitions stored (in the order they were
    collected: by position, then environment), the episode at the cut truncated there.
    Rows held before an environment's first FIRST (the ring wrapped) are left out.

    Raises:
        DatasetError: the state holds none of the fields an episode needs.
    """
    needed = {"step_type", "reward", "discount", "observation", "action"}
    fields = {p.split(".")[0] for p, _, _ in state.get("spec", [])}
    if not needed <= fields:
        raise DatasetError(
            f"the saved replay buffer lacks {', '.join(sorted(needed - fields))}: it is not "
            "an Experience buffer"
        )
    columns, counts = _buffer_columns(state, observation_spec, action_spec)
    ends = list(counts)
    if num_steps is not None:
        order = sorted(
            (int(row), e)
            for e, column in enumerate(columns)
            for row in _transition_rows(column["step_type"])
        )
        ends = [0] * len(columns)
        for row, e in order[:num_steps]:
            ends[e] = max(ends[e], row + 2)
    return [ep for e, c in enumerate(columns) for ep in _column_episodes(c, ends[e])]
