r"""Trains an agent from a gin config.

Usage::

    python -m alf.bin.train --conf=alf/examples/ppo_cart_pole.gin --root_dir=~/runs/ppo \
        [--conf_param='TrainerConfig.random_seed=1' ...]

Running again with the same ``--root_dir`` resumes from the newest checkpoint. SIGINT
(Ctrl-C) or SIGTERM writes a checkpoint and exits with status 0; a second Ctrl-C aborts.

Data-parallel training on ``N`` processes (GPUs, or CPU processes with gloo)::

    torchrun --nproc_per_node=N -m alf.bin.train --conf=... --root_dir=... [--device=cuda]

(``--nnodes=M --node_rank=K --rdzv_endpoint=HOST:PORT`` across machines; see
``docs/scaling.md``). Rank 0 writes the run's files; if a rank dies the others exit with
status 3.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

from absl import logging

from alf.bin.cli import (
    ToolParser,
    print_error,
    print_full_traceback,
    use_plain_log_lines,
    user_code_failure,
)
from alf.errors import EXIT_TRAINING_ERROR, EXIT_USER_ERROR, AlfError
from alf.run_dir import layout


def build_parser() -> ToolParser:
    """The command line of ``alf.bin.train``."""
    parser = ToolParser(module="alf.bin.train", doc=__doc__, takes_bindings=True)
    parser.add_argument("--root_dir", help="directory of the run's files (created if missing)")
    parser.add_argument("--conf", help="the .gin config file")
    parser.add_argument(
        "--conf_param",
        action="append",
        default=[],
        metavar="BINDING",
        help="a gin binding 'Name.param=value' (repeatable); wins over --conf",
    )
    parser.add_argument(
        "--device", help="training device: cpu, cuda or cuda:N (sets TrainerConfig.device)"
    )
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="on an error, print the whole traceback before the error line",
    )
    return parser


def _fail(message: str, code: int, status_dir: str | None = None) -> None:
    """Prints ``message`` as the one error line and exits with ``code``; records the
    failure in ``status_dir``'s status file when given (rank 0 of a run that started)."""
    if status_dir is not None:
        layout.write_status(status_dir, layout.RunStatus.FAILED, error=message, exit_code=code)
    sys.exit(print_error("alf.bin.train", message, code))


def _ranked(message: str, context: object | None) -> str:
    rank = getattr(context, "rank", None)
    return message if rank is None or message.startswith("rank ") else f"rank {rank}: {message}"


def main(argv: Sequence[str] | None = None) -> None:
    """Loads the config, builds the trainer and trains; see the module docstring."""
    args = build_parser().parse(argv)
    if not args.root_dir:
        _fail("--root_dir is required", EXIT_USER_ERROR)
    if not args.conf and not args.conf_param:
        _fail("--conf is required (or bindings through --conf_param)", EXIT_USER_ERROR)
    root_dir = os.path.abspath(os.path.expanduser(args.root_dir))
    use_plain_log_lines()
    if os.environ.get("RANK", "0") == "0":
        # Before the heavy imports below (torch, gymnasium: seconds), so the user sees at
        # once that the command started.
        conf = args.conf or "the --conf_param bindings"
        print(f"alf.bin.train: building {conf} into {root_dir}", flush=True)

    from alf.utils import distributed

    # Signals are caught from the start: one that arrives while the trainer is being
    # built stops the run as soon as it can (after checkpointing, if anything trained).
    interrupts = 0
    trainer = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            raise KeyboardInterrupt
        logging.warning(
            "Received %s: checkpointing and exiting after this iteration",
            signal.Signals(signum).name,
        )
        if trainer is not None:
            trainer.request_stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    trainer, context = _build_trainer(args, root_dir)
    if interrupts:
        trainer.request_stop()
    finished = False
    try:
        result = trainer.train()
        finished = True
    except AlfError as err:
        _report_failure(err, _ranked(str(err), context), err.exit_code, args.traceback)
    except RuntimeError as err:
        if context is None or not distributed.is_communication_error(err):
            raise
        message = (
            f"rank {context.rank}: lost contact with the other ranks ({err}); another rank "
            "probably died: its output has the cause"
        )
        _fail(message, EXIT_TRAINING_ERROR, root_dir if trainer.is_main else None)
    finally:
        trainer.close()
        distributed.shutdown_distributed(context, finished=finished)
    summary = _summary_line(result, root_dir)
    if context is not None:
        summary = f"rank {context.rank}: {summary}; parameters sha256 " + (
            distributed.parameter_digest(trainer.algorithm)
        )
    print(summary, flush=True)


def _build_trainer(args: argparse.Namespace, root_dir: str) -> tuple[Any, Any]:
    """Registers ALF's configurables, loads the config and builds the trainer (and the
    process group of a data-parallel run); a failure ends the command (exit 2 for what
    the user can fix; the user's own code keeps its traceback)."""
    import gymnasium

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.trainers import RLTrainer, TrainerConfig
    from alf.utils import distributed

    conf_params = list(args.conf_param)
    if args.device:
        _note_device_override(args, alf_config, import_configurables)
        conf_params.append(f"TrainerConfig.device = {args.device!r}")
    context = None
    try:
        import_configurables()
        alf_config.load_config(args.conf, conf_params)
        config = TrainerConfig()
        context = distributed.init_distributed(
            device=distributed.resolve_device(
                config.device,
                local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                world_size=int(os.environ.get("WORLD_SIZE", "1")),
            ),
            timeout_s=config.distributed_timeout_s,
        )
        return RLTrainer(config=config, root_dir=root_dir, distributed=context), context
    except AlfError as err:
        _report_failure(err, _ranked(str(err), context), err.exit_code, args.traceback)
    except Exception as err:
        user_report = user_code_failure(err, "alf.bin.train", "while the run was being built")
        if user_report is not None and not args.traceback:
            print(_ranked(user_report, context), file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)
        if isinstance(err, ValueError | TypeError | gymnasium.error.Error):
            message = _ranked(f"invalid configuration: {err}", context)
            _report_failure(err, message, EXIT_USER_ERROR, args.traceback)
        if isinstance(err, OSError):
            message = f"cannot use root_dir '{root_dir}': {err}"
            _report_failure(err, message, EXIT_USER_ERROR, args.traceback)
        raise
    raise AssertionError("unreachable")


def _note_device_override(args: argparse.Namespace, alf_config: Any, register: Any) -> None:
    """``--device`` wins over the config's ``TrainerConfig.device``, as a ``--conf_param``
    would; a note says so when the config chose another device. (A config that cannot
    be loaded is reported by the load that follows.)"""
    try:
        register()
        alf_config.load_config(args.conf, list(args.conf_param))
        configured = alf_config.current_bindings().get("TrainerConfig.device")
    except Exception:
        return
    if configured is not None and configured != repr(args.device):
        print(
            f"alf.bin.train: note: --device={args.device} overrides TrainerConfig.device="
            f"{configured} of the config",
            file=sys.stderr,
            flush=True,
        )


def _report_failure(err: BaseException, message: str, code: int, full: bool) -> None:
    """Ends the command on ``err``: its one line (after the whole traceback if ``full``,
    the ``--traceback`` flag) and ``code``. (``status.json`` was written by the trainer.)"""
    if full:
        print_full_traceback(err)
    _fail(message, code)


def _summary_line(result: dict[str, Any], root_dir: str) -> str:
    """The last line of a training command: how the run ended."""
    if result["finished_before"]:
        return (
            f"The run in {root_dir} had already finished (iteration {result['iteration']}, "
            f"{result['env_steps']} env steps); nothing was trained or written (raise "
            "TrainerConfig.num_env_steps to train it further)"
        )
    if result["stopped_early"] and result.get("stop_reason"):
        return (
            f"Stopped by a callback at iteration {result['iteration']} "
            f"({result['stop_reason']}); checkpoint written"
        )
    if result["stopped_early"]:
        if result["iteration"]:
            return f"Stopped by signal at iteration {result['iteration']}; checkpoint written"
        return "Stopped by signal before the first iteration; nothing to checkpoint"
    summary = f"Finished at iteration {result['iteration']} ({result['env_steps']} env steps)"
    if "eval_average_return" in result:
        summary += f"; evaluation average return {result['eval_average_return']:.2f}"
    if result.get("reached_target"):
        summary += " (reached TrainerConfig.stop_at_eval_return)"
    return summary


def run() -> None:
    """Console-script entry point."""
    main()


if __name__ == "__main__":
    run()
