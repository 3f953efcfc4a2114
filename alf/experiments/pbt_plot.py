"""The picture of a population (``alf.bin.plot`` on an ``alf.bin.pbt`` root directory):
each member's evaluation curve with its copies drawn as jumps to the donor's score, and
each mutable hyperparameter of each member round by round; the curves as CSV.

Drawing uses matplotlib's Agg canvas directly (no pyplot), imported only here.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass

from alf.experiments.pbt_state import STATE_FILE, PopulationState, member_dir
from alf.experiments.runs import EVAL_RETURN
from alf.run_dir import layout

__all__ = ["MemberCurve", "is_population", "member_curves", "plot_population", "write_csv"]


def is_population(path: str) -> bool:
    """Whether ``path`` is the directory of an ``alf.bin.pbt`` population."""
    return os.path.isfile(os.path.join(os.path.expanduser(path), STATE_FILE))


@dataclass(kw_only=True)
class MemberCurve:
    """One member's evaluations and copies.

    Attributes:
        member: its index.
        points: ``(env_steps, return)`` of its finite evaluations, in order.
        copies: ``(env_steps, donor, donor_score)`` of each checkpoint it copied.
    """

    member: int
    points: list[tuple[int, float]]
    copies: list[tuple[int, int, float | None]]

    def polyline(self) -> tuple[list[float], list[float]]:
        """The curve's x and y, jumping at each copy to the donor's score there (the
        member goes on from the donor's policy)."""
        xs: list[float] = []
        ys: list[float] = []
        copies = sorted(self.copies, key=lambda copy: copy[0])
        for steps, value in self.points:
            while copies and steps > copies[0][0]:
                at, _, donor_score = copies.pop(0)
                if donor_score is not None:
                    xs.append(at)
                    ys.append(donor_score)
            xs.append(steps)
            ys.append(value)
        return xs, ys


def member_curves(root_dir: str, state: PopulationState) -> list[MemberCurve]:
    """The curve of every member of the population in ``root_dir``."""
    scores = {(r["round"], r["member"]): r["score"] for r in state.lineage}
    curves = []
    for index in range(state.settings.population):
        points = []
        for record in layout.read_progress(member_dir(root_dir, index)):
            value = record.get(EVAL_RETURN)
            if isinstance(value, (int, float)) and math.isfinite(value):
                points.append((int(record.get("env_steps", 0)), float(value)))
        copies = [
            (int(r["env_steps"]), r["copied_from"], scores.get((r["round"], r["copied_from"])))
            for r in state.lineage
            if r["member"] == index and r["copied_from"] is not None
        ]
        curves.append(MemberCurve(member=index, points=points, copies=copies))
    return curves


def write_csv(curves: list[MemberCurve], path: str) -> None:
    """Writes the plotted evaluations: columns ``member, env_steps, return``."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["member", "env_steps", "return"])
        for curve in curves:
            for steps, value in curve.points:
                writer.writerow([curve.member, steps, repr(value)])


def _hyperparameter_steps(
    state: PopulationState, member: int, name: str
) -> tuple[list[int], list[float]]:
    """A member's value of ``name`` over the rounds, as steps: x at each round's start."""
    records = sorted((r for r in state.lineage if r["member"] == member), key=lambda r: r["round"])
    xs, ys = [], []
    for record in records:
        xs.append(record["round"] * state.settings.interval)
        ys.append(record["hyperparameters"][name])
    if records:  # the last round's value until its end
        xs.append(state.settings.budget(records[-1]["round"]))
        ys.append(ys[-1])
    return xs, ys


def plot_population(
    root_dir: str,
    state: PopulationState,
    curves: list[MemberCurve],
    path: str,
    *,
    title: str | None = None,
) -> None:
    """Draws the members' curves (a copy as a jump to the donor's score, marked with a
    triangle) and, in a panel per ``--mutate`` binding, each member's
    value by round (log scale for log spaces) into ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = list(state.hyperparameters[0]) if state.hyperparameters else []
    panels = 1 + len(names)
    fig = Figure(figsize=(5.6 * panels, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, panels, 1)
    colors = {}
    for curve in curves:
        xs, ys = curve.polyline()
        (line,) = ax.plot(xs, ys, marker=".", label=f"member-{curve.member}")
        colors[curve.member] = line.get_color()
        for steps, _, donor_score in curve.copies:
            if donor_score is not None:
                ax.plot([steps], [donor_score], marker="v", color=line.get_color(), ms=8)
    ax.set_title(f"population of {state.settings.population} ({os.path.basename(root_dir)})")
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return (triangle: copied a checkpoint)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    for offset, name in enumerate(names):
        hp_ax = fig.add_subplot(1, panels, 2 + offset)
        values = []
        for member in range(state.settings.population):
            xs, ys = _hyperparameter_steps(state, member, name)
            hp_ax.step(xs, ys, where="post", color=colors.get(member))
            values += ys
        if values and min(values) > 0 and max(values) >= 10 * min(values):
            hp_ax.set_yscale("log")
        hp_ax.set_title(name)
        hp_ax.set_xlabel("env steps")
        hp_ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=120)
