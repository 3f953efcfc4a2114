"""Shared parts of the learning tests: train several seeds at once through the command
line, each stopping at its first evaluation that reaches the score, and check the env
steps that took."""

from __future__ import annotations

from pathlib import Path

from helpers_cli import CONF, eval_records, read_progress, run_many, train_cmd

EXAMPLES = CONF.parent
SEEDS = (0, 1, 2)
TIMEOUT_S = 900


def train_seeds(
    tmp: Path, name: str, conf: str, target: float, *params: str, seeds=SEEDS
) -> dict[int, list[dict]]:
    """Trains ``conf`` for every seed until an evaluation reaches ``target``; returns
    each seed's evaluation records."""
    cmds = {
        seed: train_cmd(
            tmp / f"{name}_{seed}",
            f"TrainerConfig.random_seed={seed}",
            f"TrainerConfig.stop_at_eval_return={target}",
            "TrainerConfig.torch_num_threads=1",
            *params,
            conf=EXAMPLES / conf,
        )
        for seed in seeds
    }
    procs = run_many(cmds, max_workers=len(seeds), timeout=TIMEOUT_S)
    for seed, proc in procs.items():
        assert proc.returncode == 0, f"seed {seed}:\n{proc.stderr[-3000:]}"
    return {seed: eval_records(read_progress(tmp / f"{name}_{seed}")) for seed in seeds}


def steps_to(evals: list[dict], target: float) -> int | None:
    for record in evals:
        if record["eval/average_return"] >= target:
            return record["env_steps"]
    return None


def check_reached(name: str, runs: dict[int, list[dict]], target: float, budget: int) -> None:
    reached = {seed: steps_to(evals, target) for seed, evals in runs.items()}
    curves = {
        seed: [(e["env_steps"], round(e["eval/average_return"])) for e in evals]
        for seed, evals in runs.items()
    }
    print(f"{name}: env steps to {target}: {reached}; evaluations: {curves}")
    for seed, steps in reached.items():
        assert steps is not None and steps <= budget, (
            f"{name} seed {seed} did not reach {target} within {budget} env steps: "
            f"{curves[seed]}"
        )
