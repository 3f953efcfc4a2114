r"""Trains every grid point x seed of a config, each as its own ``alf.bin.train`` run.

Usage::

    python -m alf.bin.sweep --conf=alf/examples/ppo_cart_pole.gin --root_dir=~/sweeps/cp \
        --seeds=0,1,2 [--grid='PPOAlgorithm.num_epochs=[4,10]' ...] \
        [--conf_param='TrainerConfig.num_env_steps=50000' ...] [--jobs=2]

Each run lives in ``root_dir/<grid point>/seed-<k>/`` (``<grid point>`` is
``param=value,...``, or the config's name without a grid), an ordinary run directory:
``alf.bin.play``, ``alf.bin.plot`` and ``alf.bin.report`` work on it. Running the same
command again skips finished runs and resumes interrupted ones from their checkpoints.
Ctrl-C (or SIGTERM) stops every run with a checkpoint; a failed run is reported with its
log (``train.log`` in its directory) and does not stop the others. Exit status: 0 when
every run finished, 1 if one failed, 2 for bad arguments, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys

from alf.bin.cli import print_error, tool_prog
from alf.experiments.launchers.flags import add_launcher_flags, launch_options

EXIT_USAGE = 2


def _default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def build_parser() -> argparse.ArgumentParser:
    """The command-line flags."""
    parser = argparse.ArgumentParser(
        prog=tool_prog("alf.bin.sweep"),
        description="Train every grid point x seed of a config as separate alf.bin.train runs.",
    )
    parser.add_argument("--conf", required=True, help="the .gin config file")
    parser.add_argument("--root_dir", required=True, help="directory of the sweep's runs")
    parser.add_argument("--seeds", default="0", help="seeds, e.g. 0,1,2 or 0-4 (default: 0)")
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        help="'Name.param=[v1, v2, ...]' (repeatable: the grid is their product)",
    )
    parser.add_argument(
        "--conf_param", action="append", default=[], help="a binding given to every run"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=_default_jobs(),
        help="runs at once (default: the machine's cores, %(default)s here)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per run unless the config sets TrainerConfig.torch_num_threads",
    )
    parser.add_argument(
        "--status_interval_s",
        type=float,
        default=60.0,
        help="seconds between status tables (default %(default)s)",
    )
    add_launcher_flags(parser)
    return parser


def _fail(message: str) -> None:
    sys.exit(print_error("alf.bin.sweep", message, EXIT_USAGE))


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, checks the config and runs the sweep; returns the exit status."""
    args = build_parser().parse_args(argv)
    print(f"alf.bin.sweep: sweeping {args.conf} into {args.root_dir}", flush=True)
    from alf.experiments.grid import GridError
    from alf.experiments.launcher import check_bindings
    from alf.experiments.launchers import LauncherError, make_launcher
    from alf.experiments.sweep import Sweep, parse_seeds

    if args.jobs < 1:
        _fail(f"--jobs must be >= 1, got {args.jobs}")
    if args.threads < 1:
        _fail(f"--threads must be >= 1, got {args.threads}")
    if not os.path.isfile(args.conf):
        _fail(f"config file not found: '{args.conf}'")
    try:
        seeds = parse_seeds(args.seeds)
        sweep = Sweep(
            conf=args.conf,
            root_dir=args.root_dir,
            seeds=seeds,
            grid=args.grid,
            conf_params=args.conf_param,
            jobs=args.jobs,
            threads=args.threads,
            status_interval_s=args.status_interval_s,
        )
    except (GridError, ValueError) as err:
        _fail(str(err))
    # Every grid point binds the same names: loading the first one checks them all.
    error = check_bindings(args.conf, sweep.runs[0].spec.conf_params)
    if error:
        _fail(error)
    try:  # before anything is started: a missing package, a cluster that does not answer
        sweep.launcher = make_launcher(launch_options(args, sweep.root_dir))
    except LauncherError as err:
        _fail(str(err))
    return sweep.run_with_signals()


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
