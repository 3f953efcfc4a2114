r"""Copies the small result files of every run under some directories into another, so
that finished (or partial) results can be committed and plotted or reported again
without the checkpoints and TensorBoard events.

Usage::

    python benchmarks/tools/archive_runs.py /work/runs/mujoco docs/results/mujoco/runs

For each run directory found (``alf.run_dir.layout.find_run_dirs``), its path relative
to the source directory is kept, and ``config.gin``, ``progress.jsonl``, ``status.json``
and ``run_info.json`` are copied (those that exist). ``alf.bin.plot`` and
``alf.bin.report`` read the copies as they read the runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from alf.run_dir import layout  # noqa: E402

RESULT_FILES = (
    layout.CONFIG_FILE,
    layout.PROGRESS_FILE,
    layout.STATUS_FILE,
    layout.METADATA_FILE,
)


def archive(source: str, destination: str) -> list[str]:
    """Copies the result files of every run under ``source`` to the same relative path
    under ``destination``; returns the relative paths of the runs copied."""
    copied = []
    for run_dir in layout.find_run_dirs([source]):
        relative = os.path.relpath(run_dir, os.path.abspath(source))
        target = os.path.join(destination, relative)
        os.makedirs(target, exist_ok=True)
        for name in RESULT_FILES:
            path = os.path.join(run_dir, name)
            if os.path.isfile(path):
                shutil.copy2(path, os.path.join(target, name))
        copied.append(relative)
    return copied


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="a directory of runs (e.g. a sweep's root_dir)")
    parser.add_argument("destination", help="where the copies go")
    args = parser.parse_args()
    copied = archive(args.source, args.destination)
    if not copied:
        sys.exit(f"archive_runs.py: error: no run directory under '{args.source}'")
    for relative in copied:
        print(f"copied {relative}")


if __name__ == "__main__":
    main()
