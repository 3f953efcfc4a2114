"""The VizDoom preset: Doom scenarios as pixel environments (the ``[vizdoom]`` extra).

``suite_gym.load(..., preset="vizdoom")`` builds a scenario registered by ``vizdoom``'s
Gymnasium wrapper (``VizdoomBasic-v1``, ``VizdoomDefendCenter-v1``,
``VizdoomHealthGathering-v1``, ...) with the preprocessing of Sample Factory's Doom
environments: the game renders at a small resolution (``RES_160X120``), repeats each
action for ``frame_skip`` tics (rewards summed), and the frame is resized to
``width`` x ``height`` (128 x 72 by default) RGB, channel first. The options are bound on
:class:`VizdoomPreset`, e.g. ``VizdoomPreset.frame_skip = 2``.

The observation is the ``[3, height, width]`` uint8 frame. When the scenario declares
game variables (Basic: ammo; DefendCenter: ammo and health) and
:attr:`VizdoomPreset.game_variables` is on, it is a ``Dict`` of the frame (key
``"screen"``) and the variables (key ``"gamevariables"``, float32).

The Doom engine writes its ``_vizdoom.ini`` (and, the first time, a ``_vizdoom/``
folder) into the current directory unless told otherwise: every environment here gets
its own temporary folder for the file instead, removed when the environment is closed,
so nothing lands in the user's working tree.
"""

from __future__ import annotations

import dataclasses
import importlib
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from alf.config import configurable
from alf.errors import UserError, install_hint

__all__ = ["VizdoomFrame", "VizdoomPreset", "VizdoomPresetError", "is_vizdoom_id"]

DOOM_TICRATE = 35
"""Doom's game tics per second (``vizdoom.DEFAULT_TICRATE``)."""

# Sections whose absence makes the engine create ./_vizdoom/ in the current directory
# when it writes a fresh _vizdoom.ini (measured with vizdoom 1.3.2: seeding the file with
# them, empty, avoids it; the engine fills in the rest).
_INI_SEED = "".join(
    f"[{game}.AutoExec]\n" for game in ("Doom", "Heretic", "Hexen", "Strife", "Chex")
)


class VizdoomPresetError(UserError, ValueError):
    """A VizDoom preset option, or an environment the preset cannot apply to."""


def is_vizdoom_id(env_id: str) -> bool:
    """Whether the registered Gymnasium id ``env_id`` is made by ``vizdoom``'s wrapper
    (its entry point lives in the ``vizdoom`` package)."""
    try:
        entry_point = gym.spec(env_id).entry_point
    except gym.error.Error:
        return False
    if callable(entry_point):
        module = getattr(entry_point, "__module__", "") or ""
    else:
        module = str(entry_point).split(":", 1)[0]
    return module == "vizdoom" or module.startswith("vizdoom.")


def _nearest_indices(source: int, target: int) -> np.ndarray:
    """Source rows (or columns) of a nearest-neighbour resize from ``source`` to
    ``target`` pixels (pixel centres mapped onto each other)."""
    centres = (np.arange(target) + 0.5) * (source / target)
    return np.minimum(centres.astype(np.int64), source - 1)


class VizdoomFrame(gym.ObservationWrapper):
    """Resizes VizDoom's ``[H, W, C]`` screen to ``[C, height, width]`` (nearest
    neighbour) and keeps the game variables as a second key, or drops them. An episode
    ended by the scenario's timeout is reported as truncated, not terminated (so value
    targets bootstrap there).

    It also owns the temporary folder of the game's ``_vizdoom.ini`` (removed on
    :meth:`close`) and reports ``render_fps`` as the agent's step rate.

    Args:
        env: a ``vizdoom`` Gymnasium environment (``Dict`` observation with ``"screen"``).
        width: width of the observation.
        height: height of the observation.
        game_variables: keep ``"gamevariables"`` (when the scenario has them).
        config_dir: the temporary folder to remove on :meth:`close` (or None).
        frame_skip: tics per agent step (for ``render_fps``).
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        width: int,
        height: int,
        game_variables: bool = True,
        config_dir: str | None = None,
        frame_skip: int = 1,
    ) -> None:
        super().__init__(env)
        screen = env.observation_space["screen"]
        source_h, source_w, channels = screen.shape
        self._rows = _nearest_indices(source_h, height)
        self._cols = _nearest_indices(source_w, width)
        frame_space = gym.spaces.Box(0, 255, (channels, height, width), dtype=np.uint8)
        variables = env.observation_space.spaces.get("gamevariables")
        self._keep_variables = game_variables and variables is not None
        if self._keep_variables:
            self.observation_space = gym.spaces.Dict(
                {"screen": frame_space, "gamevariables": variables}
            )
        else:
            self.observation_space = frame_space
        self.metadata = {**env.metadata, "render_fps": DOOM_TICRATE / max(frame_skip, 1)}
        self._cleanup = (
            weakref.finalize(self, shutil.rmtree, config_dir, ignore_errors=True)
            if config_dir is not None
            else None
        )

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """One agent step; an episode cut by the scenario's timeout is *truncated* only
        (``vizdoom`` reports it as both terminated and truncated)."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.observation(obs), reward, bool(terminated and not truncated), truncated, info

    def frame(self, screen: np.ndarray) -> np.ndarray:
        """``[H, W, C]`` -> ``[C, height, width]`` uint8, contiguous."""
        resized = screen[self._rows][:, self._cols]
        return np.ascontiguousarray(resized.transpose(2, 0, 1))

    def observation(self, observation: Any) -> Any:
        frame = self.frame(observation["screen"])
        if not self._keep_variables:
            return frame
        return {"screen": frame, "gamevariables": observation["gamevariables"]}

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._cleanup is not None:
                self._cleanup()


def _import_vizdoom(env_id: str) -> Any:
    try:
        importlib.import_module("vizdoom.gymnasium_wrapper")
        return importlib.import_module("vizdoom")
    except ImportError as err:
        raise VizdoomPresetError(
            f"suite_gym.load.preset='vizdoom' for '{env_id}' needs the 'vizdoom' package "
            f"({err}): {install_hint('vizdoom')}"
        ) from err


@configurable
@dataclasses.dataclass(frozen=True, kw_only=True)
class VizdoomPreset:
    """Options of the VizDoom preset (``suite_gym.load.preset = "vizdoom"``).

    The scenario renders at :attr:`render_resolution` without HUD changes (the scenario's
    own config decides those), each agent action is repeated for :attr:`frame_skip` tics
    (Doom runs at 35 tics a second; rewards are summed), and the RGB frame is resized to
    :attr:`width` x :attr:`height` by nearest neighbour (Sample Factory's 128 x 72 from
    160 x 120 by default), channel first. Episodes end as the scenario says: *terminated*
    at the goal or death, *truncated* at its ``episode_timeout``. Rewards are the
    scenario's (scale them with the algorithm's ``reward_scale``, e.g. Sample Factory's
    0.01 for Basic). Training and evaluation environments are the same.

    Attributes:
        frame_skip: tics per agent step.
        width: width of the observation in pixels.
        height: height of the observation in pixels.
        render_resolution: the engine's ``vizdoom.ScreenResolution`` name, e.g.
            ``"RES_160X120"`` (also the size of ``play --record_file`` videos).
        game_variables: whether the observation includes the scenario's game
            variables (a ``Dict`` with ``"screen"`` and ``"gamevariables"``); a scenario
            without any gives the frame alone either way.
    """

    frame_skip: int = 4
    width: int = 128
    height: int = 72
    render_resolution: str = "RES_160X120"
    game_variables: bool = True

    def __post_init__(self) -> None:
        for name in ("frame_skip", "width", "height"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise VizdoomPresetError(
                    f"VizdoomPreset.{name} must be a positive integer, got {value!r}"
                )

    def make(
        self,
        env_id: str,
        *,
        training: bool,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ) -> gym.Env:
        """Builds the VizDoom scenario ``env_id`` with the preset.

        Args:
            env_id: a registered id of ``vizdoom``'s Gymnasium wrapper, e.g.
                ``"VizdoomBasic-v1"``.
            training: unused (training and evaluation environments are the same).
            render_mode: e.g. ``"rgb_array"`` (frames at :attr:`render_resolution`).
            max_episode_steps: agent steps after which an episode is truncated (on top
                of the scenario's own timeout).
            env_kwargs: further keyword arguments of the wrapper's environment, e.g.
                ``max_buttons_pressed`` or DoomGame settings such as ``doom_skill``.

        Returns:
            The preprocessed environment.

        Raises:
            VizdoomPresetError: ``vizdoom`` is not installed, ``env_id`` is not a
                VizDoom scenario, or :attr:`render_resolution` is unknown.
        """
        del training
        vizdoom = _import_vizdoom(env_id)
        if not is_vizdoom_id(env_id):
            raise VizdoomPresetError(
                f"suite_gym.load.preset='vizdoom' applies to VizDoom scenarios "
                f"(Vizdoom*-v1 ids), not to '{env_id}'"
            )
        if not hasattr(vizdoom.ScreenResolution, self.render_resolution):
            raise VizdoomPresetError(
                f"VizdoomPreset.render_resolution '{self.render_resolution}' is not a "
                "vizdoom.ScreenResolution name (e.g. 'RES_160X120', 'RES_320X240')"
            )
        config_dir = tempfile.mkdtemp(prefix="alf_vizdoom_")
        ini = Path(config_dir) / "_vizdoom.ini"
        ini.write_text(_INI_SEED)
        kwargs: dict[str, Any] = dict(
            frame_skip=self.frame_skip,
            screen_resolution=self.render_resolution,
            doom_config_path=str(ini),
        )
        kwargs.update(env_kwargs or {})
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        try:
            env = gym.make(env_id, **kwargs)
        except BaseException:
            shutil.rmtree(config_dir, ignore_errors=True)
            raise
        return VizdoomFrame(
            env,
            width=self.width,
            height=self.height,
            game_variables=self.game_variables,
            config_dir=config_dir,
            frame_skip=self.frame_skip,
        )
