"""Tests of the VizDoom preset (``suite_gym.load.preset = "vizdoom"``)."""

from __future__ import annotations

import sys

import gin
import numpy as np
import pytest
import torch

from alf.data_structures import StepType
from alf.environments import create_environment, suite_gym
from alf.environments.vizdoom import (
    VizdoomFrame,
    VizdoomPreset,
    VizdoomPresetError,
    is_vizdoom_id,
)
from alf.errors import UserError

pytest.importorskip("vizdoom")

BASIC = "VizdoomBasic-v1"


@pytest.fixture(autouse=True)
def _in_empty_dir(tmp_path, monkeypatch):
    """Every test runs in an empty current directory, checked to stay empty: the Doom
    engine must write its _vizdoom.ini (and _vizdoom/) elsewhere."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield
    assert sorted(p.name for p in cwd.iterdir()) == []


def test_preset_observation_and_actions():
    env = suite_gym.load(BASIC, preset="vizdoom")
    try:
        space = env.observation_space
        assert space["screen"].shape == (3, 72, 128) and space["screen"].dtype == np.uint8
        assert space["gamevariables"].shape == (1,)  # Basic: the ammo
        assert env.action_space.n == 4  # no-op, left, right, attack (one button at a time)
        assert env.metadata["render_fps"] == pytest.approx(35 / 4)
        obs, _ = env.reset(seed=0)
        assert obs["screen"].shape == (3, 72, 128) and obs["screen"].flags["C_CONTIGUOUS"]
        assert obs["screen"].max() > obs["screen"].min()
        assert obs["gamevariables"][0] == 50  # Basic starts with 50 bullets
        _, reward, terminated, truncated, _ = env.step(0)
        assert reward == -4.0  # -1 a tic, 4 tics a step
        assert not terminated and not truncated
    finally:
        env.close()


def test_episode_ends_at_the_scenario_timeout_as_truncated():
    env = suite_gym.load(BASIC, preset="vizdoom")
    try:
        env.reset(seed=0)
        steps, terminated, truncated = 0, False, False
        while not (terminated or truncated) and steps < 200:
            _, _, terminated, truncated, _ = env.step(0)
            steps += 1
        # 300 tics at 4 tics a step (the episode starts after 14 tics).
        assert truncated and not terminated and 70 <= steps <= 76
    finally:
        env.close()


def test_options_are_configurable():
    gin.parse_config(
        'suite_gym.load.preset = "vizdoom"\n'
        "VizdoomPreset.frame_skip = 2\n"
        "VizdoomPreset.width = 64\n"
        "VizdoomPreset.height = 48\n"
        "VizdoomPreset.game_variables = False\n"
    )
    env = suite_gym.load(BASIC)
    try:
        assert env.observation_space.shape == (3, 48, 64)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 48, 64)
        assert env.step(0)[1] == -2.0
    finally:
        env.close()


def test_config_folder_is_removed_on_close():
    env = suite_gym.load(BASIC, preset="vizdoom")
    env.reset(seed=0)
    ini = env.unwrapped.game.get_doom_config_path()
    assert ini.endswith("_vizdoom.ini") and "alf_vizdoom_" in ini
    env.close()
    import os

    assert not os.path.exists(os.path.dirname(ini))


def test_nearest_resize_keeps_pixels():
    env = suite_gym.load(BASIC, preset="vizdoom")
    try:
        frame_wrapper = env
        while not isinstance(frame_wrapper, VizdoomFrame):
            frame_wrapper = frame_wrapper.env
        screen = np.arange(120 * 160 * 3, dtype=np.int64).reshape(120, 160, 3)
        out = frame_wrapper.frame(screen)
        assert out.shape == (3, 72, 128)
        assert out[0, 0, 0] == screen[0, 0, 0] and out[2, -1, -1] == screen[-1, -1, 2]
        assert set(out[0, :, 0].tolist()) <= set(screen[:, 0, 0].tolist())
    finally:
        env.close()


def test_render_rgb_array():
    env = suite_gym.load(BASIC, preset="vizdoom", render_mode="rgb_array")
    try:
        env.reset(seed=0)
        frame = env.render()
        assert frame.shape == (120, 160, 3) and frame.dtype == np.uint8
    finally:
        env.close()


def _rewards(mode: str) -> list[float]:
    env = create_environment(BASIC, 2, seed=3, vectorization_mode=mode)
    actions = torch.randint(0, 4, (40, 2), generator=torch.Generator().manual_seed(0))
    try:
        time_step = env.reset()
        assert time_step.observation.shape == (2, 3, 72, 128)
        rewards = []
        for action in actions:
            time_step = env.step(action)
            rewards += time_step.reward.tolist()
            assert set(time_step.step_type.tolist()) <= {StepType.FIRST, StepType.MID, 2}
        return rewards
    finally:
        env.close()


def test_sync_and_subprocess_backends_agree():
    gin.parse_config('suite_gym.load.preset = "vizdoom"\nVizdoomPreset.game_variables = False')
    assert _rewards("sync") == _rewards("subprocess")


def test_is_vizdoom_id():
    suite_gym.resolve_env_id(BASIC)
    assert is_vizdoom_id(BASIC) and is_vizdoom_id("VizdoomDefendCenter-v1")
    assert not is_vizdoom_id("CartPole-v1") and not is_vizdoom_id("NoSuch-v0")


def test_preset_on_a_non_doom_env_names_it():
    with pytest.raises(VizdoomPresetError, match="'CartPole-v1'") as info:
        suite_gym.load("CartPole-v1", preset="vizdoom")
    assert isinstance(info.value, UserError)


def test_unknown_scenario_lists_close_matches():
    with pytest.raises(suite_gym.UnknownEnvironmentError, match="VizdoomBasic-v1"):
        suite_gym.load("VizdoomBasik-v1", preset="vizdoom")


def test_unknown_render_resolution_is_named():
    gin.parse_config('VizdoomPreset.render_resolution = "RES_123X45"')
    with pytest.raises(VizdoomPresetError, match="RES_123X45"):
        suite_gym.load(BASIC, preset="vizdoom")


@pytest.mark.parametrize("field", ["width", "height", "frame_skip"])
def test_bad_sizes_are_named(field):
    with pytest.raises(VizdoomPresetError, match=f"VizdoomPreset.{field}"):
        VizdoomPreset(**{field: 0})


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vizdoom", None)  # import vizdoom -> ImportError
    monkeypatch.setitem(sys.modules, "vizdoom.gymnasium_wrapper", None)
    with pytest.raises(UserError, match=r"alf-rl\[vizdoom\]"):
        VizdoomPreset().make(BASIC, training=True)
