"""Result tables: one Markdown row per group of seeds with its final evaluation return
(mean ± std, and IQM with a 95% stratified-bootstrap confidence interval), best return,
env steps, wall-clock time and throughput; and, when some run trained on a dataset that
records reference returns, its D4RL-normalised score (``100 * (R - random) / (expert -
random)``, mean ± std over seeds)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from alf.experiments import stats
from alf.experiments.runs import RunGroup

__all__ = ["GroupRow", "build_report", "format_duration", "group_rows"]

_HEADER = [
    "group",
    "environment",
    "algorithm",
    "seeds",
    "env steps",
    "final return (mean ± std)",
    "final return IQM [95% CI]",
    "episode std",
    "best return",
    "wall time",
    "env steps/s",
]
_NORMALIZED_COLUMN = "normalized score (mean ± std)"
_MAX_METADATA_VALUE = 200


@dataclass(kw_only=True)
class GroupRow:
    """The numbers of one group's row (NaN where no run has an evaluation).

    Attributes:
        group: the group.
        seeds: runs with an evaluation (the statistics are over these).
        runs: all runs of the group.
        env_steps: mean of the last recorded env steps over the runs with an evaluation
            (over all runs when none has one).
        final_mean: mean of the final evaluation returns.
        final_std: their sample standard deviation.
        final_iqm: their interquartile mean.
        ci_low: lower end of the IQM's confidence interval.
        ci_high: upper end.
        episode_std: mean over seeds of the standard deviation of the episode returns
            within each run's final evaluation (NaN where not recorded).
        best_mean: mean over seeds of each run's best evaluation return.
        wall_time_s: mean wall-clock seconds of training, over the same runs.
        steps_per_s: ``env_steps / wall_time_s``.
        normalized_mean: mean over seeds of the D4RL-normalised final return (NaN when
            the runs record no reference returns).
        normalized_std: its sample standard deviation.
    """

    group: RunGroup
    seeds: int
    runs: int
    env_steps: float
    final_mean: float
    final_std: float
    final_iqm: float
    ci_low: float
    ci_high: float
    episode_std: float
    best_mean: float
    wall_time_s: float
    steps_per_s: float
    normalized_mean: float = float("nan")
    normalized_std: float = float("nan")


def group_rows(
    groups: Sequence[RunGroup],
    *,
    reps: int = stats.BOOTSTRAP_REPS,
    seed: int = stats.BOOTSTRAP_SEED,
    use_rliable: bool = True,
) -> tuple[list[GroupRow], stats.IntervalEstimates]:
    """Computes the row of each group.

    Args:
        groups: the groups (see :func:`alf.experiments.runs.group_runs`).
        reps: bootstrap resamples of the IQM's interval.
        seed: seed of the bootstrap.
        use_rliable: False computes the intervals with NumPy even if rliable is there.

    Returns:
        The rows, and the interval estimates (with the method used).
    """
    finals = {g.label: [r.final_return for r in g.evaluated] for g in groups if g.evaluated}
    estimates = stats.iqm_interval_estimates(finals, reps=reps, seed=seed, use_rliable=use_rliable)
    nan = float("nan")
    rows = []
    for group in groups:
        evaluated = group.evaluated
        mean, std = stats.mean_std(finals[group.label]) if evaluated else (nan, nan)
        scores = [r.normalized(r.final_return) for r in evaluated]
        scores = [s for s in scores if math.isfinite(s)]
        norm_mean, norm_std = stats.mean_std(scores) if scores else (nan, nan)
        counted = evaluated or group.runs
        env_steps = float(np.mean([r.env_steps for r in counted]))
        wall = float(np.mean([r.wall_time_s for r in counted]))
        rows.append(
            GroupRow(
                group=group,
                seeds=len(evaluated),
                runs=len(group.runs),
                env_steps=env_steps,
                final_mean=mean,
                final_std=std,
                final_iqm=estimates.point.get(group.label, nan),
                ci_low=estimates.low.get(group.label, nan),
                ci_high=estimates.high.get(group.label, nan),
                episode_std=_mean_finite([r.final_episode_std for r in evaluated]),
                best_mean=float(np.mean([r.best_return for r in evaluated])) if evaluated else nan,
                wall_time_s=wall,
                steps_per_s=env_steps / wall if wall > 0 else nan,
                normalized_mean=norm_mean,
                normalized_std=norm_std if len(scores) > 1 else nan,
            )
        )
    return rows, estimates


def _mean_finite(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def format_duration(seconds: float) -> str:
    """``3725.2`` -> ``1:02:05`` (h:mm:ss; ``n/a`` for NaN)."""
    if not math.isfinite(seconds):
        return "n/a"
    total = int(round(seconds))
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


def _num(value: float, decimals: int = 2) -> str:
    return f"{value:.{decimals}f}" if math.isfinite(value) else "n/a"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _normalized_cell(row: GroupRow) -> str:
    if not math.isfinite(row.normalized_mean):
        return "n/a"
    text = f"{row.normalized_mean:.1f}"
    return text + (f" ± {row.normalized_std:.1f}" if math.isfinite(row.normalized_std) else "")


def _row_cells(row: GroupRow, normalized: bool = False) -> list[str]:
    seeds = str(row.seeds) if row.seeds == row.runs else f"{row.seeds} of {row.runs}"
    values = [row.final_mean, row.best_mean, row.ci_low, row.ci_high]
    largest = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    decimals = 1 if largest >= 100 else 2
    final = iqm = best = "n/a"
    if row.seeds:
        final = _num(row.final_mean, decimals)
        best = _num(row.best_mean, decimals)
        iqm = _num(row.final_iqm, decimals)
        if row.seeds > 1:
            final += f" ± {_num(row.final_std, decimals)}"
            iqm += f" [{_num(row.ci_low, decimals)}, {_num(row.ci_high, decimals)}]"
            if row.seeds < stats.MIN_SEEDS_FOR_CI:
                iqm += f" ({row.seeds} seeds: too few for a reliable CI, use 5+)"
        else:
            iqm += " (1 seed: no CI)"
    steps_per_s = f"{row.steps_per_s:,.0f}" if math.isfinite(row.steps_per_s) else "n/a"
    return [
        row.group.label,
        row.group.env,
        row.group.algorithm,
        seeds,
        f"{row.env_steps:,.0f}",
        final,
        *([_normalized_cell(row)] if normalized else []),
        iqm,
        _num(row.episode_std, decimals) if row.seeds else "n/a",
        best,
        format_duration(row.wall_time_s),
        steps_per_s,
    ]


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
            continue
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            text = " ".join(value)
        elif isinstance(value, str):
            text = value
        else:
            text = json.dumps(value, default=str)
        if len(text) > _MAX_METADATA_VALUE:
            text = text[: _MAX_METADATA_VALUE - 3] + "..."
        flat[name] = text
    return flat


def _metadata_section(groups: Sequence[RunGroup], root: str) -> list[str]:
    lines = ["", "## Metadata (run_info.json)", ""]
    for group in groups:
        lines.append(f"### {group.label}")
        lines.append("")
        with_info = [r for r in group.runs if r.metadata]
        missing = [r for r in group.runs if not r.metadata]
        flats = [_flatten(r.metadata) for r in with_info]
        common = {}
        if flats:
            common = {k: v for k, v in flats[0].items() if all(f.get(k) == v for f in flats)}
        for key, value in common.items():
            lines.append(f"- {key}: `{value}`")
        for run, flat in zip(with_info, flats, strict=True):
            own = [f"{k}: `{v}`" for k, v in flat.items() if k not in common]
            if own:
                lines.append(f"- {_relative(run.path, root)}: " + "; ".join(own))
        if missing:
            names = ", ".join(_relative(r.path, root) for r in missing)
            lines.append(f"- no run_info.json: {names}")
        lines.append("")
    return lines


def _relative(path: str, root: str) -> str:
    if root and root != os.path.dirname(root):  # not "" nor the file system's root
        rel = os.path.relpath(path, root)
        if not rel.startswith(".."):
            return rel
    return path


def _notes(groups: Sequence[RunGroup], root: str) -> list[str]:
    notes = []
    for run in (r for g in groups for r in g.runs):
        where = f"{_relative(run.path, root)} ({run.label})"
        if not run.has_eval:
            notes.append(f"{where}: {run.no_eval_reason()}: listed, not in the statistics")
            continue
        if run.nonfinite_evals:
            notes.append(
                f"{where}: {run.nonfinite_evals} of its evaluations are non-finite (NaN or "
                "inf): left out of its numbers"
            )
        if run.status == "running":
            notes.append(
                f"{where}: still running: its numbers are its latest records "
                f"({run.env_steps:,} env steps, last evaluation at {int(run.eval_steps[-1]):,})"
            )
        elif run.status in ("failed", "interrupted", "stopped"):
            notes.append(f"{where}: {run.status} at {run.env_steps:,} env steps")
    return notes


def _improvement_section(
    rows: Sequence[GroupRow], *, reps: int, seed: int, use_rliable: bool
) -> list[str]:
    """P(final return of A > B) for every pair of groups with 5+ seeds each (rliable's
    probability of improvement with its bootstrap CI); a line saying why when there is
    no such pair."""
    eligible = [r for r in rows if r.seeds >= stats.MIN_SEEDS_FOR_CI]
    if len(rows) < 2:
        return []
    if len(eligible) < 2:
        return [
            "",
            f"Probability of improvement: needs {stats.MIN_SEEDS_FOR_CI}+ seeds in at least "
            "two groups (not computed).",
        ]
    lines = ["", "| A | B | P(A > B) [95% CI] |", "|---|---|---:|"]
    library = ""
    for i, a in enumerate(eligible):
        for b in eligible[i + 1 :]:
            x = [r.final_return for r in a.group.evaluated]
            y = [r.final_return for r in b.group.evaluated]
            p, low, high, library = stats.probability_of_improvement(
                x, y, reps=reps, seed=seed, use_rliable=use_rliable
            )
            lines.append(
                f"| {_cell(a.group.label)} | {_cell(b.group.label)} | "
                f"{p:.2f} [{low:.2f}, {high:.2f}] |"
            )
    lines += [
        "",
        "Probability of improvement: P(a seed of A ends with a higher final return than a "
        "seed of B; ties count half), stratified bootstrap over seeds, computed by "
        f"{library}.",
    ]
    return lines


def build_report(
    groups: Sequence[RunGroup],
    *,
    metadata: bool = False,
    reps: int = stats.BOOTSTRAP_REPS,
    seed: int = stats.BOOTSTRAP_SEED,
    use_rliable: bool = True,
) -> str:
    """The Markdown report of ``groups``.

    Args:
        groups: the groups.
        metadata: add each group's ``run_info.json`` fields.
        reps: bootstrap resamples of the IQM's interval.
        seed: seed of the bootstrap.
        use_rliable: False computes the intervals with NumPy even if rliable is there.

    Returns:
        The table, its footer and notes (and the metadata), ending with a newline.
    """
    # Paths in notes keep two levels above the runs (<sweep>/<grid point>/seed-<k>).
    above = [os.path.dirname(os.path.dirname(r.path)) for g in groups for r in g.runs]
    root = os.path.commonpath(above) if above else ""
    rows, estimates = group_rows(groups, reps=reps, seed=seed, use_rliable=use_rliable)
    normalized = any(math.isfinite(row.normalized_mean) for row in rows)
    header = list(_HEADER)
    if normalized:
        header.insert(header.index("final return (mean ± std)") + 1, _NORMALIZED_COLUMN)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i < 3 else "---:" for i in range(len(header))) + "|",
    ]
    lines += [
        "| " + " | ".join(_cell(c) for c in _row_cells(row, normalized)) + " |" for row in rows
    ]
    lines += [
        "",
        "Final return: each run's latest evaluation (`eval/average_return`); mean ± sample "
        "standard deviation over seeds. Best return: mean over seeds of each run's best "
        "evaluation. Env steps and wall time (of training, over all resumptions): means of "
        "the last records of the same runs; env steps/s = env steps / wall time.",
        "",
        estimates.method + ". Episode std: the standard deviation of the episode returns "
        "within each run's final evaluation, averaged over seeds.",
    ]
    if normalized:
        lines += [
            "",
            "Normalised score: D4RL's 100 * (R - random) / (expert - random) of each seed's "
            "final return, with the reference returns of the dataset it trained on "
            "(run_info.json's reference_returns); mean ± std over seeds; n/a without them.",
        ]
    lines += _improvement_section(rows, reps=reps, seed=seed, use_rliable=use_rliable)
    notes = _notes(groups, root)
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    if metadata:
        lines += _metadata_section(groups, root)
    return "\n".join(lines).rstrip("\n") + "\n"
