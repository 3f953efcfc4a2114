"""A run with two policies: the one it trains and a frozen one (``TrainerConfig.
frozen_policies``), each with its own checkpoint entry and summaries."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from helpers_cli import run_cli, run_many, train_cmd

BUDGET = ("TrainerConfig.num_env_steps=512", "TrainerConfig.eval_interval=2")
FEW_EPISODES = ("TrainerConfig.num_eval_episodes=2", "TrainerConfig.progress_interval_s=0")


def _frozen(name: str, source: Path | str) -> str:
    return f"TrainerConfig.frozen_policies={{'{name}': '{source}'}}"


def _checkpoint(root: Path, iteration: int) -> dict:
    return torch.load(root / "checkpoints" / f"ckpt-{iteration}.pt", weights_only=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``source``: a short run; ``two``: a run that also holds ``source``'s checkpoint as
    the frozen policy ``start``; ``one``: the same run without it."""
    tmp = tmp_path_factory.mktemp("frozen")
    source = tmp / "source"
    proc = run_cli(train_cmd(source, "TrainerConfig.num_env_steps=256", *FEW_EPISODES))
    assert proc.returncode == 0, proc.stderr[-2000:]
    roots = {"two": tmp / "two", "one": tmp / "one"}
    frozen = _frozen("start", source / "checkpoints" / "ckpt-1.pt")
    cmds = {
        "two": train_cmd(roots["two"], *BUDGET, *FEW_EPISODES, frozen),
        "one": train_cmd(roots["one"], *BUDGET, *FEW_EPISODES),
    }
    for name, proc in run_many(cmds, max_workers=2).items():
        assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"
    return {"source": source, **roots}


def test_the_frozen_policy_has_its_own_checkpoint_entry(runs) -> None:
    source = _checkpoint(runs["source"], 1)["algorithm"]["module"]
    saved = _checkpoint(runs["two"], 2)
    assert set(saved["policies"]) == {"start"}
    frozen = saved["policies"]["start"]
    assert frozen.keys() == source.keys()
    for name, value in source.items():
        assert torch.equal(frozen[name], value), name  # never trained
    assert "policies" not in _checkpoint(runs["one"], 2)


def test_holding_a_frozen_policy_changes_nothing_of_the_trained_one(runs) -> None:
    trained = _checkpoint(runs["two"], 2)["algorithm"]["module"]
    alone = _checkpoint(runs["one"], 2)["algorithm"]["module"]
    for name, value in alone.items():
        assert torch.equal(trained[name], value), name


def test_each_policy_has_its_own_evaluation_summaries(runs) -> None:
    lines = (runs["two"] / "progress.jsonl").read_text().splitlines()
    evals = [r for r in map(json.loads, lines) if "eval/average_return" in r]
    assert evals and all("eval/start/average_return" in r for r in evals)
    assert all("eval/start/average_episode_length" in r for r in evals)
    records = [json.loads(line) for line in (runs["two"] / "evaluations.jsonl").open()]
    assert all(len(r["policies"]["start"]["returns"]) == 2 for r in records)
    events = list((runs["two"] / "eval").iterdir())
    assert events  # TensorBoard's eval/start/... scalars are written with eval/...


def test_a_resumed_run_takes_the_frozen_policy_from_its_own_checkpoint(runs, tmp_path) -> None:
    # The source may be gone: the run's checkpoint holds what it needs.
    moved = tmp_path / "moved.pt"
    (runs["source"] / "checkpoints" / "ckpt-1.pt").rename(moved)
    try:
        frozen = _frozen("start", runs["source"] / "checkpoints" / "ckpt-1.pt")
        proc = run_cli(
            train_cmd(
                runs["two"],
                "TrainerConfig.num_env_steps=768",
                "TrainerConfig.eval_interval=2",
                *FEW_EPISODES,
                frozen,
            )
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        saved = _checkpoint(runs["two"], 3)
        first = _checkpoint(runs["two"], 2)["policies"]["start"]
        for name, value in first.items():
            assert torch.equal(saved["policies"]["start"][name], value), name
    finally:
        moved.rename(runs["source"] / "checkpoints" / "ckpt-1.pt")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("/nonexistent/ckpt-9.pt", r"frozen_policies\['start'\]: Checkpoint file .* not found"),
        ("WRONG_NETWORK", r"frozen_policies\['start'\]: Checkpoint .* does not fit"),
    ],
)
def test_a_bad_frozen_policy_is_one_line_and_writes_nothing(runs, tmp_path, source, expected):
    params = [*BUDGET, *FEW_EPISODES]
    if source == "WRONG_NETWORK":
        source = str(runs["source"])
        params.append("ActorDistributionNetwork.fc_layer_params=(8,)")
    root = tmp_path / "bad"
    proc = run_cli(train_cmd(root, *params, _frozen("start", source)))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.search(expected, lines[0]), lines[0]
    assert not (root / "checkpoints").exists() or not list((root / "checkpoints").iterdir())


@pytest.mark.parametrize("name", ["policy", "a/b", ""])
def test_a_frozen_policy_needs_a_name_of_its_own(tmp_path, name) -> None:
    proc = run_cli(train_cmd(tmp_path / "run", *BUDGET, _frozen(name, tmp_path)))
    assert proc.returncode == 2
    first, *rest = proc.stderr.strip().splitlines()
    assert "invalid configuration: TrainerConfig.frozen_policies" in first, proc.stderr
    assert "Traceback" not in proc.stderr and all("conf_param" in line for line in rest)
