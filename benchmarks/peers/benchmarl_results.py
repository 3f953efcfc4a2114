"""``benchmarks/peers/benchmarl_spread.py``'s results in ALF's terms: a finished
BenchMARL seed written as an ALF run directory (so ``alf.bin.plot`` / ``alf.bin.report``
read it beside ALF's runs), and the side-by-side report (``--alf_runs``): both
frameworks' evaluation returns per agent as IQM with a 95% CI over seeds at common
agent-steps."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import format_table

ENV_NAME = "pettingzoo:mpe2.simple_spread_v3"
"""ALF's name of the game (``create_environment.env_name`` of ppo_simple_spread.gin)."""


def write_alf_format(run_dir: Path, *, seed: int, algorithm: str) -> None:
    """Writes a finished BenchMARL seed's evaluations as an ALF run directory beside
    them (``progress.jsonl``, ``run_info.json``, ``status.json``), so ``alf.bin.plot``
    and ``alf.bin.report`` read it with ALF's runs (as the SB3 peers are read)."""
    from alf.run_dir import layout

    info = json.loads((run_dir / "run.json").read_text())
    rows = list(csv.DictReader(open(run_dir / "evaluations.csv")))
    with open(run_dir / layout.PROGRESS_FILE, "w") as f:
        for row in rows:
            record = {
                "iteration": int(row["iteration"]),
                "env_steps": int(row["agent_steps"]),
                "elapsed_s": float(row["wall_s"]),
                "eval/average_return": float(row["return_per_agent"]),
                "eval/return_std": float(row["return_std"]),
            }
            f.write(json.dumps(record) + "\n")
    layout.write_json_atomic(
        str(run_dir / layout.METADATA_FILE),
        {
            "framework": "benchmarl",
            "env_name": ENV_NAME,
            "algorithm": algorithm.upper(),
            "seed": seed,
            "num_env_steps": info["agent_steps"],
            "versions": info["versions"],
        },
    )
    layout.write_status(str(run_dir), layout.RunStatus.FINISHED, env_steps=info["agent_steps"])


def benchmarl_curves(out: Path) -> dict[str, dict[int, float]]:
    """Per BenchMARL seed directory under ``out`` (``.../seed-<s>/evaluations.csv``), its
    evaluation return per agent by agent-steps."""
    curves = {}
    for csv_path in sorted(out.glob("**/seed-*/evaluations.csv")):
        rows = csv.DictReader(open(csv_path))
        curves[str(csv_path.parent)] = {
            int(r["agent_steps"]): float(r["return_per_agent"]) for r in rows
        }
    return curves


def alf_curves(root: Path) -> dict[str, dict[int, float]]:
    """Per ALF run under ``root``, its evaluation return (``eval/average_return``: per
    agent, every row being one agent) by env steps (= agent-steps)."""
    from alf.experiments.runs import load_runs

    return {
        run.path: {int(s): float(r) for s, r in zip(run.eval_steps, run.eval_returns, strict=True)}
        for run in load_runs([str(root)])
    }


def compare(
    curves: dict[str, dict[str, dict[int, float]]], points: Sequence[int]
) -> tuple[list[list[Any]], str]:
    """Rows ``[agent-steps, framework, seeds, IQM [95% CI], values]`` at each of ``points``
    (those that every run of a framework evaluated), and the interval method; the last
    agent-step evaluated by every run of both is added."""
    from alf.experiments.stats import iqm_interval_estimates

    common = set.intersection(*(set(c) for runs in curves.values() for c in runs.values()))
    chosen = sorted({p for p in points if p in common} | ({max(common)} if common else set()))
    rows, method = [], ""
    for step in chosen:
        values = {fw: [c[step] for c in runs.values()] for fw, runs in curves.items()}
        est = iqm_interval_estimates(values)
        method = est.method
        for fw, vals in values.items():
            cell = f"{est.point[fw]:.2f} [{est.low[fw]:.2f}, {est.high[fw]:.2f}]"
            listed = ", ".join(f"{v:.2f}" for v in vals)
            rows.append([f"{step:,}", fw, len(vals), cell, listed])
    return rows, method


def report(args: argparse.Namespace) -> None:
    """The BenchMARL seeds under ``--out`` beside ALF's runs under ``--alf_runs``."""
    curves = {
        f"BenchMARL {args.algorithm.upper()}": benchmarl_curves(Path(args.out)),
        "ALF PPO": alf_curves(Path(args.alf_runs)),
    }
    for name, runs in curves.items():
        if not runs:
            sys.exit(f"benchmarl_spread.py: no {name} runs found")
    points = [int(p) for p in args.report_points.split(",") if p.strip()]
    rows, method = compare(curves, points)
    print(
        format_table(["agent-steps", "framework", "seeds", "IQM [95% CI]", "seeds' values"], rows)
    )
    print(method)
