"""``benchmarks/mujoco/mujoco_bench.py``: its flags, its config helpers (``mujoco_alf.py``), its
aggregates (``mujoco_report.py``), and a tiny real run of both frameworks (Hopper-v5, PPO,
4096 env steps, an evaluation every 2048) that must leave two ALF-format run directories."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "benchmarks", "mujoco", "mujoco_bench.py")
EVAL_KEYS = (
    "iteration",
    "env_steps",
    "elapsed_s",
    "train_time_s",
    "eval/average_return",
    "eval/average_episode_length",
)


@pytest.fixture(scope="module")
def bench() -> SimpleNamespace:
    """The script's helper modules, imported as ``benchmarks.mujoco.*`` (the repository
    root on ``sys.path``): ``alf`` (``mujoco_alf``) and ``report`` (``mujoco_report``)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from benchmarks.mujoco import mujoco_alf, mujoco_report

    return SimpleNamespace(alf=mujoco_alf, report=mujoco_report)


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def _records(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "progress.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def test_help_exits_zero():
    proc = _run("--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--envs", "--algos", "--seeds", "--num_env_steps", "--frameworks",
                 "--root_dir", "--short", "--json"):
        assert flag in proc.stdout


def test_bad_flags_exit_two(tmp_path):
    proc = _run("--envs", "NoSuchEnv-v0", "--root_dir", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert "unknown env" in proc.stderr
    assert not os.listdir(tmp_path)


def test_reads_the_ppo_config_with_its_include(bench):
    bindings = bench.alf.read_config_bindings(bench.alf.config_path("ppo", "Hopper-v5"))
    assert bindings["create_environment.env_name"] == '"Hopper-v5"'  # the file's own
    assert bindings["PPOAlgorithm.num_epochs"] == "10"  # from common/mujoco_ppo.gin
    assert bench.alf.check_alf_config("ppo", bindings) == []
    assert bench.alf.cadence("ppo", bindings) == {
        "steps_per_iteration": 2048,
        "eval_every_steps": 20480,
        "summary_every_steps": 4096,
    }
    changed = {**bindings, "PPOAlgorithm.num_epochs": "4"}
    del changed["PPOAlgorithm.gamma"]
    problems = bench.alf.check_alf_config("ppo", changed)
    assert len(problems) == 2
    assert any("num_epochs = 4" in p for p in problems)
    assert any("PPOAlgorithm.gamma not bound" in p for p in problems)


def test_value_comparison(bench):
    assert bench.alf.same_value("3e-4", "0.0003")
    assert bench.alf.same_value("(64, 64)", "[64,64]")
    assert bench.alf.same_value('"tanh"', "tanh")
    assert not bench.alf.same_value("0.99", "0.999")


def test_time_to_sb3_final(bench):
    evals = [
        {"average_return": 10.0, "elapsed_s": 5.0},
        {"average_return": 30.0, "elapsed_s": 9.0},
        {"average_return": 20.0, "elapsed_s": 12.0},
    ]
    assert bench.report.time_to_return(evals, 25.0) == 9.0
    assert bench.report.time_to_return(evals, 31.0) is None
    runs = [
        {"seed": 0, "final_eval_return": 20.0, "best_eval_return": 30.0, "elapsed_s": 12.0,
         "steps_per_s_train": 100.0, "steps_per_s_wall": 90.0, "evals": evals},
        {"seed": 1, "final_eval_return": 40.0, "best_eval_return": 40.0, "elapsed_s": 20.0,
         "steps_per_s_train": 110.0, "steps_per_s_wall": 95.0,
         "evals": [{"average_return": 40.0, "elapsed_s": 20.0}]},
    ]
    agg = bench.report.aggregate(runs, threshold=25.0, sb3_wall=29.0)
    assert agg["final_mean"] == 30.0
    assert agg["best_mean"] == 35.0
    assert agg["time_to_sb3_final_per_seed"] == [9.0, 20.0]
    assert agg["median_time_to_sb3_final_s"] == 14.5
    assert agg["reached_sb3_final"] == "2/2"
    assert agg["time_ratio_to_sb3_wall"] == pytest.approx(0.5)


def test_tiny_run_writes_two_run_dirs_and_a_rerun_skips_them(tmp_path):
    if importlib.util.find_spec("stable_baselines3") is None:
        pytest.skip("stable-baselines3 is not installed")
    if importlib.util.find_spec("mujoco") is None:
        pytest.skip("mujoco is not installed (the [mujoco] extra)")
    root = str(tmp_path / "bench")
    args = ("--envs", "Hopper-v5", "--algos", "ppo", "--seeds", "0", "--num_env_steps",
            "4096", "--eval_every_steps", "2048", "--frameworks", "alf,sb3", "--root_dir",
            root, "--no_report", "--json", str(tmp_path / "results.json"))
    proc = _run(*args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "uptime" in proc.stdout and "PPO Hopper-v5" in proc.stdout

    for framework in ("alf", "sb3"):
        run_dir = os.path.join(root, framework, "ppo_hopper", "seed-0")
        records = _records(run_dir)
        evals = [r for r in records if "eval/average_return" in r]
        assert evals, f"{framework}: no evaluation record in {records}"
        for key in EVAL_KEYS:
            assert key in evals[-1], f"{framework}: {key} missing from {evals[-1]}"
        assert [r["env_steps"] for r in evals] == [2048, 4096]
        status = _json(os.path.join(run_dir, "status.json"))
        assert status["state"] == "finished"
        assert status["num_env_steps"] == 4096

    sb3_dir = os.path.join(root, "sb3", "ppo_hopper", "seed-0")
    info = _json(os.path.join(sb3_dir, "run_info.json"))
    assert info["framework"] == "sb3"
    assert info["env_name"] == "Hopper-v5"
    assert info["algorithm"] == "PPO"
    assert info["seed"] == 0
    assert info["sb3_version"]
    assert info["hyperparameters"]["n_steps"] == 256
    train = [r for r in _records(sb3_dir) if "fps" in r]
    assert train and "train/average_return" in train[-1]
    assert os.path.isfile(os.path.join(root, "alf", "ppo_hopper", "seed-0", "config.gin"))

    results = _json(str(tmp_path / "results.json"))
    summary = results["combinations"][0]["summary"]
    assert set(summary) == {"alf", "sb3"}
    assert summary["sb3"]["final_mean"] is not None

    again = _run(*args, timeout=120)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("finished earlier, skipped") == 2
