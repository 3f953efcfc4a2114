r"""Prints a Markdown table of results, one row per group of seeds.

Usage::

    python -m alf.bin.report DIR... [--metadata] [--out=FILE.md] [--reps=2000]

Every run directory at or under the DIRs is read and grouped as by ``alf.bin.plot``.
Each row: environment, algorithm, seeds, env steps, the final evaluation return as
mean ± std and as IQM with a 95% stratified-bootstrap confidence interval (computed by
rliable when it can be imported), the best return, wall-clock time and env steps/s. The
footer names the interval's method and library; notes list runs without an evaluation
(not in the statistics) and runs still training. ``--metadata`` adds the fields of each
run's ``run_info.json``. When some run trained on a dataset that records reference
returns (``run_info.json``'s ``reference_returns``), a column gives the D4RL-normalised
score of the final returns, ``100 * (R - random) / (expert - random)``. A run whose
``config.gin`` or ``progress.jsonl`` cannot be read (not UTF-8 text) is skipped with a
warning line naming the file. Exit status: 0, or 2 for bad arguments (no readable run,
an ``--out`` that cannot be written).
"""

from __future__ import annotations

import argparse
import os
import sys

from alf.bin.cli import print_error, tool_prog

EXIT_USAGE = 2
_PROG = "alf.bin.report"


def build_parser() -> argparse.ArgumentParser:
    """The command-line flags."""
    parser = argparse.ArgumentParser(
        prog=tool_prog("alf.bin.report"),
        description="Markdown table of final results of runs grouped by config.",
    )
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="run directories or their roots")
    parser.add_argument(
        "--metadata", action="store_true", help="add the fields of each run's run_info.json"
    )
    parser.add_argument("--out", default=None, help="also write the report to this file")
    parser.add_argument(
        "--reps",
        type=int,
        default=2000,
        help="bootstrap resamples of the IQM's interval (default %(default)s)",
    )
    return parser


def _fail(message: str) -> int:
    return print_error(_PROG, message, EXIT_USAGE)


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, reads the runs and prints (and writes) the report; returns the
    exit status."""
    args = build_parser().parse_args(argv)
    from alf.experiments import report, runs

    if args.reps < 1:
        return _fail(f"--reps must be >= 1, got {args.reps}")
    error = runs.no_run_error(args.dirs)
    if error:
        return _fail(error)
    skipped: list[str] = []
    loaded = runs.load_runs(args.dirs, skipped=skipped.append)
    if not loaded:
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        return _fail(f"no readable run: {skipped[0]}{more}")
    for line in skipped:
        print(f"{_PROG}: warning: skipped a run: {line}", file=sys.stderr, flush=True)
    groups = runs.group_runs(loaded)
    text = report.build_report(groups, metadata=args.metadata, reps=args.reps)
    sys.stdout.write(text)
    sys.stdout.flush()
    if args.out:
        out = os.path.expanduser(args.out)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            with open(out, "w") as f:
                f.write(text)
        except OSError as err:
            return _fail(f"--out '{args.out}': {err.strerror or err}")
        print(f"{_PROG}: wrote {out}", file=sys.stderr, flush=True)
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
