"""End-to-end tests of the off-policy example configs through the real command line
(``python -m alf.bin.train`` then ``python -m alf.bin.play`` in subprocesses) with tiny
budgets and networks. The four trainings run concurrently, then the four plays."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from helpers_cli import (
    REPO,
    checkpoint_steps,
    eval_records,
    play_cmd,
    read_progress,
    run_many,
    train_cmd,
    train_records,
)

EXAMPLES = REPO / "alf" / "examples"
NUM_ENV_STEPS = 300
FLOAT = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
AVERAGE_RETURN_RE = re.compile(rf"^average_return: ({FLOAT})$")

COMMON = (
    f"TrainerConfig.num_env_steps={NUM_ENV_STEPS}",
    "TrainerConfig.initial_collect_steps=100",
    "TrainerConfig.num_eval_episodes=1",
    "TrainerConfig.num_eval_environments=1",
    "TrainerConfig.progress_interval_s=0",
    "ReplayBuffer.max_length=1000",
    # The examples ask for 2 threads: with 4 runs at once on a small machine, tiny
    # networks train many times slower that way.
    "TrainerConfig.torch_num_threads=1",
)
PENDULUM = (
    "TrainerConfig.eval_interval=100",
    "TrainerConfig.summary_interval=50",
)


class Example:
    """An example config, its tiny overrides and what the run must look like."""

    def __init__(
        self,
        conf: str,
        alg: str,
        params: tuple[str, ...],
        *,
        num_envs: int,
        eval_iterations: list[int],
        episode_length: int | None,
    ) -> None:
        self.conf = EXAMPLES / conf
        self.params = (*COMMON, f"{alg}.mini_batch_size=16", *params)
        self.alg = alg
        self.num_iterations = NUM_ENV_STEPS // num_envs
        self.eval_iterations = eval_iterations
        self.episode_length = episode_length


EXAMPLE_RUNS = {
    "sac_pendulum": Example(
        "sac_pendulum.gin",
        "SacAlgorithm",
        (
            *PENDULUM,
            "ActorDistributionNetwork.fc_layer_params=(16, 16)",
            "CriticNetwork.fc_layer_params=(16, 16)",
        ),
        num_envs=1,
        eval_iterations=[100, 200, 300],
        episode_length=200,
    ),
    "td3_pendulum": Example(
        "td3_pendulum.gin",
        "Td3Algorithm",
        (
            *PENDULUM,
            "ActorNetwork.fc_layer_params=(16, 16)",
            "CriticNetwork.fc_layer_params=(16, 16)",
        ),
        num_envs=1,
        eval_iterations=[100, 200, 300],
        episode_length=200,
    ),
    "ddpg_pendulum": Example(
        "ddpg_pendulum.gin",
        "DdpgAlgorithm",
        (
            *PENDULUM,
            "ActorNetwork.fc_layer_params=(16, 16)",
            "CriticNetwork.fc_layer_params=(16, 16)",
        ),
        num_envs=1,
        eval_iterations=[100, 200, 300],
        episode_length=200,
    ),
    # 4 environments: 75 iterations.
    "dqn_cart_pole": Example(
        "dqn_cart_pole.gin",
        "DqnAlgorithm",
        (
            "TrainerConfig.eval_interval=25",
            "TrainerConfig.summary_interval=25",
            "QNetwork.fc_layer_params=(16, 16)",
        ),
        num_envs=4,
        eval_iterations=[25, 50, 75],
        episode_length=None,
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, object, object]]:
    """Trains every example (concurrently), then plays each; by name: the run's
    root_dir, the train process and the play process."""
    base = tmp_path_factory.mktemp("off_policy_cli")
    roots = {name: base / name for name in EXAMPLE_RUNS}
    trained = run_many(
        {
            name: train_cmd(roots[name], *example.params, conf=example.conf)
            for name, example in EXAMPLE_RUNS.items()
        }
    )
    played = run_many(
        {
            name: play_cmd(roots[name], "--num_episodes=1")
            for name in EXAMPLE_RUNS
            if trained[name].returncode == 0
        }
    )
    return {name: (roots[name], trained[name], played.get(name)) for name in EXAMPLE_RUNS}


@pytest.mark.parametrize("name", list(EXAMPLE_RUNS))
def test_train_writes_checkpoint_and_progress(runs, name):
    example = EXAMPLE_RUNS[name]
    root, train, _ = runs[name]
    assert train.returncode == 0, train.stderr[-3000:]
    assert "Traceback" not in train.stderr
    n = example.num_iterations
    assert f"Finished at iteration {n} ({NUM_ENV_STEPS} env steps)" in train.stdout
    assert checkpoint_steps(root) == [n]
    assert not [p.name for p in (root / "checkpoints").iterdir() if ".tmp" in p.name]
    assert f"{example.alg}.mini_batch_size = 16" in (root / "config.gin").read_text()

    records = read_progress(root)
    evals = eval_records(records)
    assert [r["iteration"] for r in evals] == example.eval_iterations
    for record in evals:
        assert math.isfinite(record["eval/average_return"]), record
        if example.episode_length is not None:
            assert record["eval/average_episode_length"] == example.episode_length
    trains = train_records(records)
    assert trains and trains[-1]["env_steps"] <= NUM_ENV_STEPS
    # Training started after the initial collection: the last summaries carry losses.
    last = trains[-1]
    assert last["train/skipped"] == 0.0, last
    assert math.isfinite(last["train/loss"]) and math.isfinite(last["train/grad_norm"]), last


@pytest.mark.parametrize("name", list(EXAMPLE_RUNS))
def test_play_prints_average_return(runs, name):
    _, train, play = runs[name]
    assert train.returncode == 0, train.stderr[-3000:]
    assert play is not None and play.returncode == 0, play.stderr[-3000:]
    assert "Traceback" not in play.stderr
    lines = play.stdout.strip().splitlines()
    match = AVERAGE_RETURN_RE.match(lines[-1])
    assert match, play.stdout
    assert math.isfinite(float(match.group(1)))
    assert sum(line.startswith("episode ") for line in lines) == 1, play.stdout
