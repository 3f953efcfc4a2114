"""``python -m alf.bin.play --record_file`` of a MuJoCo environment on a headless machine
(no display, ``MUJOCO_GL`` unset): a video when an OpenGL backend works here, otherwise
one clear line, exit status 2, and nothing left behind. (CartPole's video is tested in
``test_cli``.)"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers_cli import (
    CONF,
    DEFAULT_TIMEOUT_S,
    REPO,
    cli_env,
    error_lines,
    play_cmd,
    run_cli,
    snapshot,
    train_cmd,
)

pytest.importorskip("mujoco")

PLAY = "alf.bin.play"
HOPPER_CONF = CONF.parent / "ppo_hopper.gin"
TINY_HOPPER = (
    "create_environment.num_parallel_environments=1",
    "TrainerConfig.unroll_length=8",
    "TrainerConfig.num_iterations=1",
    "TrainerConfig.evaluate=False",
    "PPOAlgorithm.num_epochs=1",
    "PPOAlgorithm.mini_batch_size=8",
)
EPISODE_STEPS = 5
NO_BACKEND = (
    "alf.bin.play: error: cannot record video of 'Hopper-v5' on this headless machine: "
    "no working MuJoCo OpenGL backend (tried egl, osmesa; install libegl1 or libosmesa6, "
    "or set MUJOCO_GL)"
)

# Whether MuJoCo renders off-screen here with MUJOCO_GL's backend.
PROBE = """
import mujoco
model = mujoco.MjModel.from_xml_string("<mujoco/>")
with mujoco.Renderer(model, 8, 8) as renderer:
    renderer.update_scene(mujoco.MjData(model))
    renderer.render()
"""


def headless_env(**extra: str) -> dict[str, str]:
    """The environment of a command on a machine without a display, ``MUJOCO_GL`` unset."""
    env = cli_env()
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM"):
        env.pop(name, None)
    return {**env, **extra}


def run_with_env(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEFAULT_TIMEOUT_S,
        check=False,
    )


def backend_works_here() -> bool:
    """Whether MuJoCo renders headless here with ``egl`` or ``osmesa``."""
    return any(
        run_with_env([sys.executable, "-c", PROBE], headless_env(MUJOCO_GL=backend)).returncode == 0
        for backend in ("egl", "osmesa")
    )


@pytest.fixture(scope="module")
def hopper_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PPO Hopper run trained for one tiny iteration."""
    root = tmp_path_factory.mktemp("hopper") / "run"
    result = run_cli(train_cmd(root, *TINY_HOPPER, conf=HOPPER_CONF))
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def plays(hopper_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Headless plays of the run recording a video, run concurrently once: as the machine
    is, and with no backend that can work (``PYOPENGL_PLATFORM=glx`` makes MuJoCo refuse
    both egl and osmesa)."""
    videos = tmp_path_factory.mktemp("videos")
    before = snapshot(hopper_run)

    def play(name: str, **env: str) -> subprocess.CompletedProcess:
        cmd = play_cmd(
            hopper_run,
            "--num_episodes=1",
            f"--record_file={videos / name / 'hopper.mp4'}",
            f"--conf_param=create_environment.max_episode_steps={EPISODE_STEPS}",
        )
        return run_with_env(cmd, headless_env(**env))

    with ThreadPoolExecutor(max_workers=3) as pool:
        works = pool.submit(backend_works_here)
        headless = pool.submit(play, "headless")
        no_backend = pool.submit(play, "no_backend", PYOPENGL_PLATFORM="glx")
        results = {"headless": headless.result(), "no_backend": no_backend.result()}
    return {
        **results,
        "works": works.result(),
        "videos": videos,
        "before": before,
        "after": snapshot(hopper_run),
    }


def assert_refused_cleanly(result: subprocess.CompletedProcess, video_dir: Path) -> None:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr
    assert error_lines(result.stderr, PLAY) == [NO_BACKEND], result.stderr
    assert not video_dir.exists()  # no partial video, nor the folder made for it


def test_headless_video_of_a_mujoco_env(plays: dict) -> None:
    result, video_dir = plays["headless"], plays["videos"] / "headless"
    if not plays["works"]:
        assert_refused_cleanly(result, video_dir)
        return
    assert result.returncode == 0, result.stderr[-3000:]
    video = video_dir / "hopper.mp4"
    assert f"video: {video} (" in result.stdout
    assert [p.name for p in video_dir.iterdir()] == ["hopper.mp4"]  # no partial file
    head = video.read_bytes()[:12]
    assert head[4:8] == b"ftyp", head  # an ISO-BMFF (mp4) container
    assert plays["after"] == plays["before"]


def test_no_working_backend_is_one_line_and_changes_nothing(plays: dict) -> None:
    assert_refused_cleanly(plays["no_backend"], plays["videos"] / "no_backend")
    assert plays["after"] == plays["before"]
