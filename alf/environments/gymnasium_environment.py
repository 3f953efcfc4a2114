"""A batch of Gymnasium environments stepped in-process through a Gymnasium vector env."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from alf import nest
from alf.data_structures import StepType, TimeStep
from alf.environments.action_check import ActionChecker, first_time_step
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.data_check import (
    DataChecker,
    EnvironmentDataError,
    describe_observation_mismatch,
)
from alf.environments.env_guard import (
    CallTimer,
    CallWatchdog,
    EnvironmentCallError,
    GuardedEnv,
    describe_exception,
)
from alf.errors import AlfError
from alf.tensor_specs import from_gym_space

__all__ = ["SUCCESS_KEY", "GymnasiumEnvironment"]


def _to_tensor(array: Any, spec: Any) -> torch.Tensor:
    # A copy: some vector envs reuse their output buffers between steps.
    tensor = torch.from_numpy(np.array(array))
    return tensor if tensor.dtype == spec.dtype else tensor.to(spec.dtype)


SUCCESS_KEY = "is_success"
"""The ``info`` key of a step's success (goal environments), passed on as
``TimeStep.env_info["is_success"]``."""


def _success_info(infos: Any, num_envs: int) -> Any:
    """``{"is_success": [B] float32}`` from a vector env's ``infos`` (NaN for the
    environments that gave none), or ``()`` when none did."""
    if not isinstance(infos, dict) or SUCCESS_KEY not in infos:
        return ()
    values = np.asarray(infos[SUCCESS_KEY], dtype=np.float32).reshape(num_envs)
    given = infos.get("_" + SUCCESS_KEY)
    if given is not None:
        values = np.where(np.asarray(given, dtype=bool), values, np.nan).astype(np.float32)
    return {SUCCESS_KEY: torch.from_numpy(values)}


class GymnasiumEnvironment(AlfEnvironment):
    """Wraps a Gymnasium ``VectorEnv`` using the NEXT_STEP autoreset mode.

    Terminated episodes end with discount 0, truncated ones with discount 1. A step whose
    ``info`` has ``is_success`` (goal environments) passes it on as ``env_info =
    {"is_success": [B] float32}`` (NaN where an environment gave none). Continuous
    actions outside the action space are clipped to it and counted in
    :attr:`num_clipped_actions` (``prev_action`` is the clipped action the environment
    applied); discrete actions outside it raise ``ValueError``.

    Observations and rewards are checked as they come (:mod:`alf.environments.data_check`):
    a non-finite value or an observation that does not fit the observation space raises
    :class:`~alf.environments.data_check.EnvironmentDataError`, or, with
    ``drop_nonfinite`` (a ``SyncVectorEnv`` only), a non-finite value ends that
    environment's episode at its previous step (a truncation: reward 0, the previous
    observation) and the environment is reset at the next step.

    Args:
        vector_env: the Gymnasium vector environment (NEXT_STEP autoreset).
        seed: seed of the first environment; environment ``i`` gets ``seed + i``.
        env_name: the environments' id, named in errors.
        first_index: the run-wide index of the first environment, named in errors.
        drop_nonfinite: end episodes at non-finite data instead of raising.
    """

    def __init__(
        self,
        *,
        vector_env: gym.vector.VectorEnv,
        seed: int | None = None,
        env_name: str = "",
        first_index: int = 0,
        drop_nonfinite: bool = False,
    ) -> None:
        mode = vector_env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        if mode != gym.vector.AutoresetMode.NEXT_STEP:
            raise ValueError(f"ALF needs the NEXT_STEP autoreset mode, got {mode}")
        self._env = vector_env
        self._seed = seed
        self._num_envs = vector_env.num_envs
        self._observation_spec = from_gym_space(vector_env.single_observation_space)
        self._action_spec = from_gym_space(vector_env.single_action_space)
        self._actions = ActionChecker(self._action_spec)
        self._env_id = torch.arange(self._num_envs, dtype=torch.int64)
        self._first_next = np.ones(self._num_envs, dtype=bool)
        self._any_first_next = True
        # Constants of the usual step, where every environment is mid-episode.
        self._no_env = np.zeros(self._num_envs, dtype=bool)
        self._no_env.flags.writeable = False
        self._mid = np.full(self._num_envs, StepType.MID, dtype=np.int32)
        self._ones = np.ones(self._num_envs, dtype=np.float32)
        self._single_obs = nest.is_single(self._observation_spec)
        self._zero_action = nest.map_structure(
            lambda s: s.zeros((self._num_envs,)), self._action_spec
        )
        if seed is not None:
            vector_env.action_space.seed(seed)
        if drop_nonfinite and not hasattr(vector_env, "_autoreset_envs"):
            raise ValueError(
                "TrainerConfig.nonfinite_data='drop_episode' needs environments stepped by a "
                "Gymnasium SyncVectorEnv ('sync' or 'subprocess' backend), not "
                f"{type(vector_env).__name__}"
            )
        self._env_name = env_name or str(getattr(vector_env.spec, "id", "")) or "environment"
        self._first_index = first_index
        self._check = DataChecker(
            env_name=self._env_name,
            observation_spec=self._observation_spec,
            batch_size=self._num_envs,
            first_index=first_index,
            drop=drop_nonfinite,
        )
        self._last_observation: Any = None
        self._timer: CallTimer | None = None

    def watch_calls(self, watchdog: CallWatchdog) -> None:
        """Has ``watchdog`` time every ``reset`` and ``step`` of the batch from now on."""
        self._timer = watchdog.add(f"'{self._env_name}' ({self._describe_indices()})")
        for env in getattr(self._env, "envs", ()):
            if isinstance(env, GuardedEnv):
                env.timer = self._timer

    def _describe_indices(self) -> str:
        first, last = self._first_index, self._first_index + self._num_envs - 1
        return f"environment {first}" if first == last else f"environments {first}..{last}"

    @property
    def num_clipped_actions(self) -> int:
        """Out-of-bounds continuous actions clipped so far."""
        return self._actions.num_clipped_actions

    @property
    def num_dropped_episodes(self) -> int:
        """Episodes ended early for a non-finite observation or reward."""
        return self._check.num_dropped_episodes

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def max_episode_steps(self) -> int | None:
        """The environments' own time limit (their spec's ``max_episode_steps``; None if
        they have none or it is unknown)."""
        spec = self._env.spec
        if spec is None and getattr(self._env, "envs", None):
            spec = self._env.envs[0].spec
        return getattr(spec, "max_episode_steps", None)

    @property
    def gym_env(self) -> gym.vector.VectorEnv:
        """The wrapped Gymnasium vector environment."""
        return self._env

    def observation_spec(self) -> nest.Nest:
        return self._observation_spec

    def action_spec(self) -> nest.Nest:
        return self._action_spec

    def _observation(self, obs: Any) -> Any:
        if self._single_obs:
            return _to_tensor(obs, self._observation_spec)
        return nest.map_structure(_to_tensor, obs, self._observation_spec)

    def _vector_call(self, name: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """Calls the vector env's ``name`` (timed, if :meth:`watch_calls`); an
        observation that its space cannot hold (the vector env fails to batch it) becomes
        an :class:`EnvironmentDataError` naming the env, any other exception an
        :class:`EnvironmentCallError` (the per-environment guards of the ``sync`` backend
        name the environment; this names the batch)."""
        try:
            if self._timer is not None:
                return self._timer.timed(name, call, *args, **kwargs)
            return call(*args, **kwargs)
        except AlfError:
            raise
        except Exception as err:
            if not isinstance(err, ValueError | TypeError):
                raise self._call_error(name, err) from err
            space = self._env.single_observation_space
            for i, obs in enumerate(getattr(self._env, "_env_obs", None) or ()):
                problem = describe_observation_mismatch(
                    obs,
                    space,
                    env_name=self._env_name,
                    index=self._first_index + i,
                    step=self._check.step_of(i) + 1,
                )
                if problem:
                    raise EnvironmentDataError(problem) from err
            raise self._call_error(name, err) from err

    def _call_error(self, name: str, err: Exception) -> EnvironmentCallError:
        return EnvironmentCallError(
            f"the {self._describe_indices()} of '{self._env_name}' raised in {name}(): "
            f"{describe_exception(err)}"
        )

    def reset(self) -> TimeStep:
        obs, _ = self._vector_call("reset", self._env.reset, seed=self._seed)
        self._seed = None  # later resets continue the seeded random streams
        self._first_next = np.zeros(self._num_envs, dtype=bool)
        self._any_first_next = False
        self._check.restart()
        self._checked(obs, None, None)
        self._check.check_action_mask(obs)
        observation = self._observation(obs)
        self._last_observation = observation
        return first_time_step(observation, self._zero_action, self._env_id)

    def step(self, action: Any) -> TimeStep:
        np_action, applied = self._actions(action, self._first_next)
        obs, reward, terminated, truncated, infos = self._vector_call(
            "step", self._env.step, np_action
        )
        if not (self._any_first_next or terminated.any() or truncated.any()):
            # The usual step: every environment is mid-episode (no masks needed).
            first, last = self._no_env, self._no_env
            step_type, discount = self._mid.copy(), self._ones.copy()
            reward = np.array(reward, dtype=np.float32)  # a copy: ours to edit
            self._check.advance(None)
        else:
            first = self._first_next
            last = np.logical_or(terminated, truncated) & ~first
            step_type = np.where(
                first, StepType.FIRST, np.where(last, StepType.LAST, StepType.MID)
            ).astype(np.int32)
            discount = np.where(terminated & ~first, 0.0, 1.0).astype(np.float32)
            reward = np.where(first, 0.0, reward).astype(np.float32)
            self._check.advance(first)
        dropped = self._checked(obs, reward, first)
        observation, reward = self._observation(obs), torch.from_numpy(reward)
        if dropped is not None:  # end those episodes at their previous step, truncated
            keep = torch.from_numpy(~dropped)
            observation = nest.map_structure(
                lambda new, old: torch.where(keep.view(-1, *[1] * (new.dim() - 1)), new, old),
                observation,
                self._last_observation,
            )
            reward[~keep] = 0.0
            step_type[dropped], discount[dropped] = StepType.LAST, 1.0
            last = last | dropped
            self._env._autoreset_envs[dropped] = True
        self._first_next = last
        self._any_first_next = bool(last.any())
        self._check.check_action_mask(obs, ignore=last)
        self._last_observation = observation
        prev_action = applied
        if first is not self._no_env and first.any():
            prev_action = nest.zero_rows(applied, torch.from_numpy(~first))
        return TimeStep(
            step_type=torch.from_numpy(step_type),
            reward=reward,
            discount=torch.from_numpy(discount),
            observation=observation,
            prev_action=prev_action,
            env_id=self._env_id,
            env_info=_success_info(infos, self._num_envs),
        )

    def _checked(
        self, observation: Any, reward: np.ndarray | None, first: np.ndarray | None
    ) -> np.ndarray | None:
        """The environments whose episode must end for non-finite data (None: none)."""
        dropped = self._check.check(observation, reward)
        if dropped is not None and (first is None or (dropped & first).any()):
            # A first observation cannot be dropped: there is no earlier step to end at.
            self._check.drop = False
            self._check.check(observation, reward)
        return dropped

    def render(self) -> Any:
        return self._env.render()

    def close(self) -> None:
        self._env.close()
