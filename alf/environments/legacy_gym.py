"""Training environments written against the old ``gym`` API, unchanged.

An old-API environment's ``reset()`` returns the observation alone, it may be seeded by a
``seed(seed)`` method, its ``step`` returns ``(obs, reward, done, info)`` with
``info["TimeLimit.truncated"]`` set when a time limit ended the episode, and it renders
with ``render(mode=...)``. :class:`LegacyEnvAdapter` turns such an environment into a
Gymnasium one: ``done`` without ``TimeLimit.truncated`` is *terminated* (discount 0),
``TimeLimit.truncated`` is *truncated* (discount 1, values bootstrap).

To train one, register it with Gymnasium in its own module and turn on the adapter::

    # my_module.py
    import gymnasium
    gymnasium.register(id="MyEnv-v0", entry_point="my_module:MyEnv", max_episode_steps=500)

    # the config
    create_environment.env_name = "my_module:MyEnv-v0"
    suite_gym.load.legacy_api = True

:func:`make_legacy` builds the environment from the registered entry point and keyword
arguments directly (not with ``gymnasium.make``, whose wrappers expect the new API),
adapts it, then applies Gymnasium's ``TimeLimit`` for ``max_episode_steps`` (given, or
registered). The old ``gym`` package is not needed: its spaces are converted by duck
typing (:func:`convert_space`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator

__all__ = ["LegacyEnvAdapter", "convert_space", "make_legacy"]


def convert_space(space: Any) -> gym.spaces.Space:
    """A Gymnasium space equal to an old ``gym`` space (Gymnasium spaces pass through).

    Old spaces are recognized by their class name (``Box``, ``Discrete``,
    ``MultiDiscrete``, ``MultiBinary``, ``Tuple``, ``Dict``) and their usual attributes.

    Raises:
        TypeError: the space is of no kind listed above.
    """
    if isinstance(space, gym.spaces.Space):
        return space
    kind = type(space).__name__
    if kind == "Box":
        dtype = np.dtype(space.dtype)
        return gym.spaces.Box(
            low=np.asarray(space.low, dtype=dtype),
            high=np.asarray(space.high, dtype=dtype),
            shape=tuple(space.shape),
            dtype=dtype,
        )
    if kind == "Discrete":
        return gym.spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.asarray(space.nvec))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(space.n)
    if kind == "Tuple":
        return gym.spaces.Tuple([convert_space(s) for s in space.spaces])
    if kind == "Dict":
        return gym.spaces.Dict({k: convert_space(s) for k, s in dict(space.spaces).items()})
    raise TypeError(f"Cannot convert space {space!r} of type {type(space)} to a Gymnasium space")


class LegacyEnvAdapter(gym.Env):
    """A Gymnasium environment around an environment written for the old ``gym`` API.

    ``reset(seed=s)`` calls the environment's ``seed(s)`` method (if it has one) before
    its ``reset()``, so ``create_environment``'s seeding (environment ``i`` gets
    ``seed + i``) reaches it; an environment without ``seed`` is not seeded. ``step``
    maps ``(obs, reward, done, info)`` to ``(obs, reward, terminated, truncated, info)``
    with ``truncated = done and info.get("TimeLimit.truncated", False)`` and
    ``terminated = done and not truncated``. ``render()`` calls
    ``render(mode=render_mode)``.

    Args:
        env: the old-API environment.
        render_mode: the mode ``render()`` asks for (e.g. ``"rgb_array"``), or None.
    """

    def __init__(self, env: Any, *, render_mode: str | None = None) -> None:
        self.env = env
        self.observation_space = convert_space(env.observation_space)
        self.action_space = convert_space(env.action_space)
        metadata = dict(getattr(env, "metadata", None) or {})
        if "render_modes" not in metadata and "render.modes" in metadata:
            metadata["render_modes"] = list(metadata["render.modes"])
        if "render_fps" not in metadata and "video.frames_per_second" in metadata:
            metadata["render_fps"] = metadata["video.frames_per_second"]
        self.metadata = metadata
        self.render_mode = render_mode

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None and callable(getattr(self.env, "seed", None)):
            self.env.seed(seed)
        return self.env.reset(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        result = self.env.step(action)
        if len(result) != 4:
            raise ValueError(
                f"A legacy environment's step must return (obs, reward, done, info), got "
                f"{len(result)} values: is {type(self.env).__name__} a Gymnasium environment "
                "(then drop suite_gym.load.legacy_api)?"
            )
        obs, reward, done, info = result
        info = dict(info or {})
        truncated = bool(done) and bool(info.get("TimeLimit.truncated", False))
        terminated = bool(done) and not truncated
        return obs, float(reward), terminated, truncated, info

    def render(self) -> Any:
        if self.render_mode is None:
            return None
        return self.env.render(mode=self.render_mode)

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def make_legacy(
    env_id: str,
    *,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> gym.Env:
    """Builds the old-API environment registered as ``env_id`` and adapts it.

    Args:
        env_id: a Gymnasium id whose entry point makes an old-API environment.
        render_mode: the mode of ``render()`` (old environments get it at render time).
        max_episode_steps: time limit applied by Gymnasium's ``TimeLimit`` (default: the
            registered one; none if neither is set).
        env_kwargs: keyword arguments for the entry point, over the registered ones.

    Returns:
        The adapted environment (a :class:`LegacyEnvAdapter`, maybe in a ``TimeLimit``).
    """
    spec = gym.spec(env_id)
    creator = spec.entry_point
    if isinstance(creator, str):
        creator = load_env_creator(creator)
    if creator is None:
        raise ValueError(f"Environment id '{env_id}' has no entry point")
    legacy_env = creator(**{**spec.kwargs, **(env_kwargs or {})})
    env: gym.Env = LegacyEnvAdapter(legacy_env, render_mode=render_mode)
    limit = spec.max_episode_steps if max_episode_steps is None else max_episode_steps
    if limit is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=limit)
    return env
