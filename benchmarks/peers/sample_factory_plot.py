"""Curves of ``sample_factory.py`` runs: training return by frames and by wall time.

Reads one or more ``results.json`` files that ``benchmarks/peers/sample_factory.py``
wrote and draws, per framework (and ALF variant), every run's training return against
env frames and against seconds since its start, side by side; the points also go to a
CSV beside the PNG (``framework, env, seed, seconds, frames, return``).

Usage::

    python -m benchmarks.peers.sample_factory_plot --out=docs/results/pixels/doom_basic_vs_sf.png \
        /tmp/sf_a/results.json /tmp/sf_b/results.json
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_runs(paths: list[Path]) -> list[dict[str, Any]]:
    """The runs of every ``results.json`` in ``paths``, in order."""
    runs: list[dict[str, Any]] = []
    for path in paths:
        runs.extend(json.loads(path.read_text())["runs"])
    return runs


def write_csv(runs: list[dict[str, Any]], path: Path) -> None:
    """One row per curve point: framework, env, seed, seconds, frames, return."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["framework", "env", "seed", "seconds", "frames", "return"])
        for run in runs:
            for seconds, frames, value in run["curve"]:
                writer.writerow([run["framework"], run["env"], run["seed"], seconds, frames, value])


def plot(runs: list[dict[str, Any]], path: Path, score: float | None) -> None:
    """Two panels (by frames, by wall time), one colour per framework, one line per run."""
    names = sorted({run["framework"] for run in runs})
    colours = {name: f"C{i}" for i, name in enumerate(names)}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    labelled: set[str] = set()
    for run in runs:
        if not run["curve"]:
            continue
        seconds, frames, values = zip(*run["curve"], strict=True)
        name = run["framework"]
        label = None if name in labelled else name
        labelled.add(name)
        axes[0].plot(frames, values, color=colours[name], alpha=0.8, label=label)
        axes[1].plot(seconds, values, color=colours[name], alpha=0.8)
    for axis, xlabel in zip(axes, ("env frames", "seconds since the start"), strict=True):
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
        if score is not None:
            axis.axhline(score, color="grey", linestyle="--", linewidth=1)
    axes[0].set_ylabel("training return")
    axes[0].legend()
    envs = ", ".join(sorted({run["env"] for run in runs}))
    seeds = ", ".join(str(s) for s in sorted({run["seed"] for run in runs}))
    fig.suptitle(f"{envs}: training return (seeds {seeds})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results.json files")
    parser.add_argument("--out", type=Path, required=True, help="the PNG (CSV beside it)")
    parser.add_argument("--score", type=float, default=None, help="a threshold line")
    args = parser.parse_args(argv)
    runs = load_runs(args.results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot(runs, args.out, args.score)
    write_csv(runs, args.out.with_suffix(".csv"))
    print(f"wrote {args.out} and {args.out.with_suffix('.csv')} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
