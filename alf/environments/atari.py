"""The Atari preset: the standard preprocessing of Atari 2600 games (the ``[atari]`` extra).

``suite_gym.load(..., preset="atari")`` builds an ALE game through Gymnasium with this
preprocessing, and ``create_environment(vectorization_mode="envpool")`` gives EnvPool the
same options, so a config switches between the backends by changing only
``create_environment.vectorization_mode``. The options are bound on :class:`AtariPreset`,
e.g. ``AtariPreset.noop_max = 0``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import gymnasium as gym

from alf.config import configurable
from alf.environments.wrappers import ChannelFirst, RewardSign

__all__ = ["AtariPreset", "EpisodicLife", "envpool_atari_id"]

_ATARI_ID = re.compile(r"^(?:ALE/)?(?P<game>[A-Za-z0-9]+?)(?:NoFrameskip|Deterministic)?-v\d+$")


def envpool_atari_id(env_id: str) -> str | None:
    """The EnvPool id of a Gymnasium Atari id, e.g. ``"Pong-v5"`` for ``"ALE/Pong-v5"``,
    ``"PongNoFrameskip-v4"`` or ``"Pong-v5"``; None for an id not shaped like an Atari one
    (whether EnvPool has the game is for the caller to check)."""
    match = _ATARI_ID.match(env_id)
    return None if match is None else f"{match['game']}-v5"


@configurable
class EpisodicLife(gym.Wrapper):
    """Ends an episode, as *terminated*, whenever the ALE game loses a life.

    ``reset()`` after a lost life does not restart the game: it takes one no-op step and
    returns its observation, so the next episode continues from where the life was lost.
    Only when the game is really over (or truncated, or a seed is given) is the wrapped
    environment reset. Wrap it outside the frame skipping, so the no-op step is one agent
    step.

    Args:
        env: an ALE environment (``env.unwrapped.ale`` must exist).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def _ale_lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = bool(terminated or truncated)
        lives = self._ale_lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # no-op
            if terminated or truncated:  # the game ended during the no-op step
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = self._ale_lives()
        return obs, info


@configurable
@dataclasses.dataclass(frozen=True, kw_only=True)
class AtariPreset:
    """Options of the Atari preset (``suite_gym.load.preset = "atari"``).

    The game is built with ``frameskip=1`` and these steps (gymnasium's
    ``AtariPreprocessing`` for the first three):

    1. up to ``noop_max`` random no-op actions after every reset of the game;
    2. ``frame_skip`` frames per agent step, the observation being the pixel-wise maximum
       of the last two frames, the reward the sum over the frames;
    3. ``screen_size`` x ``screen_size`` grayscale frames (area interpolation), as
       ``[1, screen_size, screen_size]`` uint8 observations (a channel axis first, so a
       frame stacker can concatenate along axis 0);
    4. when training: episodic life (:class:`EpisodicLife`: a lost life ends the episode
       as terminated, but the game goes on) and rewards clipped to their sign
       (:class:`~alf.environments.wrappers.RewardSign`). Environments made for
       evaluation or play get neither, so their returns are whole-game scores.

    Through EnvPool the same options map to ``stack_num=1``, ``episodic_life`` and
    ``reward_clip`` (when training), ``noop_max``, ``frame_skip``, ``img_height``,
    ``img_width``, ``gray_scale=True``, ``repeat_action_probability``,
    ``full_action_space``, ``use_fire_reset=False`` and ``max_episode_steps``.

    Attributes:
        noop_max: most no-op actions after a reset (0: none).
        frame_skip: emulator frames per agent step.
        screen_size: height and width of the observation.
        repeat_action_probability: sticky-action probability (0: deterministic
            emulator; 0.25 is the ``ALE/*-v5`` default).
        full_action_space: use all 18 actions instead of the game's minimal set.
        max_episode_steps: agent steps after which an episode is truncated (27,000 agent
            steps = 108,000 frames = 30 minutes of play). Through Gymnasium it is the
            ALE's frame limit ``max_episode_steps * frame_skip``, which also counts the
            no-op frames after a reset. ``create_environment.max_episode_steps`` wins.
        episodic_life: whether a lost life ends the episode; None: only when training.
        clip_rewards: whether rewards are clipped to their sign; None: only when
            training.
    """

    noop_max: int = 30
    frame_skip: int = 4
    screen_size: int = 84
    repeat_action_probability: float = 0.0
    full_action_space: bool = False
    max_episode_steps: int = 27_000
    episodic_life: bool | None = None
    clip_rewards: bool | None = None

    def _flags(self, training: bool) -> tuple[bool, bool]:
        episodic = training if self.episodic_life is None else self.episodic_life
        clip = training if self.clip_rewards is None else self.clip_rewards
        return episodic, clip

    def make(
        self,
        env_id: str,
        *,
        training: bool,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ) -> gym.Env:
        """Builds the ALE game ``env_id`` (registered by ``ale_py``) with the preset.

        Args:
            env_id: a registered ALE id, e.g. ``"ALE/Pong-v5"`` or ``"PongNoFrameskip-v4"``
                (the id's own frame skip and sticky actions are replaced by the preset's).
            training: whether the environment is for training (episodic life and reward
                clipping, unless set explicitly).
            render_mode: e.g. ``"rgb_array"``.
            max_episode_steps: overrides :attr:`max_episode_steps`.
            env_kwargs: further keyword arguments of ``ale_py``'s ``AtariEnv``
                (e.g. ``mode``, ``difficulty``).

        Returns:
            The preprocessed environment.
        """
        limit = self.max_episode_steps if max_episode_steps is None else max_episode_steps
        kwargs = dict(
            frameskip=1,
            repeat_action_probability=self.repeat_action_probability,
            full_action_space=self.full_action_space,
            max_num_frames_per_episode=limit * self.frame_skip,
        )
        kwargs.update(env_kwargs or {})
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        env = gym.make(env_id, **kwargs)
        env = gym.wrappers.AtariPreprocessing(
            env,
            noop_max=self.noop_max,
            frame_skip=self.frame_skip,
            screen_size=self.screen_size,
            terminal_on_life_loss=False,
            grayscale_obs=True,
        )
        env = ChannelFirst(env)
        episodic, clip = self._flags(training)
        if episodic:
            env = EpisodicLife(env)
        if clip:
            env = RewardSign(env)
        return env

    def envpool_kwargs(self, *, training: bool) -> dict[str, Any]:
        """``envpool.make`` options giving EnvPool's Atari games this preset."""
        episodic, clip = self._flags(training)
        return dict(
            stack_num=1,
            frame_skip=self.frame_skip,
            noop_max=self.noop_max,
            episodic_life=episodic,
            reward_clip=clip,
            zero_discount_on_life_loss=False,
            use_fire_reset=False,
            img_height=self.screen_size,
            img_width=self.screen_size,
            gray_scale=True,
            use_inter_area_resize=True,
            repeat_action_probability=self.repeat_action_probability,
            full_action_space=self.full_action_space,
        )
