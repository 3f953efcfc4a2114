"""``benchmarks/peers/benchmarl_spread.py``'s parts that run in ALF's environment: its
resumption (the newest readable checkpoint, the evaluation rows cut back to it) and its
side-by-side report (no BenchMARL needed)."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks.peers import benchmarl_results as results  # noqa: E402
from benchmarks.peers import benchmarl_spread as bm  # noqa: E402


def _write_evaluations(path: Path, rows: list[tuple[int, float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(bm.CSV_COLUMNS)
        for agent_steps, ret in rows:
            frames = agent_steps // bm.NUM_AGENTS
            writer.writerow([agent_steps, frames, frames // 400, ret, 1.0, 32, 1.0])


def test_latest_checkpoint_skips_a_truncated_newest_file(tmp_path: Path) -> None:
    folder = tmp_path / "ippo_run" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save({"state": {"total_frames": 2000}}, folder / "checkpoint_2000.pt")
    torch.save({"state": {"total_frames": 4000}}, folder / "checkpoint_4000.pt")
    assert bm.latest_checkpoint(tmp_path) == folder / "checkpoint_4000.pt"
    full = (folder / "checkpoint_4000.pt").read_bytes()
    (folder / "checkpoint_4000.pt").write_bytes(full[: len(full) // 2])  # killed mid-save
    assert bm.latest_checkpoint(tmp_path) == folder / "checkpoint_2000.pt"
    assert bm.latest_checkpoint(tmp_path / "elsewhere") is None


def test_resuming_drops_the_evaluations_after_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "evaluations.csv"
    _write_evaluations(path, [(1200, -36.0), (6000, -30.0), (12000, -28.0)])
    bm.keep_evaluations_up_to(path, frames=2000)
    rows = list(csv.DictReader(open(path)))
    assert [int(r["agent_steps"]) for r in rows] == [1200, 6000]
    assert list(rows[0]) == list(bm.CSV_COLUMNS)


def test_the_report_compares_both_frameworks_at_common_points(tmp_path: Path) -> None:
    for seed, shift in enumerate((0.0, 1.0, 2.0)):
        _write_evaluations(
            tmp_path / f"s{seed}" / f"seed-{seed}" / "evaluations.csv",
            [(60000, -30.0 + shift), (120000, -25.0 + shift), (180000, -22.0 + shift)],
        )
    benchmarl = results.benchmarl_curves(tmp_path)
    assert len(benchmarl) == 3
    alf = {f"alf-{s}": {60000: -20.0 - s, 120000: -18.0 - s} for s in range(3)}
    rows, method = results.compare({"BenchMARL IPPO": benchmarl, "ALF PPO": alf}, [60000, 99])
    # 99 was evaluated by none; 120,000 is the last point both evaluated.
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("60,000", "BenchMARL IPPO", 3),
        ("60,000", "ALF PPO", 3),
        ("120,000", "BenchMARL IPPO", 3),
        ("120,000", "ALF PPO", 3),
    ]
    assert rows[0][3].startswith("-29.00 [") and rows[3][3].startswith("-19.00 [")
    assert rows[1][4] == "-20.00, -21.00, -22.00"
    assert "IQM" in method


def test_the_report_reads_alf_runs(tmp_path: Path) -> None:
    run = tmp_path / "ppo_simple_spread" / "seed-0"
    run.mkdir(parents=True)
    (run / "config.gin").write_text("TrainerConfig.random_seed = 0\n")
    (run / "progress.jsonl").write_text(
        '{"iteration": 50, "env_steps": 60000, "eval/average_return": -21.5}\n'
        '{"iteration": 100, "env_steps": 120000, "eval/average_return": -19.0}\n'
    )
    assert results.alf_curves(tmp_path) == {str(run): {60000: -21.5, 120000: -19.0}}


@pytest.mark.parametrize("missing", ["BenchMARL", "ALF"])
def test_the_report_says_which_side_has_no_runs(tmp_path: Path, missing: str) -> None:
    (tmp_path / "bm").mkdir()
    (tmp_path / "alf").mkdir()
    if missing == "ALF":
        _write_evaluations(tmp_path / "bm" / "seed-0" / "evaluations.csv", [(60000, -20.0)])
    args = bm.argparse.Namespace(
        out=str(tmp_path / "bm"),
        alf_runs=str(tmp_path / "alf"),
        report_points="60000",
        algorithm="ippo",
    )
    with pytest.raises(SystemExit, match=f"no {missing} .*runs found"):
        results.report(args)


def test_a_finished_seed_is_written_as_an_alf_run(tmp_path: Path) -> None:
    from alf.experiments.runs import load_runs

    run_dir = tmp_path / "seed-1"
    _write_evaluations(run_dir / "evaluations.csv", [(1200, -36.5), (60000, -22.25)])
    (run_dir / "run.json").write_text('{"agent_steps": 60000, "versions": {"benchmarl": "1.5.2"}}')
    results.write_alf_format(run_dir, seed=1, algorithm="ippo")
    (run,) = load_runs([str(tmp_path)])
    assert (run.algorithm, run.env, run.seed, run.status) == (
        "BENCHMARL IPPO",
        results.ENV_NAME,
        1,
        "finished",
    )
    assert run.eval_steps.tolist() == [1200, 60000]
    assert run.eval_returns.tolist() == [-36.5, -22.25]
    assert run.final_episode_std == 1.0
