r"""Plays a trained agent: prints each episode's return, then ``average_return: <x>``.

Usage::

    python -m alf.bin.play --root_dir=~/runs/ppo [--checkpoint_step=N] \
        [--num_episodes=10] [--record_file=out.mp4]

The run's ``config.gin`` rebuilds the environment and algorithm; the newest checkpoint
(or iteration ``N``) supplies the parameters; actions come from ``predict_step``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import app, flags

from alf.bin.cli import print_error
from alf.run_dir import layout

flags.DEFINE_string("root_dir", None, "Directory of a training run.")
flags.DEFINE_integer("checkpoint_step", None, "Iteration of the checkpoint (default: newest).")
flags.DEFINE_integer("num_episodes", 10, "Episodes to play.")
flags.DEFINE_integer("seed", 12345, "Seed of the played environment.")
flags.DEFINE_string("record_file", None, "Write a video of the episodes to this .mp4 file.")
flags.DEFINE_multi_string("conf_param", [], "Extra gin bindings applied after config.gin.")
FLAGS = flags.FLAGS
_OWN_FLAGS = ("root_dir", "checkpoint_step", "num_episodes", "seed", "record_file", "conf_param")


def _fail(message: str) -> None:
    sys.exit(print_error("alf.bin.play", message))


def main(argv: list[str]) -> None:
    """Loads the run and plays it; see the module docstring."""
    del argv
    import gymnasium

    from alf.errors import AlfError
    from alf.trainers.evaluator import Evaluator

    if not FLAGS.root_dir:
        _fail("--root_dir is required")
    if FLAGS.num_episodes < 1:
        _fail(f"--num_episodes must be >= 1, got {FLAGS.num_episodes}")
    root_dir = os.path.abspath(os.path.expanduser(FLAGS.root_dir))
    conf_path = os.path.join(root_dir, layout.CONFIG_FILE)
    if not os.path.isfile(conf_path):
        _fail(f"'{conf_path}' not found: is '{root_dir}' the root_dir of a training run?")
    if FLAGS.record_file:
        _check_video_dependencies()
    writer = None
    env = None
    try:
        try:
            render_mode = "rgb_array" if FLAGS.record_file else None
            env, algorithm = load_trained_run(
                root_dir,
                checkpoint_step=FLAGS.checkpoint_step,
                seed=FLAGS.seed,
                render_mode=render_mode,
                conf_params=FLAGS.conf_param,
            )
            if FLAGS.record_file:
                metadata = getattr(getattr(env, "gym_env", None), "metadata", {})
                writer = _VideoWriter(FLAGS.record_file, fps=metadata.get("render_fps", 30))
        except (AlfError, gymnasium.error.Error, ValueError, TypeError) as err:
            _fail(str(err))
        except (RuntimeError, KeyError) as err:
            _fail(f"cannot load the run from '{root_dir}': {err}")

        recorder = _FrameRecorder(env, writer) if writer else env
        evaluator = Evaluator(env=recorder, algorithm=algorithm, num_episodes=FLAGS.num_episodes)
        result = evaluator.evaluate()
    finally:
        if writer is not None:
            writer.close()
        if env is not None:
            env.close()
    for i, (ret, length) in enumerate(zip(result.returns, result.lengths, strict=True)):
        print(f"episode {i}: return {ret:.2f}, length {length}", flush=True)
    if writer is not None:
        print(f"video: {FLAGS.record_file} ({writer.num_frames} frames)", flush=True)
    print(f"average_return: {result.average_return}", flush=True)


def load_trained_run(
    root_dir: str,
    *,
    checkpoint_step: int | None = None,
    seed: int | None = None,
    render_mode: str | None = None,
    conf_params: Sequence[str] = (),
) -> tuple[Any, Any]:
    """Rebuilds a run's evaluation environment (one env) and its algorithm from
    ``root_dir/config.gin``, with the parameters and data-transformer statistics of the
    checkpoint of ``checkpoint_step`` (default: the newest).

    Returns:
        ``(env, algorithm)``; the caller closes ``env``.
    """
    import torch

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.environments import create_environment
    from alf.run_dir.checkpoints import read_checkpoint, restore_algorithm
    from alf.trainers import TrainerConfig, build_algorithm

    import_configurables()
    with open(os.path.join(root_dir, layout.CONFIG_FILE)) as f:
        alf_config.load_config_text(f.read(), conf_params)
    config = TrainerConfig()
    checkpoint = read_checkpoint(root_dir, checkpoint_step)
    if config.torch_num_threads:
        torch.set_num_threads(config.torch_num_threads)
    env = create_environment(
        num_parallel_environments=1, seed=seed, render_mode=render_mode, for_evaluation=True
    )
    try:
        algorithm = build_algorithm(config, env)
        # Only the module's tensors (parameters and statistics): no optimizer state.
        restore_algorithm(algorithm, checkpoint, with_optimizer=False)
    except BaseException:
        env.close()
        raise
    return env, algorithm


class _VideoWriter:
    """Appends frames to an mp4 as they are rendered (never holding them all in memory)."""

    def __init__(self, path: str, fps: int) -> None:
        import imageio.v2 as imageio

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._writer = imageio.get_writer(path, fps=fps, macro_block_size=1)
        self.num_frames = 0

    def append(self, frame: np.ndarray) -> None:
        self._writer.append_data(frame)
        self.num_frames += 1

    def close(self) -> None:
        self._writer.close()


def _check_video_dependencies() -> None:
    """Fails before any episode is played if the video packages are missing."""
    try:
        import imageio  # noqa: F401
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        _fail("--record_file needs imageio and imageio-ffmpeg: pip install 'alf[all]'")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # render off-screen


class _FrameRecorder:
    """Forwards an environment and writes the frame rendered after every reset/step."""

    def __init__(self, env: Any, writer: _VideoWriter) -> None:
        self._env = env
        self._writer = writer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def _capture(self) -> None:
        frame = self._env.render()
        if isinstance(frame, tuple | list):
            frame = frame[0]
        if frame is not None:
            self._writer.append(frame)

    def reset(self) -> Any:
        time_step = self._env.reset()
        self._capture()
        return time_step

    def step(self, action: Any) -> Any:
        time_step = self._env.step(action)
        self._capture()
        return time_step


def run() -> None:
    """Console-script entry point."""
    # Under a console script (alf-play) the main module is not this one: name its flags
    # as the program's key flags, so --help lists them (see alf.bin.train.run).
    for name in _OWN_FLAGS:
        FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS[name])
    main_module = sys.modules.get("__main__")
    if main_module is not None and not getattr(main_module, "__doc__", None):
        main_module.__doc__ = __doc__
    app.run(main)


if __name__ == "__main__":
    run()
