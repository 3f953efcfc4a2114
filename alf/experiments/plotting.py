"""Learning curves of grouped runs: one panel per environment, per group a line (mean or
IQM over seeds) in a shaded 95% bootstrap band, and the plotted numbers as CSV.

With ``normalized``, the y axis is D4RL's normalised score of each run (its dataset's
reference returns, :meth:`alf.experiments.runs.Run.normalized`); runs trained on offline
data alone are placed by training iteration (:attr:`~alf.experiments.runs.Run.x_unit`).

Drawing uses matplotlib's Agg canvas directly (no pyplot, no display, the process's
backend untouched); matplotlib is imported only when a picture is drawn.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from alf.experiments import stats
from alf.experiments.runs import Run, RunGroup
from alf.experiments.stats import MIN_SEEDS_FOR_CI

__all__ = [
    "X_AXES",
    "GroupCurve",
    "csv_path_for",
    "curve_label",
    "group_curves",
    "plot_curves",
    "write_csv",
]

X_AXES = ("env_steps", "wall_time")
_X_COLUMN = {"env_steps": "env_steps", "wall_time": "wall_time_s"}


@dataclass(kw_only=True)
class GroupCurve:
    """The aggregate curve of one group.

    Attributes:
        group: the group.
        band: the curve and its band (x in env steps or wall-clock seconds).
        seeds: how many runs it aggregates.
        exact: whether the seeds were evaluated at the same x (no interpolation).
        x_unit: what ``env_steps`` x values count: ``env_steps``, or ``iterations`` for
            runs trained on offline data alone.
    """

    group: RunGroup
    band: stats.CurveBand
    seeds: int
    exact: bool
    x_unit: str = "env_steps"


def _run_xy(run: Run, x: str, normalized: bool = False) -> tuple[np.ndarray, np.ndarray]:
    xs = run.eval_steps if x == "env_steps" else run.eval_elapsed_s
    ys = run.normalized(run.eval_returns) if normalized else run.eval_returns
    return np.asarray(xs, dtype=float), ys


def group_curves(
    groups: Sequence[RunGroup],
    *,
    x: str = "env_steps",
    aggregate: str = "mean",
    reps: int = stats.BOOTSTRAP_REPS,
    seed: int = stats.BOOTSTRAP_SEED,
    normalized: bool = False,
) -> tuple[list[GroupCurve], list[str]]:
    """Aligns each group's evaluation curves and aggregates them over seeds.

    Args:
        groups: the groups (see :func:`alf.experiments.runs.group_runs`).
        x: ``env_steps`` or ``wall_time`` (``elapsed_s`` of the evaluations).
        aggregate: ``mean`` or ``iqm``.
        reps: bootstrap resamples of the band.
        seed: seed of the bootstrap.
        normalized: D4RL-normalised scores instead of returns (runs without reference
            returns are left out, with a note).

    Returns:
        The curves, and notes on what was left out or cut short (one line each).
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {X_AXES}, got {x!r}")
    curves, notes = [], []
    for group in groups:
        runs = []
        for run in group.runs:
            if run.nonfinite_evals and not run.has_eval:
                notes.append(f"{group.label}: {run.path}: {run.no_eval_reason()}: left out")
            elif not run.has_eval:
                notes.append(f"{group.label}: {run.path} has no evaluation yet ({run.status})")
            elif not np.isfinite(_run_xy(run, x)[0]).any():
                notes.append(f"{group.label}: {run.path} records no elapsed_s: left out")
            elif normalized and run.reference_returns is None:
                notes.append(
                    f"{group.label}: {run.path} records no reference returns (it trained "
                    "on no dataset that has them): left out of the normalised scores"
                )
            else:
                runs.append(run)
        if not runs:
            notes.append(f"{group.label}: no run to plot")
            continue
        xs, ys = zip(*(_run_xy(r, x, normalized) for r in runs), strict=True)
        grid, values, exact = stats.align_curves(xs, ys)
        if len(grid) == 0:
            notes.append(f"{group.label}: the runs' evaluations do not overlap: left out")
            continue
        ends = [int(r.eval_steps[-1]) for r in runs]
        if min(ends) != max(ends):
            unit = "iterations" if runs[0].x_unit == "iterations" else "env steps"
            notes.append(
                f"{group.label}: runs at different stages ({min(ends):,} to {max(ends):,} "
                f"{unit} evaluated): the curve stops at the end of the shortest"
            )
        band = stats.curve_band(grid, values, aggregate=aggregate, reps=reps, seed=seed)
        units = {r.x_unit for r in runs}
        if len(units) > 1:
            notes.append(f"{group.label}: some runs trained offline, some online: x mixes units")
        unit = "iterations" if units == {"iterations"} else "env_steps"
        curves.append(GroupCurve(group=group, band=band, seeds=len(runs), exact=exact, x_unit=unit))
    return curves, notes


def csv_path_for(out: str) -> str:
    """``curves.png`` -> ``curves.csv`` (same directory)."""
    return os.path.splitext(out)[0] + ".csv"


def write_csv(curves: Sequence[GroupCurve], path: str, *, x: str = "env_steps") -> None:
    """Writes the plotted numbers: columns ``env, group, <env_steps|wall_time_s>, center,
    low, high, seeds``, one row per group and x."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env", "group", _X_COLUMN[x], "center", "low", "high", "seeds"])
        for curve in curves:
            band = curve.band
            for i in range(len(band.x)):
                value = float(band.x[i])
                x_value = int(value) if value.is_integer() else round(value, 3)
                writer.writerow(
                    [
                        curve.group.env,
                        curve.group.label,
                        x_value,
                        repr(float(band.center[i])),
                        repr(float(band.low[i])),
                        repr(float(band.high[i])),
                        curve.seeds,
                    ]
                )


def _time_unit(max_seconds: float) -> tuple[str, float]:
    if max_seconds >= 2 * 3600:
        return "h", 3600.0
    if max_seconds >= 120:
        return "min", 60.0
    return "s", 1.0


def curve_label(curve: GroupCurve) -> str:
    """The legend entry of a group's curve: its label and seeds, with a caveat where its
    band rests on fewer than :data:`~alf.experiments.stats.MIN_SEEDS_FOR_CI` seeds."""
    seeds = f"{curve.seeds} seed{'s' if curve.seeds != 1 else ''}"
    if 1 < curve.seeds < MIN_SEEDS_FOR_CI:
        seeds += ": band unreliable"
    return f"{curve.group.label} ({seeds})"


def plot_curves(
    curves: Sequence[GroupCurve],
    path: str,
    *,
    x: str = "env_steps",
    aggregate: str = "mean",
    title: str | None = None,
    confidence: float = stats.CONFIDENCE,
    normalized: bool = False,
) -> None:
    """Draws one panel per environment with each group's curve and band into ``path``
    (the format follows its extension: png, pdf, svg); ``normalized`` labels the y axis
    as D4RL-normalised scores."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    envs = sorted({c.group.env for c in curves})
    cols = max(1, min(3, len(envs)))
    rows = max(1, math.ceil(len(envs) / cols))
    fig = Figure(figsize=(5.6 * cols, 4.2 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    what = "normalised score (D4RL)" if normalized else "evaluation return"
    y_label = f"{what} ({'IQM' if aggregate == 'iqm' else 'mean'} over seeds)"
    for index, env in enumerate(envs or ["(no evaluated run)"]):
        ax = fig.add_subplot(rows, cols, index + 1)
        panel = [c for c in curves if c.group.env == env]
        scale, x_label = 1.0, "env steps"
        if all(c.x_unit == "iterations" for c in panel) and panel:
            x_label = "training iterations (offline data)"
        if x == "wall_time":  # each panel in its own unit
            unit, scale = _time_unit(max((float(c.band.x[-1]) for c in panel), default=0.0))
            x_label = f"wall-clock time of training ({unit})"
        for curve in panel:
            band = curve.band
            xs = band.x / scale
            (line,) = ax.plot(xs, band.center, label=curve_label(curve))
            ax.fill_between(xs, band.low, band.high, color=line.get_color(), alpha=0.25, lw=0)
            if len(xs) == 1:
                line.set_marker("o")
        ax.set_title(env)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(
                fontsize="small",
                title=f"shaded: {confidence:.0%} bootstrap CI ({MIN_SEEDS_FOR_CI}+ seeds)",
                title_fontsize="small",
            )
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=120)
