"""``alf.bin.plot`` and ``alf.bin.report`` on fake run directories with known numbers
(checked against direct NumPy computations), on runs of another framework described by
``run_info.json``, on bad input, and once on a real tiny training run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers_plot_runs import (
    EVAL_STEPS,
    make_sweep,
    read_csv,
    report_cli_output,
    returns_of,
    run_bindings,
    table_row,
    write_run,
)

from alf.bin import plot as plot_cli
from alf.bin import report as report_cli
from alf.experiments import stats
from alf.experiments.report import group_rows
from alf.experiments.runs import group_runs, load_runs

REPS = 2000


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
    """Two CartPole PPO grid points and one Pendulum SAC config, 3 seeds each
    (:func:`helpers_plot_runs.make_sweep`)."""
    return make_sweep(tmp_path)


def percentile_band(
    values: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    reps: int = REPS,
    seed: int = 0,
) -> np.ndarray:
    """Direct NumPy percentile bootstrap over seeds (rows), as documented in
    ``stats.curve_band``: one draw of whole seeds per resample."""
    idx = np.random.default_rng(seed).integers(0, len(values), size=(reps, len(values)))
    resampled = np.array([statistic(values[i]) for i in idx])
    return np.percentile(resampled, [2.5, 97.5], axis=0)


def reference_stratified_iqm_ci(scores: list[float], reps: int = REPS, seed: int = 0) -> np.ndarray:
    """A loop-by-loop stratified bootstrap of the IQM (one task: strata are the seeds),
    drawing indices the way rliable does (``choice(n, (n, 1))`` per resample)."""
    x = np.asarray(scores, dtype=float)
    n = len(x)
    rng = np.random.RandomState(seed)
    values = []
    for _ in range(reps):
        sample = np.sort(x[rng.choice(n, (n, 1), replace=True)[:, 0]])
        k = int(0.25 * n)
        values.append(sample[k : n - k].mean())
    return np.percentile(values, [2.5, 97.5])


# --------------------------------------------------------------------------- grouping


def test_runs_are_grouped_by_config_without_seed(sweep: Path) -> None:
    groups = group_runs(load_runs([sweep]))
    assert [(g.env, g.label, len(g.runs)) for g in groups] == [
        ("CartPole-v1", "lr=0.0003", 3),
        ("CartPole-v1", "lr=0.001", 3),
        ("Pendulum-v1", "pendulum", 3),
    ]
    assert groups[0].algorithm == "PPOAlgorithm" and groups[2].algorithm == "SacAlgorithm"
    assert [r.seed for r in groups[0].runs] == [0, 1, 2]
    pend = groups[2].runs[0]
    assert (pend.env_steps, pend.wall_time_s, pend.final_return) == (4500, 300.0, pend.best_return)


def test_labels_name_differing_bindings_when_grid_points_collide(tmp_path: Path) -> None:
    for root, lr in (("a", "0.1"), ("b", "0.2")):
        for seed in (0, 1):
            write_run(
                tmp_path / root / "ppo" / f"seed-{seed}",
                bindings=run_bindings("CartPole-v1", "PPOAlgorithm", seed, **{"Adam.lr": lr}),
                evals=[(1000, 1.0, 5.0)],
            )
    labels = [g.label for g in group_runs(load_runs([tmp_path]))]
    assert labels == [
        "CartPole-v1 PPOAlgorithm Adam.lr=0.1",
        "CartPole-v1 PPOAlgorithm Adam.lr=0.2",
    ]


# --------------------------------------------------------------------------- plot


def test_plot_csv_and_png(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out" / "curves.png"
    assert plot_cli.main([str(sweep), f"--out={out}", "--title=fake"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out} and {tmp_path / 'out' / 'curves.csv'}" in printed
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    rows = read_csv(tmp_path / "out" / "curves.csv")
    assert list(rows[0]) == ["env", "group", "env_steps", "center", "low", "high", "seeds"]
    assert {(r["env"], r["group"]) for r in rows} == {
        ("CartPole-v1", "lr=0.001"),
        ("CartPole-v1", "lr=0.0003"),
        ("Pendulum-v1", "pendulum"),
    }
    values = np.array([returns_of(0, seed) for seed in range(3)])  # lr=0.001, seeds x steps
    mine = [r for r in rows if r["group"] == "lr=0.001"]
    assert [int(r["env_steps"]) for r in mine] == EVAL_STEPS
    low, high = percentile_band(values, lambda v: v.mean(axis=0))
    for j, row in enumerate(mine):
        assert float(row["center"]) == pytest.approx(values[:, j].mean(), abs=1e-9)
        assert float(row["low"]) == pytest.approx(low[j], abs=1e-9)
        assert float(row["high"]) == pytest.approx(high[j], abs=1e-9)
        assert row["seeds"] == "3"
        assert float(row["low"]) <= float(row["center"]) <= float(row["high"])


def test_plot_iqm_and_wall_time(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "wall.png"
    assert plot_cli.main([str(sweep), f"--out={out}", "--x=wall_time", "--aggregate=iqm"]) == 0
    rows = read_csv(tmp_path / "wall.csv")
    assert "wall_time_s" in rows[0]
    pend = [r for r in rows if r["group"] == "pendulum"]
    # Same elapsed_s for every seed of the Pendulum runs: exact alignment.
    assert [float(r["wall_time_s"]) for r in pend] == [60.0, 120.0, 180.0, 240.0]
    # CartPole seeds are evaluated 1 s apart: interpolated onto [12, 40] s.
    cart = [r for r in rows if r["group"] == "lr=0.001"]
    xs = [float(r["wall_time_s"]) for r in cart]
    assert xs[0] == 12.0 and xs[-1] == 40.0
    seeds = [(np.array([10.0, 20, 30, 40]) + s, returns_of(0, s)) for s in range(3)]
    at = np.array([np.interp(21.0, x, y) for x, y in seeds])
    row = next(r for r in cart if float(r["wall_time_s"]) == 21.0)
    assert float(row["center"]) == pytest.approx(stats.iqm(at), abs=1e-9)


def test_iqm_band_against_numpy() -> None:
    values = np.random.RandomState(3).normal(size=(8, 5))
    band = stats.curve_band(np.arange(5), values, aggregate="iqm", reps=500, seed=7)

    def trimmed(v: np.ndarray) -> np.ndarray:
        return np.sort(v, axis=0)[2:6].mean(axis=0)

    np.testing.assert_allclose(band.center, trimmed(values))
    low, high = percentile_band(values, trimmed, reps=500, seed=7)
    np.testing.assert_allclose(band.low, low)
    np.testing.assert_allclose(band.high, high)


# --------------------------------------------------------------------------- report


def _decimals(*values: float) -> int:
    """Decimals of a report row's returns: 1 from 100 on, else 2."""
    return 1 if max(abs(v) for v in values) >= 100 else 2


@pytest.mark.parametrize("use_rliable", [True, False])
def test_report_numbers(sweep: Path, use_rliable: bool) -> None:
    groups = group_runs(load_runs([sweep]))
    rows, estimates = group_rows(groups, reps=REPS, use_rliable=use_rliable)
    for row in rows[:2]:
        index = 0 if row.group.label == "lr=0.001" else 1
        finals = [returns_of(index, s)[-1] for s in range(3)]
        assert row.final_mean == pytest.approx(np.mean(finals))
        assert row.final_std == pytest.approx(np.std(finals, ddof=1))
        assert row.final_iqm == pytest.approx(np.mean(finals))  # 3 seeds: nothing trimmed
        low, high = reference_stratified_iqm_ci(finals)
        assert (row.ci_low, row.ci_high) == (pytest.approx(low), pytest.approx(high))
        assert row.best_mean == pytest.approx(
            np.mean([max(returns_of(index, s)) for s in range(3)])
        )
        assert (row.seeds, row.env_steps, row.wall_time_s) == (3, 4000, 41.0)
        assert row.steps_per_s == pytest.approx(4000 / 41.0)
    assert rows[2].wall_time_s == 300.0 and rows[2].env_steps == 4500
    if not use_rliable:
        assert estimates.library == "numpy"


def _rliable_used() -> bool:
    return stats.iqm_interval_estimates({"x": [1.0, 2.0]}, reps=10).library.startswith("rliable")


def test_rliable_and_numpy_agree() -> None:
    if not _rliable_used():
        method = stats.iqm_interval_estimates({"x": [1.0, 2.0]}, reps=10).method
        pytest.skip(f"rliable cannot be used here: {method.split('usable: ')[-1][:-1]}")
    scores = {"a": [1.0, 2.5, 3.0, 10.0, 4.2, 7.7], "b": [3.0, 1.0, 2.0]}
    with_rliable = stats.iqm_interval_estimates(scores, reps=500)
    with_numpy = stats.iqm_interval_estimates(scores, reps=500, use_rliable=False)
    assert with_rliable.library.startswith("rliable")
    for key in scores:
        assert with_rliable.point[key] == pytest.approx(with_numpy.point[key])
        assert with_rliable.low[key] == pytest.approx(with_numpy.low[key])
        assert with_rliable.high[key] == pytest.approx(with_numpy.high[key])


def test_report_cli(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    md = tmp_path / "report.md"
    assert report_cli.main([str(sweep), f"--out={md}"]) == 0
    captured = capsys.readouterr()
    assert md.read_text() == captured.out and f"wrote {md}" in captured.err
    finals = [returns_of(0, s)[-1] for s in range(3)]
    cells = table_row(captured.out, "lr=0.001")
    assert cells[1:5] == ["CartPole-v1", "PPOAlgorithm", "3", "4,000"]
    low, high = reference_stratified_iqm_ci(finals)
    best = np.mean([max(returns_of(0, s)) for s in range(3)])
    d = _decimals(np.mean(finals), best, low, high)
    assert cells[5] == f"{np.mean(finals):.{d}f} ± {np.std(finals, ddof=1):.{d}f}"
    assert cells[6] == (
        f"{np.mean(finals):.{d}f} [{low:.{d}f}, {high:.{d}f}] "
        "(3 seeds: too few for a reliable CI, use 5+)"
    )
    assert cells[7] == "n/a"  # (these runs record no eval/return_std)
    assert cells[8] == f"{best:.{d}f}"
    assert cells[9:] == ["0:00:41", "98"]
    assert table_row(captured.out, "pendulum")[9] == "0:05:00"
    footer = captured.out.split("\n\n")[2]
    assert f"stratified bootstrap over seeds, percentile method, {REPS} resamples" in footer
    if _rliable_used():
        assert "computed by rliable 1." in footer
    else:
        assert "computed by alf.experiments.stats (NumPy; rliable not usable" in footer


def test_runs_in_progress(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lengths = {0: 4, 1: 2, 2: 3, 3: 0}  # evaluations so far; seed 3 has none yet
    for seed, n in lengths.items():
        write_run(
            tmp_path / "runs" / "ppo" / f"seed-{seed}",
            bindings=run_bindings("CartPole-v1", "PPOAlgorithm", seed),
            evals=[
                (s, s / 100, r)
                for s, r in zip(EVAL_STEPS[:n], returns_of(0, seed)[:n], strict=True)
            ],
            last_train=(EVAL_STEPS[n - 1] + 500, 50.0) if n else (500, 3.0),
            state="running" if n < 4 else "finished",
        )
    assert plot_cli.main([str(tmp_path / "runs"), f"--out={tmp_path / 'c.png'}"]) == 0
    printed = capsys.readouterr().out
    assert "seed-3 has no evaluation yet (running)" in printed
    assert "(2,000 to 4,000 env steps evaluated): the curve stops at the end of the" in printed
    rows = read_csv(tmp_path / "c.csv")
    assert [int(r["env_steps"]) for r in rows] == EVAL_STEPS[:2]
    first = np.mean([returns_of(0, s)[0] for s in range(3)])
    assert float(rows[0]["center"]) == pytest.approx(first) and rows[0]["seeds"] == "3"

    text = report_cli_output([str(tmp_path / "runs")], capsys)
    cells = table_row(text, "ppo")
    finals = [returns_of(0, seed)[n - 1] for seed, n in lengths.items() if n]
    assert cells[3] == "3 of 4" and cells[4] == "3,500"  # (4500 + 2500 + 3500) / 3
    best = np.mean([max(returns_of(0, seed)[:n]) for seed, n in lengths.items() if n])
    d = _decimals(np.mean(finals), best, *reference_stratified_iqm_ci(finals))
    assert cells[5] == f"{np.mean(finals):.{d}f} ± {np.std(finals, ddof=1):.{d}f}"
    assert "ppo/seed-1 (ppo): still running" in text and "2,500 env steps" in text
    assert "ppo/seed-3 (ppo): no evaluation yet (running): listed, not in the statistics" in text


def test_sb3_runs_from_run_info(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for seed in range(2):
        info = {
            "framework": "sb3",
            "env_name": "CartPole-v1",
            "algorithm": "PPO",
            "seed": seed,
            "host": f"host{seed}",
            "versions": {"stable_baselines3": "2.3"},
        }
        write_run(
            tmp_path / "sb3" / "sb3_ppo" / f"seed-{seed}",
            bindings=None,
            evals=[(s, 2.0 * s / 1000, 100.0 * seed + s / 100) for s in EVAL_STEPS],
            run_info=info,
        )
    groups = group_runs(load_runs([sweep, tmp_path / "sb3"]))
    sb3 = next(g for g in groups if g.label == "sb3_ppo")
    assert (sb3.env, sb3.algorithm, [r.seed for r in sb3.runs]) == (
        "CartPole-v1",
        "SB3 PPO",
        [0, 1],
    )
    text = report_cli_output([str(sweep), str(tmp_path / "sb3"), "--metadata"], capsys)
    assert table_row(text, "sb3_ppo")[1:4] == ["CartPole-v1", "SB3 PPO", "2"]
    assert "## Metadata (run_info.json)" in text and "- versions.stable_baselines3: `2.3`" in text
    assert "sb3/sb3_ppo/seed-1: " in text and "host: `host1`" in text
    assert "- no run_info.json: sweep/lr=0.001/seed-0" in text
    out = tmp_path / "both.png"
    assert plot_cli.main([str(sweep), str(tmp_path / "sb3"), f"--out={out}"]) == 0
    rows = [r for r in read_csv(tmp_path / "both.csv") if r["group"] == "sb3_ppo"]
    assert [float(r["center"]) for r in rows] == pytest.approx([50 + s / 100 for s in EVAL_STEPS])
