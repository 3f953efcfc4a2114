r"""Plays a trained agent: prints each episode's return, then ``average_return: <x>``.

Usage::

    python -m alf.bin.play --root_dir=~/runs/ppo [--checkpoint=N|FILE] \
        [--num_episodes=10] [--record_file=out.mp4 (one episode unless --num_episodes)]

The run's ``config.gin`` rebuilds the environment and algorithm; the newest checkpoint
(or that of iteration ``N``, or the checkpoint file ``FILE``) supplies the parameters;
actions come from ``predict_step`` (the greedy policy), or with ``--exploring`` from
``rollout_step`` (the exploring policy: sampled actions, epsilon-greedy for the DQN family;
SB3's ``deterministic=False``). ``--checkpoint_step=N`` is an alias of ``--checkpoint=N``.

In a two-player turn-based game (``pettingzoo:<module>`` with ``env()``),
``--opponent`` pits the run against another: a run directory of the same game (its
policy samples its moves from the newest checkpoint), ``random``, ``heuristic`` or
``module:function`` (see ``turn_based_opponent``). The run plays ``--num_episodes``
games as each seat and prints its wins, draws and losses per seat, then
``win_rate: <x>`` over all games.

``--record_file`` renders off-screen. On a Linux machine without a display, when
``MUJOCO_GL`` is unset, MuJoCo gets the first OpenGL backend that works here (``egl``,
then ``osmesa``); if none does, a MuJoCo environment is refused with one line before any
episode is played. The video is written next to ``--record_file`` and renamed to it once
complete: a play that fails leaves no partial video (and keeps an older one).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from alf.bin.cli import (
    ToolParser,
    add_saved_run_arguments,
    exit_on_user_code_failure,
    print_error,
    use_plain_log_lines,
)
from alf.errors import install_hint
from alf.run_dir import layout
from alf.utils.video import FrameRecorder, RenderError, VideoWriter


def build_parser() -> ToolParser:
    """The command line of ``alf.bin.play``."""
    parser = ToolParser(module="alf.bin.play", doc=__doc__, takes_bindings=True)
    parser.add_argument("--root_dir", help="directory of a training run")
    parser.add_argument(
        "--checkpoint",
        "--checkpoint_step",
        dest="checkpoint",
        help="iteration of the run's checkpoint, or the path of a checkpoint file "
        "(default: newest); --checkpoint_step is the same flag",
    )
    parser.add_argument(
        "--max_episode_steps",
        help="cut an episode that has not ended after this many steps, and say so "
        "(default: the environment's own time limit, else 100000)",
    )
    parser.add_argument(
        "--num_episodes",
        type=int,
        help="episodes to play (default: 10, or 1 with --record_file)",
    )
    parser.add_argument(
        "--seed", type=int, default=12345, help="seed of the played environment (default: 12345)"
    )
    parser.add_argument("--record_file", help="write a video of the episodes to this .mp4 file")
    parser.add_argument(
        "--exploring",
        action="store_true",
        help="act with the exploring policy (rollout_step: sampled actions) instead of "
        "the greedy one (predict_step)",
    )
    parser.add_argument(
        "--opponent",
        help="in a turn-based game: a run directory of the same game, random, heuristic or "
        "module:function to play against, as each seat",
    )
    add_saved_run_arguments(parser)
    return parser


_MUJOCO_GL_BACKENDS = ("egl", "osmesa")
"""MuJoCo's off-screen OpenGL backends, in the order they are tried on a headless machine."""

_MUJOCO_GL_PROBE = """
import mujoco
model = mujoco.MjModel.from_xml_string("<mujoco/>")
renderer = mujoco.Renderer(model, 8, 8)
renderer.update_scene(mujoco.MjData(model))
renderer.render()
renderer.close()
"""
"""Renders one frame with the backend ``MUJOCO_GL`` names (in a process of its own: MuJoCo
reads ``MUJOCO_GL`` when imported and loads one backend per process)."""

_MUJOCO_GL_PROBE_TIMEOUT_S = 60.0


def _fail(message: str) -> None:
    sys.exit(print_error("alf.bin.play", message))


def main(argv: Sequence[str] | None = None) -> None:
    """Loads the run and plays it; see the module docstring."""
    args = build_parser().parse(argv)
    use_plain_log_lines()
    import gymnasium

    from alf.algorithms.policy import Policy
    from alf.errors import AlfError
    from alf.trainers.evaluator import Evaluator

    root_dir, checkpoint, max_episode_steps = _checked_flags(args)
    mujoco_gl_found = True
    if args.record_file:
        _check_video_dependencies()
        mujoco_gl_found = _choose_headless_mujoco_gl()
    writer = None
    env = None
    played = False
    try:
        try:
            render_mode = "rgb_array" if args.record_file else None
            env, algorithm = load_trained_run(
                root_dir,
                checkpoint=checkpoint,
                seed=args.seed,
                render_mode=render_mode,
                conf_params=args.conf_param,
                trusted_modules=args.trust_module,
            )
            if args.record_file:
                if not mujoco_gl_found and "mujoco" in sys.modules:  # the env renders with it
                    _fail(
                        f"cannot record video of {_env_name()!r} on this headless machine: "
                        "no working MuJoCo OpenGL backend (tried "
                        f"{', '.join(_MUJOCO_GL_BACKENDS)}; install libegl1 or libosmesa6, "
                        "or set MUJOCO_GL)"
                    )
                metadata = getattr(getattr(env, "gym_env", None), "metadata", {})
                try:
                    writer = VideoWriter(args.record_file, fps=metadata.get("render_fps", 30))
                except OSError as err:
                    _fail(f"cannot write --record_file '{args.record_file}': {err}")
        except AlfError as err:
            _fail(str(err))
        except (gymnasium.error.Error, ValueError, TypeError, RuntimeError, KeyError) as err:
            exit_on_user_code_failure(err, "alf.bin.play", "while the run was being rebuilt")
            if isinstance(err, RuntimeError | KeyError):
                _fail(f"cannot load the run from '{root_dir}': {err}")
            _fail(str(err))

        if args.opponent:
            from alf.bin.match import play_match

            play_match(args, env=env, algorithm=algorithm, fail=_fail)
            return
        recorder = FrameRecorder(env, writer) if writer else env
        evaluator = Evaluator(
            env=recorder,
            policy=Policy(algorithm=algorithm),
            num_episodes=args.num_episodes,
            max_episode_steps=max_episode_steps,
            cap_setting="--max_episode_steps",
            exploring=args.exploring,
        )
        try:
            result = evaluator.evaluate()
        except RenderError as err:
            _fail(f"cannot record video of {_env_name()!r}: rendering failed: {err}")
        except AlfError as err:  # the environment failed (one line naming it)
            sys.exit(print_error("alf.bin.play", str(err), err.exit_code))
        played = True
    finally:
        if writer is not None:
            writer.close(keep=played)
        if env is not None:
            env.close()
    _print_result(result, args.record_file if writer is not None else None, writer)


def _checked_flags(args: argparse.Namespace) -> tuple[str, int | str | None, int | None]:
    """``(root_dir, checkpoint, max_episode_steps)`` from the flags, each checked (one
    error line, exit 2); ``--num_episodes`` defaults to 1 with ``--record_file``."""
    if not args.root_dir:
        _fail("--root_dir is required")
    if args.num_episodes is None:
        args.num_episodes = 1 if args.record_file else 10
    if args.num_episodes < 1:
        _fail(f"--num_episodes must be >= 1, got {args.num_episodes}")
    if args.exploring and args.opponent:
        _fail("--exploring does not apply to --opponent matches (the run plays them greedily)")
    checkpoint = _checkpoint_flag(args.checkpoint)
    max_episode_steps = _count_flag("max_episode_steps", args.max_episode_steps, minimum=1)
    root_dir = os.path.abspath(os.path.expanduser(args.root_dir))
    conf_path = os.path.join(root_dir, layout.CONFIG_FILE)
    if not os.path.isfile(conf_path):
        _fail(f"'{conf_path}' not found: is '{root_dir}' the root_dir of a training run?")
    return root_dir, checkpoint, max_episode_steps


def _print_result(result: Any, record_file: str | None, writer: VideoWriter | None) -> None:
    """Each episode's line, the video's, then ``average_return: <x>`` last."""
    for i, (ret, length, cut) in enumerate(
        zip(result.returns, result.lengths, result.cut, strict=True)
    ):
        note = f" (cut: not ended within {length} steps, --max_episode_steps)" if cut else ""
        print(f"episode {i}: return {ret:.2f}, length {length}{note}", flush=True)
    if writer is not None:
        print(f"video: {record_file} ({writer.num_frames} frames)", flush=True)
    # Four decimals: a float32 return's printed digits beyond them are noise.
    print(f"average_return: {round(result.average_return, 4)}", flush=True)


def _checkpoint_flag(text: str | None) -> int | str | None:
    """``--checkpoint``: an iteration (digits), else the path of a checkpoint file."""
    if text is None or not text.strip().isdigit():
        return text
    return int(text)


def _count_flag(name: str, text: str | None, *, minimum: int) -> int | None:
    """The value of the integer flag ``name`` given as ``text`` (None if not given);
    anything but an integer >= ``minimum`` is one error line (exit status 2)."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        _fail(f"--{name} must be an integer >= {minimum}, got {text!r}")
    return value


def load_trained_run(
    root_dir: str,
    *,
    checkpoint: int | str | None = None,
    seed: int | None = None,
    render_mode: str | None = None,
    conf_params: Sequence[str] = (),
    trusted_modules: Sequence[str] = (),
) -> tuple[Any, Any]:
    """Registers ALF's configurables and rebuilds a run's evaluation environment (one
    env) and its algorithm from ``root_dir/config.gin``, with the parameters and
    data-transformer statistics of ``checkpoint`` (an iteration or a checkpoint file;
    default: the newest); see :func:`alf.trainers.trained_run.load_trained_run`.

    Returns:
        ``(env, algorithm)``; the caller closes ``env``.
    """
    from alf.configurables import import_configurables
    from alf.trainers import trained_run

    import_configurables()
    return trained_run.load_trained_run(
        root_dir,
        checkpoint=checkpoint,
        seed=seed,
        render_mode=render_mode,
        conf_params=conf_params,
        trusted_modules=trusted_modules,
    )


def _check_video_dependencies() -> None:
    """Fails before any episode is played if the video packages are missing."""
    try:
        import imageio  # noqa: F401
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        _fail("--record_file needs imageio and imageio-ffmpeg: " + install_hint("video"))
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # render off-screen


def _choose_headless_mujoco_gl() -> bool:
    """Sets ``MUJOCO_GL`` to the first of :data:`_MUJOCO_GL_BACKENDS` that renders here,
    when it is needed: on Linux without a display (no ``DISPLAY`` or ``WAYLAND_DISPLAY``),
    with MuJoCo installed and ``MUJOCO_GL`` unset. Must run before MuJoCo is imported.

    Returns:
        False if a backend was needed and none works.
    """
    if (
        not sys.platform.startswith("linux")
        or os.environ.get("DISPLAY")
        or os.environ.get("WAYLAND_DISPLAY")
        or os.environ.get("MUJOCO_GL")
        or importlib.util.find_spec("mujoco") is None
    ):
        return True
    for backend in _MUJOCO_GL_BACKENDS:
        try:
            probe = subprocess.run(
                [sys.executable, "-c", _MUJOCO_GL_PROBE],
                env={**os.environ, "MUJOCO_GL": backend},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=_MUJOCO_GL_PROBE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            continue
        if probe.returncode == 0:
            os.environ["MUJOCO_GL"] = backend
            return True
    return False


def _env_name() -> str:
    """``create_environment.env_name`` of the loaded config."""
    from alf import config as alf_config

    value = alf_config.current_bindings().get("create_environment.env_name")
    if value is None:
        return str(alf_config.default_value("create_environment", "env_name"))
    try:
        return str(ast.literal_eval(value))
    except (ValueError, SyntaxError):
        return value


def run() -> None:
    """Console-script entry point."""
    main()


if __name__ == "__main__":
    run()
