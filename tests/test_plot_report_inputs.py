"""``alf.bin.plot`` and ``alf.bin.report`` on bad input, on runs they must skip or name,
on runs written by an async or a newer ALF, and on outputs that cannot be written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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
from helpers_plot_runs import (
    make_sweep,
    read_csv,
    report_cli_output,
    run_bindings,
    table_row,
    write_run,
)

from alf.bin import plot as plot_cli
from alf.bin import report as report_cli
from alf.experiments.runs import group_runs, load_runs


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
    """Two CartPole PPO grid points and one Pendulum SAC config, 3 seeds each
    (:func:`helpers_plot_runs.make_sweep`)."""
    return make_sweep(tmp_path)


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
    assert table_row(result.stdout, "pendulum")[1:4] == ["Pendulum-v1", "SacAlgorithm", "3"]
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
    cells = table_row(text, "cp")
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
    cells = table_row(report_cli_output([str(tmp_path / "appo")], capsys), "appo")
    assert cells[1:4] == ["CartPole-v1", "AppoAlgorithm", "1"]


def test_a_run_of_a_newer_alf_with_more_default_bindings_joins_its_seeds(tmp_path: Path) -> None:
    """A newer ALF's operative config lists the defaults of parameters added since; a
    run resumed or started with it is still a seed of the same configuration."""
    old = run_bindings("CartPole-v1", "PPOAlgorithm", 0)
    new = {**run_bindings("CartPole-v1", "PPOAlgorithm", 1), "TrainerConfig.wandb_project": "None"}
    other = run_bindings("CartPole-v1", "PPOAlgorithm", 2, **{"Adam.lr": "0.5"})
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
        bindings = {**run_bindings("HalfCheetah-v5", "SacAlgorithm", seed), **extra}
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
            bindings = {**run_bindings("HalfCheetah-v5", "SacAlgorithm", seed), **extra}
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
    assert table_row(results["alf.bin.report"].stdout, "lr=0.001")[3] == "2"  # 2 seeds left
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
        bindings=run_bindings("CartPole-v1", "PPOAlgorithm", 0),
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
