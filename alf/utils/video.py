"""Videos of episodes: frames appended to an mp4 as they are rendered (never all held
in memory), written beside the target and renamed once complete, so a failed recording
leaves no partial file. ``alf.bin.play --record_file`` and the videos a run records while
training (``TrainerConfig.video_interval``) use them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["FrameRecorder", "RenderError", "VideoWriter"]


class VideoWriter:
    """Appends frames to an mp4 through imageio (with ffmpeg).

    The frames go to a temporary file beside ``path``, renamed to ``path`` by
    :meth:`close` when the video is kept.

    Args:
        path: the ``.mp4`` to write (missing folders are created).
        fps: frames per second.

    Raises:
        ImportError: imageio or imageio-ffmpeg is not installed (the ``[video]`` extra).
        OSError: the file cannot be written.
    """

    def __init__(self, path: str, fps: int) -> None:
        import imageio.v2 as imageio

        self.path = os.path.abspath(path)
        base, ext = os.path.splitext(self.path)
        self._partial = f"{base}.partial-{os.getpid()}{ext}"
        self._created_dirs = _missing_dirs(os.path.dirname(self.path))
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._writer = imageio.get_writer(self._partial, fps=fps, macro_block_size=1)
        except BaseException:
            _remove_video(self._partial, self._created_dirs)
            raise
        self.num_frames = 0

    def append(self, frame: np.ndarray) -> None:
        """Adds one ``[H, W, 3]`` uint8 frame."""
        self._writer.append_data(frame)
        self.num_frames += 1

    def close(self, *, keep: bool = True) -> None:
        """Finishes the video: renamed to ``path`` if ``keep``, else removed (with the
        folders created for it, if left empty)."""
        try:
            self._writer.close()
        finally:
            if keep:
                if os.path.exists(self._partial):  # (not if no frame was rendered)
                    os.replace(self._partial, self.path)
            else:
                _remove_video(self._partial, self._created_dirs)


def _missing_dirs(path: str) -> list[str]:
    """The folders of ``path`` that do not exist yet, innermost first."""
    missing = []
    while not os.path.exists(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def _remove_video(path: str, created_dirs: Sequence[str]) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    for directory in created_dirs:
        try:
            os.rmdir(directory)
        except OSError:  # not empty, or gone
            break


class RenderError(Exception):
    """The environment failed to render a frame (the message is one line)."""


class FrameRecorder:
    """Forwards an ALF environment (one built with ``render_mode="rgb_array"``) and
    writes the frame rendered after every reset and step.

    Args:
        env: the environment.
        writer: where the frames go.
    """

    def __init__(self, env: Any, writer: VideoWriter) -> None:
        self._env = env
        self._writer = writer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def _capture(self) -> None:
        try:
            frame = self._env.render()
        except Exception as err:
            raise RenderError(" ".join(f"{type(err).__name__}: {err}".split())) from err
        if isinstance(frame, tuple | list):
            frame = frame[0]
        if frame is not None:
            self._writer.append(frame)

    def reset(self) -> Any:
        """Resets the environment and records the first frame."""
        time_step = self._env.reset()
        self._capture()
        return time_step

    def step(self, action: Any) -> Any:
        """Steps the environment and records the frame."""
        time_step = self._env.step(action)
        self._capture()
        return time_step
