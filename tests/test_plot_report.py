"""``alf.bin.plot`` and ``alf.bin.report`` on fake run directories with known numbers
(checked against direct NumPy computations), on runs of another framework described by
``run_info.json``, on bad input, and once on a real tiny training run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from helpers_cli import (
    REPO,
    TINY_PARAMS,
    assert_clean_user_error,
    error_lines,
    run_cli,
    run_many,
    snapshot,
    train_cmd,
)

from alf.bin import plot as plot_cli
from alf.bin import report as report_cli
from alf.experiments import stats
from alf.experiments.report import group_rows
from alf.experiments.runs import group_runs, load_runs

REPS = 2000
EVAL_STEPS = [1000, 2000, 3000, 4000]
LRS = {"lr=0.001": "0.001", "lr=0.0003": "0.0003"}


def _config(env: str, algorithm: str, seed: int, **extra: str) -> dict[str, str]:
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


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
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
                bindings=_config(env, algorithm, seed, **extra),
                evals=[
                    (s, t, r + offset)
                    for s, t, r in zip(EVAL_STEPS, times, returns_of(g, seed), strict=True)
                ],
                last_train=last,
            )
    return tmp_path


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


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
                bindings=_config("CartPole-v1", "PPOAlgorithm", seed, **{"Adam.lr": lr}),
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


def _table_row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


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
    cells = _table_row(captured.out, "lr=0.001")
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
    assert _table_row(captured.out, "pendulum")[9] == "0:05:00"
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
            bindings=_config("CartPole-v1", "PPOAlgorithm", seed),
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
    cells = _table_row(text, "ppo")
    finals = [returns_of(0, seed)[n - 1] for seed, n in lengths.items() if n]
    assert cells[3] == "3 of 4" and cells[4] == "3,500"  # (4500 + 2500 + 3500) / 3
    best = np.mean([max(returns_of(0, seed)[:n]) for seed, n in lengths.items() if n])
    d = _decimals(np.mean(finals), best, *reference_stratified_iqm_ci(finals))
    assert cells[5] == f"{np.mean(finals):.{d}f} ± {np.std(finals, ddof=1):.{d}f}"
    assert "ppo/seed-1 (ppo): still running" in text and "2,500 env steps" in text
    assert "ppo/seed-3 (ppo): no evaluation yet (running): listed, not in the statistics" in text


def report_cli_output(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """Runs ``alf.bin.report``'s ``main`` in this process; returns its stdout."""
    capsys.readouterr()
    assert report_cli.main(argv) == 0
    return capsys.readouterr().out


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
    assert _table_row(text, "sb3_ppo")[1:4] == ["CartPole-v1", "SB3 PPO", "2"]
    assert "## Metadata (run_info.json)" in text and "- versions.stable_baselines3: `2.3`" in text
    assert "sb3/sb3_ppo/seed-1: " in text and "host: `host1`" in text
    assert "- no run_info.json: sweep/lr=0.001/seed-0" in text
    out = tmp_path / "both.png"
    assert plot_cli.main([str(sweep), str(tmp_path / "sb3"), f"--out={out}"]) == 0
    rows = [r for r in read_csv(tmp_path / "both.csv") if r["group"] == "sb3_ppo"]
    assert [float(r["center"]) for r in rows] == pytest.approx([50 + s / 100 for s in EVAL_STEPS])


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("cli", [plot_cli, report_cli])
def test_bad_directories(
    cli: ModuleType, tmp_path: Path, sweep: Path, capsys: pytest.CaptureFixture
) -> None:
    prog = cli.__name__
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    (other / "sub" / "notes.txt").write_text("x")
    for bad, why in ((tmp_path / "missing", " (no such directory)"), (empty, ""), (other, "")):
        assert cli.main([str(sweep), str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"{prog}: error: no run directory (config.gin or progress.jsonl) under '{bad}'{why}"
        ]


def test_bad_input_in_a_subprocess(tmp_path: Path) -> None:
    for prog in ("alf.bin.plot", "alf.bin.report"):
        result = run_cli([sys.executable, "-m", prog, str(tmp_path / "nope")], timeout=120)
        assert result.returncode == 2
        assert_clean_user_error(result, prog, "no run directory", str(tmp_path / "nope"))


def test_clis_in_subprocesses_and_no_torch(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "p" / "curves.svg"
    result = run_cli([sys.executable, "-m", "alf.bin.plot", str(sweep), f"--out={out}"], 120)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 0 and (tmp_path / "p" / "curves.csv").is_file()
    assert f"wrote {out}" in result.stdout
    result = run_cli([sys.executable, "-m", "alf.bin.report", str(sweep)], 120)
    assert result.returncode == 0, result.stderr
    assert _table_row(result.stdout, "pendulum")[1:4] == ["Pendulum-v1", "SacAlgorithm", "3"]
    code = (
        "import sys, alf.bin.plot, alf.bin.report, alf.experiments.plotting, "
        "alf.experiments.report; assert 'torch' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, check=False).returncode == 0


# --------------------------------------------------------------------------- a real run


def test_real_tiny_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "cp" / "seed-0"
    result = run_cli(train_cmd(root, *TINY_PARAMS))
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "curves.png"
    assert plot_cli.main([str(tmp_path / "cp"), f"--out={out}"]) == 0
    rows = read_csv(tmp_path / "curves.csv")
    assert {r["env"] for r in rows} == {"CartPole-v1"} and {r["group"] for r in rows} == {"cp"}
    assert int(rows[-1]["env_steps"]) == 2048 and rows[-1]["seeds"] == "1"
    text = report_cli_output([str(tmp_path / "cp")], capsys)
    cells = _table_row(text, "cp")
    assert cells[1:5] == ["CartPole-v1", "PPOAlgorithm", "1", "2,048"]
    assert "no CI" in cells[6]


def test_an_async_run_is_plotted_and_reported_like_a_sync_one(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """APPO with actor processes writes the same progress.jsonl as a sync run."""
    root = tmp_path / "appo" / "seed-0"
    conf = REPO / "alf" / "examples" / "appo_cart_pole.gin"
    result = run_cli(
        train_cmd(
            root,
            "TrainerConfig.num_iterations=6",
            "TrainerConfig.num_env_steps=0",
            "TrainerConfig.eval_interval=3",
            "TrainerConfig.num_eval_episodes=2",
            "TrainerConfig.num_eval_environments=2",
            conf=conf,
        )
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "curves.png"
    assert plot_cli.main([str(tmp_path / "appo"), f"--out={out}"]) == 0
    rows = read_csv(tmp_path / "curves.csv")
    assert [r["group"] for r in rows] == ["appo", "appo"]
    cells = _table_row(report_cli_output([str(tmp_path / "appo")], capsys), "appo")
    assert cells[1:4] == ["CartPole-v1", "AppoAlgorithm", "1"]


def test_a_run_of_a_newer_alf_with_more_default_bindings_joins_its_seeds(tmp_path: Path) -> None:
    """A newer ALF's operative config lists the defaults of parameters added since; a
    run resumed or started with it is still a seed of the same configuration."""
    old = _config("CartPole-v1", "PPOAlgorithm", 0)
    new = {**_config("CartPole-v1", "PPOAlgorithm", 1), "TrainerConfig.wandb_project": "None"}
    other = _config("CartPole-v1", "PPOAlgorithm", 2, **{"Adam.lr": "0.5"})
    write_run(tmp_path / "a" / "seed-0", bindings=old, evals=[(100, 1.0, 5.0)])
    write_run(tmp_path / "a" / "seed-1", bindings=new, evals=[(100, 1.0, 6.0)])
    write_run(tmp_path / "b" / "seed-2", bindings=other, evals=[(100, 1.0, 7.0)])
    groups = group_runs(load_runs([tmp_path]))
    assert sorted(len(g.runs) for g in groups) == [1, 2]


def test_seeds_of_one_point_differ_only_by_bindings_a_newer_alf_added(tmp_path: Path) -> None:
    """Seeds in one sweep point's directory, started by different ALF versions, are one
    configuration when one lists bindings the other lacks (parameters added since, with
    their defaults); in another directory such a binding is a difference (it may not be
    the default), and a binding both have with different values always is."""
    added = {"SacAlgorithm.encoder_ctor": "None", "action_mask_key.name": "'action_mask'"}

    def run(name: str, seed: int, **extra: str) -> None:
        bindings = {**_config("HalfCheetah-v5", "SacAlgorithm", seed), **extra}
        write_run(
            tmp_path / name / f"seed-{seed}", bindings=bindings, evals=[(100, 1.0, float(seed))]
        )

    run("sac", 0)
    run("sac", 1, **added)
    run("sac", 2, **added)
    run("sac_new_option", 4, **{"SacAlgorithm.std_transform": "'exp'"})
    run("not_a_seed_dir", 5, **{"Other.x": "1"})
    (tmp_path / "not_a_seed_dir" / "seed-5").rename(tmp_path / "not_a_seed_dir" / "manual")
    run("not_a_seed_dir", 6, **{"Other.x": "1"}, **added)
    groups = group_runs(load_runs([tmp_path]))
    assert sorted(sorted(r.seed for r in g.runs) for g in groups) == [[0, 1, 2], [4], [5], [6]]
    merged = next(g for g in groups if len(g.runs) == 3)
    assert "unset" not in merged.label

    # Ambiguous (the old seed fits two groups of the point, whatever the seed order): apart.
    for old_seed in (10, 13):
        root = tmp_path / f"ambiguous_{old_seed}"
        for seed, extra in (
            (old_seed, {}),
            (11, {**added, "SacAlgorithm.encoder_ctor": "@E"}),
            (12, added),
            (14, added),
        ):
            bindings = {**_config("HalfCheetah-v5", "SacAlgorithm", seed), **extra}
            write_run(
                root / "sac" / f"seed-{seed}", bindings=bindings, evals=[(100, 1.0, float(seed))]
            )
        groups = group_runs(load_runs([root]))
        assert sorted(sorted(r.seed for r in g.runs) for g in groups) == sorted(
            [[old_seed], [11], [12, 14]]
        )


# --------------------------------------------------------------------------- bad files


def _run_tools(*args: str) -> dict[str, subprocess.CompletedProcess]:
    """``alf.bin.plot`` and ``alf.bin.report`` run as a user types them, on ``args``."""
    return run_many(
        {prog: [sys.executable, "-m", prog, *args] for prog in ("alf.bin.plot", "alf.bin.report")},
        timeout=120,
    )


def test_a_config_that_is_not_utf8_skips_its_run_with_one_warning(
    sweep: Path, tmp_path: Path
) -> None:
    bad = sweep / "sweep" / "lr=0.001" / "seed-1"
    with open(bad / "config.gin", "ab") as f:
        f.write(b"# \xff\xfe latin-1 \xe9\n")
    before = snapshot(sweep / "sweep")
    out = tmp_path / "out" / "c.png"
    results = _run_tools(str(sweep / "sweep"), f"--out={out}")
    for prog, result in results.items():
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        warnings = [line for line in lines if line.startswith(f"{prog}: warning:")]
        assert warnings == [
            f"{prog}: warning: skipped a run: {bad / 'config.gin'} is not UTF-8 text (byte 0xff)"
        ], result.stderr
    assert _table_row(results["alf.bin.report"].stdout, "lr=0.001")[3] == "2"  # 2 seeds left
    # Only the bad run: one error line naming the file, exit 2.
    for prog, result in _run_tools(str(bad), f"--out={tmp_path / 'd.png'}").items():
        assert result.returncode == 2, result.stderr
        assert_clean_user_error(result, prog, "no readable run", str(bad / "config.gin"))
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert snapshot(sweep / "sweep") == before


@pytest.mark.parametrize("how", ["a file in the way", "a read-only folder"])
def test_an_out_that_cannot_be_written_is_one_line(sweep: Path, tmp_path: Path, how: str) -> None:
    if how == "a file in the way":
        blocker = tmp_path / "blocker"
        blocker.write_text("x")
        target = blocker / "curves.png"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        target = folder / "curves.png"
    for prog, result in _run_tools(str(sweep), f"--out={target}").items():
        assert result.returncode == 2, result.stderr
        assert_clean_user_error(result, prog, f"--out '{target}'")
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not target.exists()


def test_nan_evaluations_are_named_as_non_finite(tmp_path: Path) -> None:
    nan = float("nan")
    run = write_run(
        tmp_path / "runs" / "seed-0",
        bindings=_config("CartPole-v1", "PPOAlgorithm", 0),
        evals=[(1000, 1.0, nan), (2000, 2.0, nan)],
    )
    before = snapshot(tmp_path / "runs")
    results = _run_tools(str(tmp_path / "runs"), f"--out={tmp_path / 'c.png'}")
    plot = results["alf.bin.plot"]
    assert plot.returncode == 1, plot.stderr
    errors = error_lines(plot.stderr, "alf.bin.plot")
    assert errors == [
        f"alf.bin.plot: error: nothing to plot: run {run}: its 2 evaluations are non-finite "
        "(NaN or inf)"
    ], plot.stderr
    assert "has an evaluation record yet" not in plot.stderr
    report = results["alf.bin.report"]
    assert report.returncode == 0, report.stderr
    assert "its 2 evaluations are non-finite (NaN or inf)" in report.stdout
    assert snapshot(tmp_path / "runs") == before
