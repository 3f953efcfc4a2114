"""Benchmark: what RND costs PPO in env steps per second, on the same MiniGrid task.

Trains ``alf/examples/ppo_minigrid_multiroom.gin`` (PPO) and
``alf/examples/ppo_rnd_minigrid.gin`` (the same settings with RND) for
``--num_env_steps`` each, through the real command line in fresh subprocesses,
alternating the two in ABBA order for ``--rounds`` rounds so that a drifting machine load
affects both alike, and prints ``uptime`` before each run. Two rates per run:

* wall: its env steps divided by its ``train_time_s`` (collection and updates; start-up,
  evaluation and checkpoints excluded);
* CPU: its env steps beyond a one-iteration run of the same config divided by the CPU
  seconds (user + system) it took beyond that run, so start-up cancels out. On a machine
  shared with other jobs the wall rate follows their load; the CPU rate much less.

The report gives the median rates of each, and the cost ``1 - rnd / ppo`` of each kind
(the issue's target: at most 30%).

Usage::

    python -m benchmarks.ppo.rnd_cost                                # 3 rounds of 61,440 steps
    python -m benchmarks.ppo.rnd_cost --rounds 1 --num_env_steps 20480   # a quick look
    python -m benchmarks.ppo.rnd_cost --env MiniGrid-DoorKey-8x8-v0 --json /tmp/rnd_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from typing import Any

from benchmarks.common import (  # noqa: E402
    fmt_num,
    format_table,
    machine_info,
    median,
    uptime,
    write_report,
)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIGS = {
    "ppo": os.path.join(REPO, "alf", "examples", "ppo_minigrid_multiroom.gin"),
    "ppo+rnd": os.path.join(REPO, "alf", "examples", "ppo_rnd_minigrid.gin"),
}
TARGET_COST = 0.30


def _train(name: str, env: str, num_env_steps: int, root: str) -> dict[str, Any]:
    """Trains config ``name`` into ``root``; its env steps, train time and rate."""
    cmd = [
        sys.executable,
        "-m",
        "alf.bin.train",
        f"--conf={CONFIGS[name]}",
        f"--root_dir={root}",
        f"--conf_param=create_environment.env_name='{env}'",
        f"--conf_param=TrainerConfig.num_env_steps={num_env_steps}",
        "--conf_param=TrainerConfig.eval_interval=0",
        "--conf_param=TrainerConfig.num_eval_episodes=1",
        "--conf_param=TrainerConfig.summary_interval=1",
        "--conf_param=TrainerConfig.checkpoint_interval=100000",
        "--conf_param=TrainerConfig.random_seed=0",
    ]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environ, cwd=REPO, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(root, "progress.jsonl")) as f:
        records = [json.loads(line) for line in f]
    last = [r for r in records if "train_time_s" in r and "fps" in r][-1]
    steps, seconds = int(last["env_steps"]), float(last["train_time_s"])
    return {
        "env_steps": steps,
        "train_time_s": seconds,
        "cpu_s": cpu_s,
        "steps_per_s": steps / seconds,
    }


def main() -> None:
    """Runs the benchmark and prints the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="MiniGrid-MultiRoom-N4-S5-v0")
    parser.add_argument("--num_env_steps", type=int, default=61_440)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the raw numbers here")
    args = parser.parse_args()
    print(json.dumps(machine_info()), flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="rnd_cost_") as tmp:
        # One iteration of each: the start-up's CPU seconds, subtracted below.
        start = {
            name: _train(name, args.env, 1, os.path.join(tmp, f"{name}_start")) for name in CONFIGS
        }
        for i in range(args.rounds):
            order = list(CONFIGS) if i % 2 == 0 else list(reversed(CONFIGS))
            for name in order:
                print(f"uptime: {uptime()}", flush=True)
                root = os.path.join(tmp, f"{name}_{i}")
                run = _train(name, args.env, args.num_env_steps, root)
                first = start[name]
                run["cpu_steps_per_s"] = (run["env_steps"] - first["env_steps"]) / (
                    run["cpu_s"] - first["cpu_s"]
                )
                runs[name].append(run)
                print(
                    f"round {i} {name}: {run['steps_per_s']:.0f} env steps/s (wall), "
                    f"{run['cpu_steps_per_s']:.0f} per CPU second",
                    flush=True,
                )
    print(f"uptime: {uptime()}", flush=True)
    text, results = _report(args, runs)
    write_report(results, text, args.json)


def _report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> tuple[str, dict]:
    """The report's text and its raw numbers."""
    kinds = {"wall": "steps_per_s", "CPU": "cpu_steps_per_s"}
    rates = {
        kind: {name: median([r[key] for r in rs]) for name, rs in runs.items()}
        for kind, key in kinds.items()
    }
    costs = {kind: 1.0 - rate["ppo+rnd"] / rate["ppo"] for kind, rate in rates.items()}
    rows = [
        [name, *(fmt_num(rates[kind][name]) for kind in kinds)]
        + [" ".join(fmt_num(r["steps_per_s"]) for r in runs[name])]
        for name in CONFIGS
    ]
    lines = [
        f"{args.env}, {args.num_env_steps} env steps per run, {args.rounds} rounds (ABBA)",
        format_table(["config", "wall steps/s", "CPU steps/s", "each run (wall)"], rows),
    ]
    for kind, cost in costs.items():
        verdict = "met" if cost <= TARGET_COST else "NOT met"
        lines.append(
            f"RND's cost ({kind}): {100 * cost:.1f}% of PPO's env steps/s "
            f"(target <= {100 * TARGET_COST:.0f}%: {verdict})"
        )
    return "\n".join(lines), {"args": vars(args), "runs": runs, "median": rates, "cost": costs}


if __name__ == "__main__":
    main()
