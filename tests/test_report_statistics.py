"""The statistics ``report`` and ``plot`` add beside the interval: each final
evaluation's episode std, the caveat below 5 seeds, and the probability of improvement
between groups of 5+ seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_plot_runs import make_sweep, run_bindings, table_row, write_run

from alf.bin import report as report_cli
from alf.experiments.runs import group_runs, load_runs

REPS = 2000


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
    """Two CartPole PPO grid points and one Pendulum SAC config, 3 seeds each."""
    return make_sweep(tmp_path)


def test_report_episode_std_and_probability_of_improvement(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """With 5+ seeds per group the report adds P(A > B) (rliable's probability of
    improvement) and no caveat; the episode std comes from ``eval/return_std``."""
    finals = {"good": [10.0, 11.0, 12.0, 13.0, 14.0], "bad": [1.0, 2.0, 3.0, 12.5, 4.0]}
    for name, values in finals.items():
        for seed, value in enumerate(values):
            path = write_run(
                tmp_path / "cmp" / name / f"seed-{seed}",
                bindings=run_bindings("CartPole-v1", "PPOAlgorithm", seed, **{"X.y": repr(name)}),
                evals=[(1000, 5.0, value)],
            )
            records = [
                json.loads(line) for line in (path / "progress.jsonl").read_text().splitlines()
            ]
            records[-1]["eval/return_std"] = 2.0 + seed
            (path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert report_cli.main([str(tmp_path / "cmp"), f"--reps={REPS}"]) == 0
    out = capsys.readouterr().out
    good = table_row(out, "good")
    assert "too few" not in good[6] and good[7] == "4.00"  # mean of 2..6
    # P(bad > good): 12.5 beats 10, 11 and 12: 3 of 25 pairs, no ties.
    row = next(line for line in out.splitlines() if line.startswith("| bad | good |"))
    assert "| 0.12 [" in row, row
    assert "Probability of improvement" in out and "computed by" in out
    capsys.readouterr()
    # Fewer than 5 seeds: the interval carries a caveat and P is not computed.
    assert (
        report_cli.main(
            [str(tmp_path / "cmp" / "good" / f"seed-{s}") for s in range(3)]
            + [str(tmp_path / "cmp" / "bad" / "seed-0"), f"--reps={REPS}"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "(3 seeds: too few for a reliable CI, use 5+)" in out
    assert "needs 5+ seeds in at least two groups" in out


def test_plot_legend_says_when_a_band_rests_on_too_few_seeds(sweep: Path) -> None:
    from alf.experiments.plotting import curve_label, group_curves

    curves, _ = group_curves(group_runs(load_runs([str(sweep)])), x="env_steps")
    labels = {curve_label(c) for c in curves}
    assert "lr=0.001 (3 seeds: band unreliable)" in labels, labels
