"""A batch of environments stepped by EnvPool's C++ thread pool (the ``[envpool]`` extra)."""

from __future__ import annotations

import secrets
import warnings
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from alf import nest
from alf.data_structures import StepType, TimeStep
from alf.environments.action_check import ActionChecker, first_time_step, numpy_dtype
from alf.environments.alf_environment import AlfEnvironment
from alf.environments.data_check import DataChecker
from alf.errors import install_hint
from alf.tensor_specs import from_gym_space

__all__ = ["EnvPoolEnvironment"]

_OWN_KWARGS = ("task_id", "env_type", "num_envs", "seed", "max_episode_steps")
"""``envpool.make`` arguments set from :class:`EnvPoolEnvironment`'s own arguments."""

_FIRST, _MID, _LAST = (np.int32(t) for t in (StepType.FIRST, StepType.MID, StepType.LAST))


def _import_envpool() -> ModuleType:
    try:
        import envpool
    except ImportError as err:
        raise ImportError(
            f"vectorization_mode='envpool' needs EnvPool ({err}): {install_hint('envpool')}"
        ) from err
    return envpool


class _DirectCalls:
    """EnvPool's C++ ``_send`` and ``_recv`` without the conversions its Python ``send``
    and ``recv`` redo every step (a config dict, the env ids, the action and state
    dicts): for a single-player pool with one action array and one observation array,
    the layout EnvPool's classic-control, MuJoCo and Atari pools have. The action is
    still copied into EnvPool's own dtype (as ``send`` does), the env ids are the
    ``0..n-1`` array ``send`` would pass, and ``recv`` returns what the public ``recv``
    returns (``terminated`` is ``done & ~trunc``, ``info`` holds the env ids).
    :meth:`create` returns None for any other layout: the public calls are used.

    Args:
        pool: the EnvPool pool.
        env_ids: ``0..num_envs - 1`` as int32.
    """

    _ACTION_KEYS = ("env_id", "players.env_id", "action")
    _STATE_KEYS = ("obs", "reward", "done", "trunc", "info:env_id")

    def __init__(self, pool: Any, env_ids: np.ndarray) -> None:
        self.pool = pool
        self._send = pool._send
        self._recv = pool._recv
        self._dtype = np.dtype(pool._spec._action_spec[-1][0])
        self._env_ids = env_ids
        keys = list(pool._state_keys)
        self._index = [keys.index(key) for key in self._STATE_KEYS]

    @classmethod
    def create(cls, pool: Any, env_ids: np.ndarray) -> _DirectCalls | None:
        """The direct calls for ``pool``, or None if its layout is not the one above."""
        try:
            keys = list(pool._state_keys)
            if (
                tuple(pool._spec._action_keys) != cls._ACTION_KEYS
                or pool.config.get("max_num_players", 1) != 1
                or any(key not in keys for key in cls._STATE_KEYS)
                or any(key.startswith("obs:") for key in keys)
            ):
                return None
            return cls(pool, env_ids)
        except (AttributeError, TypeError, ValueError, IndexError):
            return None

    def send(self, action: np.ndarray) -> None:
        self._send([self._env_ids, self._env_ids, action.astype(self._dtype, order="C")])

    def recv(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        state = self._recv()
        obs, reward, done, trunc, env_id = (state[i] for i in self._index)
        return obs, reward, done & ~trunc, trunc, {"env_id": env_id}


class EnvPoolEnvironment(AlfEnvironment):
    """A batch of ``num_envs`` environments stepped synchronously by EnvPool.

    The fastest backend, for the ids EnvPool implements natively (``envpool.list_all_envs()``).
    Its TimeSteps follow :class:`~alf.environments.GymnasiumEnvironment` exactly: terminated
    episodes end with discount 0, truncated ones (the time limit) with discount 1; the step
    after a LAST one is FIRST with the reset observation, reward 0, discount 1 and a zero
    ``prev_action`` (EnvPool resets an environment on the step after its episode ended and
    ignores that step's action). Continuous actions outside the action space are clipped to
    it and counted in :attr:`num_clipped_actions` (``prev_action`` is the clipped action);
    discrete actions outside it raise ``ValueError`` (EnvPool itself would accept them).

    Seeding differs from the Gymnasium backend: EnvPool seeds environment ``i`` with
    ``seed + i`` in its own C++ random generators, so the episodes are reproducible for a
    seed but not the same as Gymnasium's ``seed + i`` episodes.

    Args:
        env_id: an id in ``envpool.list_all_envs()``, e.g. ``"CartPole-v1"``.
        num_envs: number of environments stepped together.
        seed: seed of the pool (environment ``i`` derives its stream from ``seed + i``), an
            int32; ``None`` picks a random one (kept in :attr:`seed`).
        max_episode_steps: overrides the time limit (EnvPool's ``max_episode_steps``).
        env_kwargs: further keyword arguments of ``envpool.make``, e.g. ``num_threads`` or
            ``render_mode="rgb_array"``.
        env_name: the id as configured (named in errors; default ``env_id``).
        first_index: the run-wide index of the first environment (named in errors).

    Observations and rewards are checked as they come: a non-finite value raises
    :class:`~alf.environments.data_check.EnvironmentDataError` naming the environment.

    Raises:
        ImportError: EnvPool is not installed.
        ValueError: EnvPool does not support ``env_id``, or the arguments are invalid.
    """

    steps_in_background = True

    def __init__(
        self,
        *,
        env_id: str,
        num_envs: int,
        seed: int | None = None,
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        env_name: str | None = None,
        first_index: int = 0,
    ) -> None:
        envpool = _import_envpool()
        if env_id not in envpool.list_all_envs():
            raise ValueError(
                f"EnvPool does not support environment id '{env_id}': use "
                "vectorization_mode='sync' or 'subprocess' for it"
            )
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        kwargs = dict(env_kwargs or {})
        clash = sorted(set(kwargs) & set(_OWN_KWARGS))
        if clash:
            raise ValueError(f"env_kwargs must not set {clash}: they are EnvPoolEnvironment's")
        if kwargs.get("batch_size", num_envs) != num_envs:
            raise ValueError("EnvPool's asynchronous mode (batch_size < num_envs) is not supported")
        if seed is None:
            seed = secrets.randbelow(2**31 - num_envs)
        elif not -(2**31) <= seed < 2**31 - num_envs:
            raise ValueError(f"seed and seed + num_envs must be int32s, got seed {seed}")
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        self._env = envpool.make(
            env_id, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs
        )
        self.seed = seed
        """The pool's seed (the random one picked for ``seed=None``)."""
        with warnings.catch_warnings():  # EnvPool builds its Box spaces from float64 bounds
            warnings.filterwarnings("ignore", message=".*precision lowered")
            obs_space = getattr(self._env, "single_observation_space", self._env.observation_space)
            act_space = getattr(self._env, "single_action_space", self._env.action_space)
        for space in (obs_space, act_space):
            if not isinstance(space, gym.spaces.Space):
                raise TypeError(f"EnvPool gave a {type(space)}, not a Gymnasium space")
        self._num_envs = num_envs
        self._observation_spec = from_gym_space(obs_space)
        self._obs_dtypes = nest.map_structure(numpy_dtype, self._observation_spec)
        single_obs = nest.is_single(self._observation_spec)
        self._obs_dtype = self._obs_dtypes if single_obs else None
        self._action_spec = from_gym_space(act_space)
        self._actions = ActionChecker(self._action_spec)
        self._env_ids = np.arange(num_envs, dtype=np.int32)
        self._env_ids_bytes = self._env_ids.tobytes()
        # (None for a nested action: EnvPool's send flattens the nest)
        self._direct = _DirectCalls.create(self._env, self._env_ids)
        self._direct_ready = False  # the first send is EnvPool's, which checks the action
        self._env_id = torch.arange(num_envs, dtype=torch.int64)
        self._first_next = np.ones(num_envs, dtype=bool)  # envs whose next step is FIRST
        self._any_first_next = True
        self._mid = np.full(num_envs, _MID, dtype=np.int32)
        self._ones = np.ones(num_envs, dtype=np.float32)
        self._zero_action = nest.map_structure(lambda s: s.zeros((num_envs,)), self._action_spec)
        self._applied: Any = None  # the checked action of a step in flight
        self._applied_np: Any = None  # ... as the numpy array(s) sent to EnvPool
        self._check = DataChecker(
            env_name=env_name or env_id,
            observation_spec=self._observation_spec,
            batch_size=num_envs,
            first_index=first_index,
        )

    @property
    def num_clipped_actions(self) -> int:
        """Out-of-bounds continuous actions clipped so far."""
        return self._actions.num_clipped_actions

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def envpool_env(self) -> Any:
        """The wrapped EnvPool pool."""
        return self._env

    def observation_spec(self) -> nest.Nest:
        return self._observation_spec

    def action_spec(self) -> nest.Nest:
        return self._action_spec

    def _observation(self, obs: Any) -> Any:
        # EnvPool hands over a fresh buffer with every batch (it never writes into an
        # array it returned; tests/test_envpool_environment.py checks this), so the
        # tensors are views of it where the dtype is already the spec's (else cast copies).
        if self._obs_dtype is not None:
            return torch.from_numpy(np.asarray(obs, dtype=self._obs_dtype))
        return nest.map_structure(
            lambda x, dtype: torch.from_numpy(np.asarray(x, dtype=dtype)), obs, self._obs_dtypes
        )

    def _in_env_order(self, info: dict[str, Any], *outputs: Any) -> tuple[Any, ...]:
        """``outputs`` with rows sorted by ``info["env_id"]`` (already so in synchronous mode)."""
        ids = np.asarray(info["env_id"])
        if ids.tobytes() == self._env_ids_bytes:  # the usual case, checked cheaply
            return outputs
        order = np.argsort(ids)
        if not np.array_equal(ids[order], self._env_ids):
            raise RuntimeError(
                f"EnvPool returned env ids {ids.tolist()}, not 0..{self._num_envs - 1}"
            )
        return tuple(nest.map_structure(lambda x: np.asarray(x)[order], out) for out in outputs)

    def reset(self) -> TimeStep:
        obs, info = self._env.reset()
        (obs,) = self._in_env_order(info, obs)
        self._first_next[:] = False
        self._any_first_next = False
        self._check.restart()
        self._check.check(obs, None)
        self._check.check_action_mask(obs)
        observation = self._observation(obs)
        return first_time_step(observation, self._zero_action, self._env_id)

    def step(self, action: Any) -> TimeStep:
        self.step_async(action)
        return self.step_wait()

    def step_async(self, action: Any) -> None:
        """Checks ``action`` and hands it to EnvPool's threads, which step while the
        caller goes on; :meth:`step_wait` collects the result."""
        if self._applied is not None:
            raise RuntimeError("step_async called twice without step_wait")
        np_action, applied = self._actions(action, self._first_next)
        direct = self._direct
        if direct is not None and self._direct_ready and direct.pool is self._env:
            direct.send(np_action)
        else:
            self._env.send(np_action)
            self._direct_ready = self._actions.single_leaf
        self._applied = applied
        self._applied_np = np_action

    def step_wait(self) -> TimeStep:
        """The result of the step :meth:`step_async` started."""
        applied = self._applied
        if applied is None:
            raise RuntimeError("step_wait called without step_async")
        self._applied = None
        direct = self._direct
        if direct is not None and direct.pool is self._env:
            obs, reward, terminated, truncated, info = direct.recv()
        else:
            obs, reward, terminated, truncated, info = self._env.recv()
        obs, reward, terminated, truncated = self._in_env_order(
            info, obs, reward, terminated, truncated
        )
        reward = np.asarray(reward, dtype=np.float32)  # EnvPool's own buffer: ours to edit
        done = terminated | truncated
        self._check.advance(self._first_next if self._any_first_next else None)
        if not self._any_first_next and not done.any():  # the usual case: all MID
            # (numpy copies of the constant rows: cheaper than torch's clone)
            step_type = torch.from_numpy(self._mid.copy())
            discount = torch.from_numpy(self._ones.copy())
            prev_action = applied
        else:  # numpy throughout: nearly every step of many short episodes comes here
            first = self._first_next
            not_first = ~first
            last = done & not_first
            step_type = self._mid.copy()
            step_type[first] = _FIRST
            step_type[last] = _LAST
            discount = self._ones.copy()
            discount[terminated & not_first] = 0.0
            step_type, discount = torch.from_numpy(step_type), torch.from_numpy(discount)
            prev_action = applied
            if self._any_first_next:
                reward[first] = 0.0
                if self._actions.single_leaf:  # in numpy (a copy: `applied` may share
                    zeroed = self._applied_np.copy()  # memory with the caller's action)
                    zeroed[first] = 0
                    prev_action = torch.from_numpy(zeroed)
                else:
                    prev_action = nest.zero_rows(applied, torch.from_numpy(not_first))
            self._first_next = last
            self._any_first_next = bool(last.any())
        self._check.check(obs, reward)
        self._check.check_action_mask(obs, ignore=self._first_next)
        observation, reward = self._observation(obs), torch.from_numpy(reward)
        return TimeStep(
            step_type=step_type,
            reward=reward,
            discount=discount,
            observation=observation,
            prev_action=prev_action,
            env_id=self._env_id,
        )

    def render(self) -> Any:
        """A tuple of every environment's frame; needs ``env_kwargs={"render_mode": ...}``."""
        if getattr(self._env, "render_mode", None) is None:
            raise NotImplementedError(
                "EnvPoolEnvironment renders only when created with "
                "env_kwargs={'render_mode': 'rgb_array'}"
            )
        frames = self._env.render(env_ids=self._env_ids)
        return None if frames is None else tuple(frames)

    def close(self) -> None:
        self._env.close()
