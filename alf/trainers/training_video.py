"""Videos recorded while a run trains (``TrainerConfig.video_interval``): one greedy
episode, played as evaluation plays it, on an environment of its own that renders off
screen, written to ``root_dir/videos/iteration-<N>.mp4`` beside the evaluation records.

A video is a by-product: if it cannot be made (no imageio, an environment that cannot
render on this machine), a warning says why once and the run trains on without videos."""

from __future__ import annotations

import os

from absl import logging

from alf.algorithms.policy import Policy
from alf.environments import create_environment
from alf.errors import install_hint
from alf.run_dir import layout
from alf.trainers.evaluator import Evaluator
from alf.utils.video import FrameRecorder, RenderError, VideoWriter

__all__ = ["TrainingVideos", "video_path"]

_VIDEO_SEED_OFFSET = 20_000
"""Added to the run's seed for the video environment (apart from evaluation's)."""


def video_path(root_dir: str, iteration: int) -> str:
    """Where the video of ``iteration`` goes."""
    return os.path.join(root_dir, layout.VIDEO_DIR, f"iteration-{iteration}.mp4")


class TrainingVideos:
    """Records one evaluation episode every ``interval`` iterations.

    Args:
        root_dir: the run's directory.
        policy: the policy that acts (its greedy steps).
        interval: iterations between videos (0: none).
        seed: the run's random seed.
        max_episode_steps: the cap of the episode (as evaluation's).
    """

    def __init__(
        self,
        *,
        root_dir: str,
        policy: Policy,
        interval: int,
        seed: int,
        max_episode_steps: int | None = None,
    ) -> None:
        self.root_dir = root_dir
        self.policy = policy
        self.interval = interval
        self.seed = seed
        self.max_episode_steps = max_episode_steps
        self.disabled = False

    def due(self, iteration: int) -> bool:
        """Whether a video is recorded after ``iteration``."""
        return bool(self.interval) and not self.disabled and iteration % self.interval == 0

    def record(self, iteration: int) -> str | None:
        """Plays and records one episode; returns the video's path (None if videos
        cannot be made here, said once in a warning)."""
        path = video_path(self.root_dir, iteration)
        env = None
        writer = None
        kept = False
        try:
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renders off screen
            env = create_environment(
                num_parallel_environments=1,
                for_evaluation=True,
                render_mode="rgb_array",
                seed=self.seed + _VIDEO_SEED_OFFSET + iteration,
            )
            fps = getattr(getattr(env, "gym_env", None), "metadata", {}).get("render_fps", 30)
            writer = VideoWriter(path, fps=int(fps or 30))
            evaluator = Evaluator(
                env=FrameRecorder(env, writer),
                policy=self.policy,
                num_episodes=1,
                max_episode_steps=self.max_episode_steps,
            )
            evaluator.evaluate()
            kept = writer.num_frames > 0
            if not kept:
                self._disable("the environment rendered no frame (render_mode='rgb_array')")
        except ImportError as err:
            self._disable(f"{err}; videos need the [video] extra: {install_hint('video')}")
        except (RenderError, OSError, ValueError, TypeError, RuntimeError) as err:
            self._disable(f"{type(err).__name__}: {err}")
        finally:
            if writer is not None:
                writer.close(keep=kept)
            if env is not None:
                env.close()
        return path if kept else None

    def _disable(self, reason: str) -> None:
        self.disabled = True
        logging.warning(
            "No video recorded (TrainerConfig.video_interval): %s; the run goes on without",
            " ".join(reason.split()),
        )
