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

import os
import signal
import sys
from types import FrameType

from absl import app, flags, logging

from alf.bin.cli import declare_main_flags, print_error, stray_arguments_error
from alf.errors import EXIT_TRAINING_ERROR, EXIT_USER_ERROR
from alf.run_dir import layout

flags.DEFINE_string("root_dir", None, "Directory of the run's files (created if missing).")
flags.DEFINE_string("conf", None, "The .gin config file.")
flags.DEFINE_multi_string("conf_param", [], "A gin binding 'Name.param=value'; wins over --conf.")
flags.DEFINE_string(
    "device", None, "Training device: cpu, cuda or cuda:N (sets TrainerConfig.device)."
)
FLAGS = flags.FLAGS
_OWN_FLAGS = ("root_dir", "conf", "conf_param", "device")



def _fail(message: str, code: int, status_dir: str | None = None) -> None:
    """Prints ``message`` as the one error line and exits with ``code``; records the
    failure in ``status_dir``'s status file when given (rank 0 of a run that started)."""
    if status_dir is not None:
        layout.write_status(
            status_dir, layout.RunStatus.FAILED, error=message, exit_code=code
        )
    sys.exit(print_error("alf.bin.train", message, code))


def _ranked(message: str, context: object | None) -> str:
    rank = getattr(context, "rank", None)
    return message if rank is None or message.startswith("rank ") else f"rank {rank}: {message}"


def main(argv: list[str]) -> None:
    """Loads the config, builds the trainer and trains; see the module docstring."""
    stray = stray_arguments_error(argv, takes_bindings=True)
    if stray:
        _fail(stray, EXIT_USER_ERROR)
    if not FLAGS.root_dir:
        _fail("--root_dir is required", EXIT_USER_ERROR)
    if not FLAGS.conf and not FLAGS.conf_param:
        _fail("--conf is required (or bindings through --conf_param)", EXIT_USER_ERROR)
    root_dir = os.path.abspath(os.path.expanduser(FLAGS.root_dir))
    if os.environ.get("RANK", "0") == "0":
        # Before the heavy imports below (torch, gymnasium: seconds), so the user sees at
        # once that the command started.
        conf = FLAGS.conf or "the --conf_param bindings"
        print(f"alf.bin.train: building {conf} into {root_dir}", flush=True)

    import gymnasium

    from alf import config as alf_config
    from alf.configurables import import_configurables
    from alf.errors import AlfError, TrainingError
    from alf.trainers import RLTrainer, TrainerConfig
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
    conf_params = list(FLAGS.conf_param)
    if FLAGS.device:
        conf_params.append(f"TrainerConfig.device = {FLAGS.device!r}")
    context = None
    try:
        import_configurables()
        alf_config.load_config(FLAGS.conf, conf_params)
        config = TrainerConfig()
        context = distributed.init_distributed(
            device=distributed.resolve_device(
                config.device,
                local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                world_size=int(os.environ.get("WORLD_SIZE", "1")),
            ),
            timeout_s=config.distributed_timeout_s,
        )
        trainer = RLTrainer(config=config, root_dir=root_dir, distributed=context)
    except AlfError as err:
        _fail(_ranked(str(err), context), err.exit_code)
    except (ValueError, TypeError, gymnasium.error.Error) as err:
        _fail(_ranked(f"invalid configuration: {err}", context), EXIT_USER_ERROR)
    except OSError as err:
        _fail(f"cannot use root_dir '{root_dir}': {err}", EXIT_USER_ERROR)

    if interrupts:
        trainer.request_stop()
    status_dir = root_dir if trainer.is_main else None
    if status_dir is not None:
        layout.write_status(
            status_dir,
            layout.RunStatus.RUNNING,
            num_env_steps=trainer.config.num_env_steps,
            num_iterations=trainer.config.num_iterations,
        )
    try:
        result = trainer.train()
    except TrainingError as err:
        _fail(_ranked(str(err), context), err.exit_code, status_dir)
    except RuntimeError as err:
        if context is None or not distributed.is_communication_error(err):
            if status_dir is not None:
                layout.write_status(status_dir, layout.RunStatus.FAILED, error=repr(err))
            raise
        _fail(
            f"rank {context.rank}: lost contact with the other ranks ({err}); another rank "
            "probably died: its output has the cause",
            EXIT_TRAINING_ERROR,
            status_dir,
        )
    except BaseException as err:
        if status_dir is not None:
            layout.write_status(status_dir, layout.RunStatus.FAILED, error=repr(err))
        raise
    finally:
        trainer.close()
        distributed.shutdown_distributed()
    if status_dir is not None:
        state = layout.RunStatus.STOPPED if result["stopped_early"] else (
            layout.RunStatus.FINISHED
        )
        layout.write_status(
            status_dir,
            state,
            iteration=result["iteration"],
            env_steps=result["env_steps"],
            num_env_steps=trainer.config.num_env_steps,
            eval_average_return=result.get("eval_average_return"),
        )
    summary = f"Finished at iteration {result['iteration']} ({result['env_steps']} env steps)"
    if "eval_average_return" in result:
        summary += f"; evaluation average return {result['eval_average_return']:.2f}"
    if result.get("reached_target"):
        summary += " (reached TrainerConfig.stop_at_eval_return)"
    if result["stopped_early"]:
        summary = (
            f"Stopped by signal at iteration {result['iteration']}; checkpoint written"
            if result["iteration"]
            else "Stopped by signal before the first iteration; nothing to checkpoint"
        )
    if context is not None:
        summary = f"rank {context.rank}: {summary}; parameters sha256 " + (
            distributed.parameter_digest(trainer.algorithm)
        )
    logging.info("%s", summary)
    print(summary, flush=True)


def run() -> None:
    """Console-script entry point."""
    declare_main_flags(FLAGS, _OWN_FLAGS, __doc__)
    app.run(main)


if __name__ == "__main__":
    run()
