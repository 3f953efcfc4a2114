r"""Tunes a config's hyperparameters with Optuna; every trial is an ``alf.bin.train`` run.

Usage::

    python -m alf.bin.tune --conf=alf/examples/ppo_cart_pole.gin --root_dir=~/tune/cp \
        --space='lr/LinearSchedule.start=loguniform(1e-4, 3e-3)' \
        --space='PPOAlgorithm.num_epochs=int(4, 20)' \
        --space='PPOAlgorithm.gae_lambda=choice(0.8, 0.9, 0.95)' \
        --trials=20 [--objective=last|best] [--conf_param=...] [--jobs=1] [--pruner=median]

Search spaces: ``uniform(a, b)``, ``loguniform(a, b)``, ``int(a, b)``, ``logint(a, b)``,
``choice(v1, v2, ...)`` (gin values). The objective is the evaluation return of each
trial (its last evaluation, or its best with ``--objective=best``), so the config must
evaluate during training (``TrainerConfig.eval_interval``) for pruning to act. Trials are
run dirs ``root_dir/trial-<n>/``; the study is ``root_dir/study.db`` (SQLite), so running
the command again continues it (``--trials`` is the study's total). The best bindings are
printed at the end as ready-to-paste gin lines. Every value of each search space is
checked against its parameter before the first trial. Exit status: 0, 1 when no trial of
the study finished (every one failed or was pruned), 2 for bad arguments (a value of a
space its parameter refuses, a corrupt ``study.db``), 130 when interrupted (the running
trials checkpoint and resume next time).
"""

from __future__ import annotations

import argparse
import os
import sys

from alf.bin.cli import print_error, tool_prog
from alf.experiments.launchers.flags import add_launcher_flags, launch_options

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The command-line flags."""
    parser = argparse.ArgumentParser(
        prog=tool_prog("alf.bin.tune"),
        description="Tune a config's hyperparameters with Optuna (each trial an ALF run).",
    )
    parser.add_argument("--conf", required=True, help="the .gin config file")
    parser.add_argument("--root_dir", required=True, help="directory of the study and its trials")
    parser.add_argument(
        "--space",
        action="append",
        default=[],
        required=True,
        help="'Name.param=loguniform(1e-5, 1e-2)' (also uniform, int, logint, choice); repeatable",
    )
    parser.add_argument("--trials", type=int, required=True, help="total trials of the study")
    parser.add_argument(
        "--objective",
        default="last",
        help="'last' or 'best' evaluation return of a trial (default: last)",
    )
    parser.add_argument(
        "--conf_param", action="append", default=[], help="a binding given to every trial"
    )
    parser.add_argument("--jobs", type=int, default=1, help="trials at once (default 1)")
    parser.add_argument(
        "--pruner", default="median", help="'median' (stop trials below the median) or 'none'"
    )
    parser.add_argument(
        "--prune_startup_trials",
        type=int,
        default=3,
        help="finished trials before the pruner acts (default 3)",
    )
    parser.add_argument(
        "--prune_warmup_steps",
        type=int,
        default=0,
        help="env steps of a trial before it can be pruned (default 0)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed (default 0)")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="trials at once through the launcher (as --jobs; with a cluster launcher, "
        "jobs on the cluster)",
    )
    parser.add_argument(
        "--storage",
        default=None,
        help="the study: 'journal' (root_dir/study.journal, safe for several processes "
        "and shared filesystems; the default with --launcher=slurm|ray) or an RDB URL "
        "(postgresql://..., mysql://...); default root_dir/study.db (SQLite)",
    )
    add_launcher_flags(parser)
    return parser


def _fail(message: str) -> None:
    sys.exit(print_error("alf.bin.tune", message, EXIT_USAGE))


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, checks the config and runs the study; returns the exit status."""
    args = build_parser().parse_args(argv)
    print(f"alf.bin.tune: tuning {args.conf} in {args.root_dir}", flush=True)
    from alf.experiments.launcher import check_bindings
    from alf.experiments.launchers import LauncherError, make_launcher
    from alf.experiments.tune import (
        EXIT_NO_TRIAL_FINISHED,
        SearchSpaceError,
        Tuner,
        check_space,
        parse_space,
    )

    if not os.path.isfile(args.conf):
        _fail(f"config file not found: '{args.conf}'")
    if args.workers is not None:
        if args.workers < 1:
            _fail(f"--workers must be >= 1, got {args.workers}")
        args.jobs = args.workers
    storage = args.storage
    if storage is None and args.launcher != "local":
        storage = "journal"
    try:
        space = [parse_space(flag) for flag in args.space]
        tuner = Tuner(
            conf=args.conf,
            root_dir=args.root_dir,
            space=space,
            trials=args.trials,
            conf_params=args.conf_param,
            objective=args.objective,
            jobs=args.jobs,
            pruner=args.pruner,
            prune_startup_trials=args.prune_startup_trials,
            prune_warmup_steps=args.prune_warmup_steps,
            seed=args.seed,
            storage=storage,
        )
    except (SearchSpaceError, ValueError) as err:
        _fail(str(err))
    try:  # every value of every space, before the first trial
        check_space(lambda params: check_bindings(args.conf, params), args.conf_param, space)
    except SearchSpaceError as err:
        _fail(str(err))
    try:  # before anything is started: a missing package, a cluster that does not answer
        tuner.launcher = make_launcher(launch_options(args, tuner.root_dir))
    except LauncherError as err:
        _fail(str(err))
    try:
        status = tuner.run_with_signals()
    except ValueError as err:  # a corrupt study.db, a study of another space in root_dir
        _fail(str(err))
    if status == EXIT_NO_TRIAL_FINISHED:
        why = f"; the first failure: {tuner.first_failure}" if tuner.first_failure else ""
        return print_error(
            "alf.bin.tune",
            f"no trial of the study in {args.root_dir} has finished{why}",
            EXIT_NO_TRIAL_FINISHED,
        )
    return status


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
