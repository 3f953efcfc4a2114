r"""Population-based training: a population of runs of one config whose worst members
copy the best ones' checkpoints and perturb their hyperparameters as they train.

Usage::

    python -m alf.bin.pbt --conf=alf/examples/ppo_pendulum.gin --root_dir=~/pbt/pendulum \
        --population=4 --interval=20000 \
        --mutate='PPOAlgorithm.learning_rate=loguniform(1e-4, 1e-2)' [--mutate=...] \
        [--num_env_steps=200000] [--conf_param=...] [--quantile=0.25] \
        [--perturb=0.8,1.25] [--resample_probability=0.25] [--seed=0] [--jobs=N]

Members are ordinary run directories ``root_dir/member-<i>/`` trained by
``alf.bin.train`` children, in rounds of ``--interval`` env steps each (a round raises a
member's ``TrainerConfig.num_env_steps`` by the interval and resumes it). After every
round but the last, the ``--quantile`` of members with the lowest latest evaluation
return copy the newest checkpoint of a member drawn from the top ``--quantile`` and take
its hyperparameters, perturbed: each multiplied by a ``--perturb`` factor, or drawn
afresh from its space with ``--resample_probability``. A ``--mutate`` space is
``uniform(a, b)``, ``loguniform(a, b)``, ``int(a, b)``, ``logint(a, b)`` or
``choice(v1, v2, ...)`` of numbers over a numeric binding; its values are checked against
the parameter before anything starts. The lineage (each round's members, hyperparameters,
scores and copies) is ``root_dir/lineage.jsonl``; the controller's state
``root_dir/pbt.json``. Running the same command again continues where it stopped (after
Ctrl-C, ``kill -9`` of this command or of a member). ``alf.bin.plot root_dir`` draws the
population. Exit status: 0 when every round is done, 1 when a member failed, 2 for bad
arguments, 130 when interrupted (the members checkpoint; rerun to continue).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from alf.bin.cli import ToolParser, print_error
from alf.experiments.launchers.flags import add_launcher_flags, launch_options

if TYPE_CHECKING:  # (imported when the flags are checked: --help stays fast)
    from alf.experiments.pbt_space import ConfigFacts

_PROG = "alf.bin.pbt"
EXIT_USAGE = 2


def _default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def build_parser() -> ToolParser:
    """The command-line flags."""
    parser = ToolParser(module=_PROG, doc=__doc__, takes_bindings=True)
    parser.add_argument("--conf", required=True, help="the .gin config file")
    parser.add_argument("--root_dir", required=True, help="directory of the population")
    parser.add_argument("--population", type=int, required=True, help="members (>= 2)")
    parser.add_argument(
        "--mutate",
        action="append",
        required=True,
        metavar="SPACE",
        help="'Name.param=loguniform(1e-4, 1e-2)' (also uniform, int, logint, choice of "
        "numbers): a mutable hyperparameter and its initial space (repeatable)",
    )
    parser.add_argument(
        "--interval", type=int, required=True, help="env steps of each member per round"
    )
    parser.add_argument(
        "--num_env_steps",
        type=int,
        default=None,
        help="env steps of each member in all (default: the config's TrainerConfig.num_env_steps)",
    )
    parser.add_argument(
        "--conf_param",
        action="append",
        default=[],
        metavar="BINDING",
        help="a binding given to every member (repeatable)",
    )
    parser.add_argument(
        "--quantile",
        type=float,
        default=0.25,
        help="fraction of the population in the bottom (which copies) and in the top "
        "(which is copied), in (0, 0.5] (default %(default)s)",
    )
    parser.add_argument(
        "--perturb",
        default="0.8,1.25",
        help="factors a copied hyperparameter is multiplied by, one drawn per value "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--resample_probability",
        type=float,
        default=0.25,
        help="chance that a copied hyperparameter is drawn afresh from its space instead "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="member i trains with TrainerConfig.random_seed = seed + i; seeds the "
        "controller's draws (default %(default)s)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=_default_jobs(),
        help="members trained at once (default: the machine's cores, %(default)s here)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per member unless the config sets TrainerConfig.torch_num_threads",
    )
    add_launcher_flags(parser)
    return parser


def _fail(message: str, status: int = EXIT_USAGE) -> None:
    sys.exit(print_error(_PROG, message, status))


def _check_numbers(args: argparse.Namespace) -> None:
    """The flags that need no config, checked first (one error line each)."""
    if args.population < 2:
        _fail(f"--population must be >= 2, got {args.population}")
    if args.interval < 1:
        _fail(f"--interval must be >= 1 env step, got {args.interval}")
    if args.num_env_steps is not None and args.num_env_steps < 1:
        _fail(f"--num_env_steps must be >= 1, got {args.num_env_steps}")
    if not 0.0 < args.quantile <= 0.5:
        _fail(f"--quantile must be in (0, 0.5], got {args.quantile}")
    if not 0.0 <= args.resample_probability <= 1.0:
        _fail(f"--resample_probability must be in [0, 1], got {args.resample_probability}")
    if args.jobs < 1:
        _fail(f"--jobs must be >= 1, got {args.jobs}")
    if args.threads < 1:
        _fail(f"--threads must be >= 1, got {args.threads}")
    if not os.path.isfile(args.conf):
        _fail(f"config file not found: '{args.conf}'")


def _budget(args: argparse.Namespace, facts: ConfigFacts) -> int:
    """Each member's env steps in all (the flag, else the config's), checked against the
    interval."""
    num_env_steps = args.num_env_steps or facts.num_env_steps
    if not num_env_steps:
        _fail("the config sets no TrainerConfig.num_env_steps: give --num_env_steps")
    if args.interval > num_env_steps:
        _fail(
            f"--interval {args.interval:,} is more than a member's budget of "
            f"{num_env_steps:,} env steps: no round would end before the last"
        )
    if facts.steps_per_iteration and args.interval < facts.steps_per_iteration:
        _fail(
            f"--interval {args.interval:,} is less than one training iteration "
            f"({facts.steps_per_iteration:,} env steps: TrainerConfig.unroll_length x "
            "create_environment.num_parallel_environments)"
        )
    return num_env_steps


def main(argv: list[str] | None = None) -> int:
    """Parses and checks the flags and the config, then trains the population; returns
    the exit status."""
    args = build_parser().parse(argv)
    _check_numbers(args)
    print(f"{_PROG}: population of {args.conf} in {args.root_dir}", flush=True)
    from alf.experiments.pbt import EXIT_FAILED, Population
    from alf.experiments.pbt_space import (
        PopulationConfigError,
        check_config,
        parse_mutation,
        parse_perturb,
    )
    from alf.experiments.pbt_state import PopulationSettings, PopulationStateError

    try:
        perturb = parse_perturb(args.perturb)
        mutations = [parse_mutation(flag) for flag in args.mutate]
        keys = [m.key for m in mutations]
        if len(set(keys)) != len(keys):
            _fail("--mutate: give each hyperparameter once")
        facts = check_config(args.conf, args.conf_param, mutations)
    except PopulationConfigError as err:
        _fail(str(err))
    settings = PopulationSettings(
        conf=os.path.abspath(os.path.expanduser(args.conf)),
        conf_params=tuple(args.conf_param),
        mutations=tuple(m.text() for m in mutations),
        population=args.population,
        interval=args.interval,
        num_env_steps=_budget(args, facts),
        seed=args.seed,
        quantile=args.quantile,
        perturb=perturb,
        resample_probability=args.resample_probability,
    )
    from alf.experiments.launchers import LauncherError, make_launcher

    try:  # before anything is started: a missing package, a cluster that does not answer
        launcher = make_launcher(launch_options(args, args.root_dir))
    except LauncherError as err:
        _fail(str(err))
    population = Population(
        settings=settings,
        mutations=mutations,
        root_dir=args.root_dir,
        jobs=args.jobs,
        threads=args.threads,
        launcher=launcher,
    )
    try:
        population.check_root_dir()  # before anything is written
        for line in facts.warnings:
            print(f"{_PROG}: warning: {line}", file=sys.stderr, flush=True)
        status = population.run_with_signals()
    except (PopulationStateError, PopulationConfigError) as err:
        _fail(str(err))
    if status == EXIT_FAILED:
        return print_error(_PROG, population.failure, EXIT_FAILED)
    return status


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
