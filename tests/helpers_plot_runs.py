"""Fake run directories with known numbers, for the tests of ``alf.bin.plot`` and
``alf.bin.report`` (``tests/test_plot_report*.py``)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

from alf.bin import report as report_cli

EVAL_STEPS = [1000, 2000, 3000, 4000]
LRS = {"lr=0.001": "0.001", "lr=0.0003": "0.0003"}


def run_bindings(env: str, algorithm: str, seed: int, **extra: str) -> dict[str, str]:
    bindings = {
        "create_environment.env_name": f"'{env}'",
        "TrainerConfig.algorithm_ctor": f"@{algorithm}",
        "TrainerConfig.random_seed": str(seed),
        "TrainerConfig.num_env_steps": "4000",
    }
    bindings.update(extra)
    return bindings


def write_run(
    path: Path,
    *,
    bindings: dict[str, str] | None,
    evals: list[tuple[int, float, float]],
    last_train: tuple[int, float] | None = None,
    state: str = "finished",
    run_info: dict | None = None,
) -> Path:
    """A run directory: ``config.gin`` from ``bindings``, ``progress.jsonl`` with train
    records and an evaluation ``(env_steps, elapsed_s, return)`` for each of ``evals``."""
    path.mkdir(parents=True)
    if bindings is not None:
        lines = ["# Parameters", *(f"{k} = {v}" for k, v in sorted(bindings.items()))]
        (path / "config.gin").write_text("\n".join(lines) + "\n")
    records = []
    for i, (steps, elapsed, value) in enumerate(evals):
        common = {"iteration": i, "env_steps": steps, "elapsed_s": elapsed}
        records += [{**common, "fps": 1.0}, {**common, "eval/average_return": value}]
    if last_train is not None:
        records.append({"iteration": 99, "env_steps": last_train[0], "elapsed_s": last_train[1]})
    (path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "status.json").write_text(json.dumps({"state": state, "pid": os.getpid()}))
    if run_info is not None:
        (path / "run_info.json").write_text(json.dumps(run_info))
    return path


def returns_of(group: int, seed: int) -> list[float]:
    """Known, seed-dependent returns at EVAL_STEPS."""
    rng = np.random.RandomState(100 * group + seed)
    return list(np.round(np.cumsum(rng.uniform(0, 50, len(EVAL_STEPS))) + 10 * group, 3))


def make_sweep(tmp_path: Path) -> Path:
    """Two CartPole PPO grid points (evaluated 1 s apart per seed) and one Pendulum SAC
    config (evaluated at the same times), 3 seeds each."""
    specs = [
        (tmp_path / "sweep" / point, "CartPole-v1", "PPOAlgorithm", {"Adam.lr": lr}, g)
        for g, (point, lr) in enumerate(LRS.items())
    ]
    specs.append((tmp_path / "pendulum", "Pendulum-v1", "SacAlgorithm", {}, 2))
    for where, env, algorithm, extra, g in specs:
        for seed in range(3):
            if g < 2:
                times, offset, last = [10.0 * (i + 1) + seed for i in range(4)], 0, None
            else:
                times, offset, last = [60.0 * (i + 1) for i in range(4)], -500, (4500, 300.0)
            write_run(
                where / f"seed-{seed}",
                bindings=run_bindings(env, algorithm, seed, **extra),
                evals=[
                    (s, t, r + offset)
                    for s, t, r in zip(EVAL_STEPS, times, returns_of(g, seed), strict=True)
                ],
                last_train=last,
            )
    return tmp_path


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file written by ``alf.bin.plot``."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def table_row(text: str, label: str) -> list[str]:
    """The cells of the report table's row labelled ``label``."""
    line = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def report_cli_output(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """Runs ``alf.bin.report``'s ``main`` in this process; returns its stdout."""
    capsys.readouterr()
    assert report_cli.main(argv) == 0
    return capsys.readouterr().out
