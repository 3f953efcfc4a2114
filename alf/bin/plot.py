r"""Plots the evaluation curves of runs, grouped into seeds of one configuration.

Usage::

    python -m alf.bin.plot DIR... [--out=curves.png] [--x=env_steps|wall_time] \
        [--aggregate=mean|iqm] [--normalized] [--title=TEXT] [--reps=2000]

Every run directory at or under the DIRs (a sweep, a single run, several sweeps) is
read; runs whose configs differ only in ``TrainerConfig.random_seed`` (or, for runs of
other frameworks, whose ``run_info.json`` names the same framework, environment and
algorithm) form a group. Each environment gets a panel; each group a line, the mean (or
IQM) of its seeds' evaluation returns, in a shaded 95% percentile-bootstrap band over
seeds. The plotted numbers go to ``<out stem>.csv`` beside the picture. Runs still
training are fine: a group's curve stops where its shortest run's does. A run whose
``config.gin`` or ``progress.jsonl`` cannot be read (not UTF-8 text) is skipped with a
warning line naming the file. A single DIR that is an ``alf.bin.pbt`` population is drawn
as one: each member's curve (a copied checkpoint drawn as a jump to the donor's score)
and each mutable hyperparameter by round; the CSV then lists each member's
evaluations. ``--normalized`` plots D4RL-normalised scores, ``100 * (R - random) /
(expert - random)``, with the reference returns that runs trained on a dataset record
in ``run_info.json`` (runs without them are left out, with a note); runs trained on
offline data alone are placed by training iteration. Exit status: 0 when written, 1
when no run has a finite evaluation yet, 2 for bad arguments (an ``--out`` that cannot
be written, no readable run).
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType
from typing import Any

from alf.bin.cli import print_error, tool_prog
from alf.errors import install_hint

EXIT_NOTHING = 1
EXIT_USAGE = 2
_PROG = "alf.bin.plot"


def build_parser() -> argparse.ArgumentParser:
    """The command-line flags."""
    parser = argparse.ArgumentParser(
        prog=tool_prog("alf.bin.plot"),
        description="Plot evaluation curves of runs grouped by config (seeds aggregated).",
    )
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="run directories or their roots")
    parser.add_argument(
        "--out",
        default="curves.png",
        help="the picture (png, pdf or svg; default %(default)s); the CSV goes beside it",
    )
    parser.add_argument(
        "--x",
        choices=("env_steps", "wall_time"),
        default="env_steps",
        help="x axis: env steps or wall-clock time of training (default %(default)s)",
    )
    parser.add_argument(
        "--aggregate",
        choices=("mean", "iqm"),
        default="mean",
        help="the line: mean or interquartile mean over seeds (default %(default)s)",
    )
    parser.add_argument(
        "--normalized",
        action="store_true",
        help="D4RL-normalised scores (runs trained on datasets with reference returns)",
    )
    parser.add_argument("--title", default=None, help="title above the panels")
    parser.add_argument(
        "--reps", type=int, default=2000, help="bootstrap resamples (default %(default)s)"
    )
    return parser


def _fail(message: str, status: int = EXIT_USAGE) -> int:
    return print_error(_PROG, message, status)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _load(runs: ModuleType, dirs: list[str]) -> tuple[list[Any], list[str]]:
    """The readable runs under ``dirs`` and a line per run skipped (printed as a
    warning when some run is left)."""
    skipped: list[str] = []
    loaded = runs.load_runs(dirs, skipped=skipped.append)
    if loaded:
        for line in skipped:
            print(f"{_PROG}: warning: skipped a run: {line}", file=sys.stderr, flush=True)
    return loaded, skipped


def _nothing_to_plot(groups: list[Any], dirs: list[str]) -> str:
    """The error line when no group has a curve: names a run whose evaluations are all
    non-finite, if there is one."""
    every = [r for g in groups for r in g.runs]
    nonfinite = [r for r in every if r.nonfinite_evals and not r.has_eval]
    if nonfinite:
        more = f" (and {len(nonfinite) - 1} more runs)" if len(nonfinite) > 1 else ""
        return f"nothing to plot: run {nonfinite[0].path}: {nonfinite[0].no_eval_reason()}{more}"
    return (
        f"nothing to plot: none of the {len(every)} runs under {', '.join(dirs)} has "
        "an evaluation record yet"
    )


def _plot_population(root_dir: str, out: str, title: str | None) -> int:
    """``alf.bin.pbt``'s population in ``root_dir``: each member's curve with its copies
    and its hyperparameters by round (:mod:`alf.experiments.pbt_plot`)."""
    from alf.experiments import pbt_plot
    from alf.experiments.pbt_state import PopulationState, PopulationStateError

    try:
        state = PopulationState.load(os.path.expanduser(root_dir))
    except PopulationStateError as err:
        return _fail(str(err))
    if state is None:
        return _fail(f"no population (pbt.json) in '{root_dir}'")
    curves = pbt_plot.member_curves(root_dir, state)
    if not any(curve.points for curve in curves):
        return _fail(f"nothing to plot: no member of {root_dir} has an evaluation yet", 1)
    csv_path = os.path.splitext(out)[0] + ".csv"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        pbt_plot.plot_population(root_dir, state, curves, out, title=title)
        pbt_plot.write_csv(curves, csv_path)
    except OSError as err:
        return _fail(f"--out '{out}': cannot write '{err.filename or out}': {err.strerror or err}")
    except ValueError as err:
        return _fail(f"--out '{out}': {err}")
    except ImportError as err:
        return _fail(f"{err}: plotting needs matplotlib ({install_hint('research')})")
    copies = sum(len(curve.copies) for curve in curves)
    print(
        f"{_PROG}: wrote {out} and {csv_path} (population of {len(curves)}, {copies} "
        f"cop{'y' if copies == 1 else 'ies'}, round {state.round + 1}: {state.phase})",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, reads the runs, draws the picture and writes the CSV; returns
    the exit status."""
    args = build_parser().parse_args(argv)
    from alf.experiments import plotting, runs
    from alf.experiments.pbt_plot import is_population

    if args.reps < 1:
        return _fail(f"--reps must be >= 1, got {args.reps}")
    out = os.path.expanduser(args.out)
    stem, ext = os.path.splitext(out)
    if not ext:
        out = f"{out}.png"
    elif ext.lower() == ".csv":
        return _fail(
            f"--out '{args.out}': give the picture's name (e.g. .png); the CSV goes beside it"
        )
    if len(args.dirs) == 1 and is_population(args.dirs[0]):
        return _plot_population(args.dirs[0], out, args.title)
    error = runs.no_run_error(args.dirs)
    if error:
        return _fail(error)
    loaded, skipped = _load(runs, args.dirs)
    if not loaded:
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        return _fail(f"no readable run: {skipped[0]}{more}")
    groups = runs.group_runs(loaded)
    curves, notes = plotting.group_curves(
        groups, x=args.x, aggregate=args.aggregate, reps=args.reps, normalized=args.normalized
    )
    for note in notes:
        print(f"{_PROG}: note: {note}", flush=True)
    num_runs = sum(len(g.runs) for g in groups)
    if not curves:
        return _fail(_nothing_to_plot(groups, args.dirs), EXIT_NOTHING)
    csv_path = plotting.csv_path_for(out)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        plotting.plot_curves(
            curves,
            out,
            x=args.x,
            aggregate=args.aggregate,
            title=args.title,
            normalized=args.normalized,
        )
        plotting.write_csv(curves, csv_path, x=args.x)
    except OSError as err:  # a folder that is read-only, a full disk
        where = err.filename or out
        return _fail(f"--out '{args.out}': cannot write '{where}': {err.strerror or err}")
    except ValueError as err:  # e.g. a format matplotlib does not write
        return _fail(f"--out '{args.out}': {err}")
    except ImportError as err:
        return _fail(f"{err}: plotting needs matplotlib ({install_hint('research')})")
    envs = len({c.group.env for c in curves})
    used = sum(c.seeds for c in curves)
    print(
        f"{_PROG}: wrote {out} and {csv_path} ({_count(len(curves), 'group')}, {used} of "
        f"{_count(num_runs, 'run')}, {_count(envs, 'environment')})",
        flush=True,
    )
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
