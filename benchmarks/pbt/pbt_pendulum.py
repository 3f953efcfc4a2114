r"""Benchmark: population-based training against a fixed grid of the same learning rates,
PPO on Pendulum-v1, at the same total env steps (issue 33's PBT target).

Per repeat ``k``:

* **PBT**: ``alf.bin.pbt`` on ``alf/examples/ppo_pendulum.gin`` with a constant learning
  rate (the example's linear decay would restart every round), ``--population=N`` members
  starting on the ``--lrs`` values in turn (``choice``: member ``i`` gets value ``i mod
  len(lrs)``), ``--mutate='PPOAlgorithm.learning_rate=choice(...)'`` (an exploited member
  moves to a neighbouring value, or a random one with probability 0.25), rounds of
  ``--interval`` env steps, ``--num_env_steps`` per member; member ``i`` trains with seed
  ``100 k + i``.
* **Grid**: ``alf.bin.sweep`` over the same ``--lrs``, ``N / len(lrs)`` seeds per value
  (``100 k + j``), each run ``--num_env_steps``: the same number of runs and env steps.

Reported per repeat: each run's final evaluation return (its last evaluation, 10
episodes), the population's best member against the grid's median and best run; then
over the repeats, how often the population's best beat the grid's median, and the means.
The load of the machine (``uptime``) is printed at the start and the end. Each repeat's
population is drawn by ``alf.bin.plot`` (``repeat-<k>/pbt.png``: the members' curves with
their copies, the learning rate of each member by round).

Running the same command again continues: finished populations and sweeps are skipped,
interrupted ones resume from their checkpoints.

Usage::

    python -m benchmarks.pbt.pbt_pendulum --root_dir=~/bench/pbt_pendulum       # the full run
    python -m benchmarks.pbt.pbt_pendulum --root_dir=/tmp/pbt_smoke --repeats=1 \
        --num_env_steps=2048 --interval=1024                                     # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import fmt_num, format_table, median, write_report

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONF = os.path.join(REPO, "alf", "examples", "ppo_pendulum.gin")
LR = "PPOAlgorithm.learning_rate"
DEFAULT_LRS = (1e-4, 3e-4, 1e-3, 3e-3)


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True, help="where the runs go (reused to continue)")
    parser.add_argument("--repeats", type=int, default=3, help="independent repeats (default 3)")
    parser.add_argument(
        "--lrs", default=",".join(map(str, DEFAULT_LRS)), help="the learning rates (the grid)"
    )
    parser.add_argument("--population", type=int, default=4, help="members (a multiple of lrs)")
    parser.add_argument(
        "--num_env_steps", type=int, default=102_400, help="env steps of each run/member"
    )
    parser.add_argument("--interval", type=int, default=10_240, help="env steps per PBT round")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    return parser


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime: not available"


def _run(cmd: list[str], log: str) -> None:
    """Runs an ALF command with its output in ``log``; exits naming the log on failure."""
    print(f"$ {' '.join(cmd)}  (output: {log})", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with open(log, "a") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=env).returncode
    if code != 0:
        with open(log) as f:
            tail = "".join(f.readlines()[-15:])
        sys.exit(f"failed (exit {code}): {' '.join(cmd[:4])} ...; the end of {log}:\n{tail}")


def _final_return(run_dir: str) -> float | None:
    """The run's last evaluation return."""
    last = None
    try:
        with open(os.path.join(run_dir, "progress.jsonl")) as f:
            for line in f:
                record = json.loads(line)
                if "eval/average_return" in record:
                    last = float(record["eval/average_return"])
    except (OSError, ValueError):
        return None
    return last


def _repeat(args: argparse.Namespace, k: int, lrs: list[str]) -> dict[str, Any]:
    """Trains (or continues) repeat ``k``'s population and grid; returns their finals."""
    root = os.path.join(os.path.expanduser(args.root_dir), f"repeat-{k}")
    os.makedirs(root, exist_ok=True)
    common = [f"--conf={CONF}", f"--conf_param={LR}=1e-3", f"--jobs={args.jobs}"]
    pbt_dir, grid_dir = os.path.join(root, "pbt"), os.path.join(root, "grid")
    py = [sys.executable, "-m"]
    _run(
        [
            *py, "alf.bin.pbt", *common, f"--root_dir={pbt_dir}",
            f"--population={args.population}", f"--interval={args.interval}",
            f"--num_env_steps={args.num_env_steps}", f"--seed={100 * k}",
            f"--mutate={LR}=choice({', '.join(lrs)})",
        ],
        os.path.join(root, "pbt.log"),
    )  # fmt: skip
    seeds = ",".join(str(100 * k + j) for j in range(args.population // len(lrs)))
    _run(
        [
            *py, "alf.bin.sweep", *common, f"--root_dir={grid_dir}", f"--seeds={seeds}",
            f"--grid={LR}=[{', '.join(lrs)}]",
            f"--conf_param=TrainerConfig.num_env_steps={args.num_env_steps}",
        ],
        os.path.join(root, "grid.log"),
    )  # fmt: skip
    _run([*py, "alf.bin.plot", pbt_dir, f"--out={root}/pbt.png"], os.path.join(root, "plot.log"))
    members = [_final_return(os.path.join(pbt_dir, f"member-{i}")) for i in range(args.population)]
    grid = {  # "learning_rate=0.001/seed-0" -> "0.001/0"
        f"{name.split('=', 1)[-1]}/{seed.removeprefix('seed-')}": _final_return(
            os.path.join(grid_dir, name, seed)
        )
        for name in sorted(os.listdir(grid_dir))
        if os.path.isdir(os.path.join(grid_dir, name))
        for seed in sorted(os.listdir(os.path.join(grid_dir, name)))
        if seed.startswith("seed-")
    }
    return {"pbt": members, "grid": grid}


def _report(results: list[dict[str, Any]]) -> str:
    rows, wins = [], 0
    for k, result in enumerate(results):
        members = [r for r in result["pbt"] if r is not None]
        grid = [r for r in result["grid"].values() if r is not None]
        best, grid_median = max(members), median(grid)
        wins += best > grid_median
        rows.append(
            [
                f"repeat {k}",
                " ".join(fmt_num(r, 1) for r in result["pbt"]),
                fmt_num(best, 1),
                " ".join(f"{name}:{fmt_num(r, 1)}" for name, r in result["grid"].items()),
                fmt_num(grid_median, 1),
                fmt_num(max(grid), 1),
            ]
        )
    header = ["", "PBT members", "PBT best", "grid runs (lr/seed)", "grid median", "grid best"]
    return (
        format_table(header, rows)
        + f"\n\nPBT's best member beat the grid's median in {wins} of {len(results)} repeats"
    )


def main(argv: list[str] | None = None) -> int:
    """Runs (or continues) every repeat and prints the comparison."""
    args = build_parser().parse_args(argv)
    lrs = [repr(float(text)) for text in args.lrs.split(",")]
    if args.population % len(lrs):
        sys.exit(f"--population {args.population} must be a multiple of the {len(lrs)} lrs")
    print(f"start: {_uptime()}", flush=True)
    results = [_repeat(args, k, lrs) for k in range(args.repeats)]
    text = _report(results) + f"\nend: {_uptime()}"
    write_report({"settings": vars(args), "results": results}, text, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
