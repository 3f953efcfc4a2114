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

from absl import app, flags

flags.DEFINE_string("root_dir", None, "Directory of a training run.")
flags.DEFINE_integer("checkpoint_step", None, "Iteration of the checkpoint (default: newest).")
flags.DEFINE_integer("num_episodes", 10, "Episodes to play.")
flags.DEFINE_integer("seed", 12345, "Seed of the played environment.")
flags.DEFINE_string("record_file", None, "Write a video of the episodes to this .mp4 file.")
flags.DEFINE_multi_string("conf_param", [], "Extra gin bindings applied after config.gin.")
FLAGS = flags.FLAGS


def _fail(message: str) -> None:
    print(f"alf.bin.play: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def main(argv: list[str]) -> None:
    """Loads the run and plays it; see the module docstring."""
    del argv
    import torch

    from alf import config as alf_config
    from alf.environments import create_environment
    from alf.trainers import Checkpointer, CheckpointError, TrainerConfig, build_algorithm
    from alf.trainers.evaluator import Evaluator
    from alf.trainers.rl_trainer import CHECKPOINT_KEYS

    if not FLAGS.root_dir:
        _fail("--root_dir is required")
    root_dir = os.path.abspath(os.path.expanduser(FLAGS.root_dir))
    conf_path = os.path.join(root_dir, "config.gin")
    if not os.path.isfile(conf_path):
        _fail(f"'{conf_path}' not found: is '{root_dir}' the root_dir of a training run?")
    try:
        with open(conf_path) as f:
            alf_config.load_config_text(f.read())
        if FLAGS.conf_param:
            import gin

            gin.parse_config(FLAGS.conf_param)
        config = TrainerConfig()
        checkpointer = Checkpointer(os.path.join(root_dir, "checkpoints"))
        state = checkpointer.load(FLAGS.checkpoint_step, CHECKPOINT_KEYS)
    except (alf_config.ConfigError, CheckpointError, ValueError) as err:
        _fail(str(err))
    if config.torch_num_threads:
        torch.set_num_threads(config.torch_num_threads)
    render_mode = "rgb_array" if FLAGS.record_file else None
    if render_mode:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # render off-screen
    env = create_environment(num_parallel_environments=1, seed=FLAGS.seed, render_mode=render_mode)
    algorithm = build_algorithm(config, env)
    try:
        algorithm.load_checkpoint_state(state["algorithm"])
    except (RuntimeError, KeyError) as err:
        _fail(f"checkpoint does not fit the run's config: {err}")

    frames: list = []
    recorder = None
    if FLAGS.record_file:
        recorder = _FrameRecorder(env, frames)
    evaluator = Evaluator(env=recorder or env, algorithm=algorithm, num_episodes=FLAGS.num_episodes)
    result = evaluator.evaluate()
    for i, (ret, length) in enumerate(zip(result.returns, result.lengths, strict=False)):
        print(f"episode {i}: return {ret:.2f}, length {length}", flush=True)
    if FLAGS.record_file:
        _write_video(FLAGS.record_file, frames, env)
        print(f"video: {FLAGS.record_file} ({len(frames)} frames)", flush=True)
    env.close()
    print(f"average_return: {result.average_return}", flush=True)


class _FrameRecorder:
    """Forwards an environment and keeps the frame rendered after every reset/step."""

    def __init__(self, env, frames: list) -> None:  # noqa: ANN001
        self._env = env
        self._frames = frames

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._env, name)

    def _capture(self) -> None:
        frame = self._env.render()
        if isinstance(frame, tuple | list):
            frame = frame[0]
        if frame is not None:
            self._frames.append(frame)

    def reset(self):  # noqa: ANN201
        time_step = self._env.reset()
        self._capture()
        return time_step

    def step(self, action):  # noqa: ANN001, ANN201
        time_step = self._env.step(action)
        self._capture()
        return time_step


def _write_video(path: str, frames: list, env) -> None:  # noqa: ANN001
    try:
        import imageio.v2 as imageio
    except ImportError:
        _fail("--record_file needs imageio and imageio-ffmpeg: pip install 'alf[all]'")
    fps = env.gym_env.metadata.get("render_fps", 30) if hasattr(env, "gym_env") else 30
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with imageio.get_writer(path, fps=fps, macro_block_size=1) as writer:
        for frame in frames:
            writer.append_data(frame)


def run() -> None:
    """Console-script entry point."""
    app.run(main)


if __name__ == "__main__":
    run()
