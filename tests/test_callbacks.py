"""``TrainerConfig.callbacks``: user code after every iteration and evaluation, which
can stop the run (it checkpoints and ends as ``stopped`` with the reason)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers_cli import run_cli, train_cmd

from alf.config import ConfigValueError
from alf.trainers.callbacks import StopOnPlateau, TrainingContext

TRAIN = "alf.bin.train"


def _context(returns: tuple[float, ...]) -> TrainingContext:
    return TrainingContext(
        root_dir="/r", iteration=1, env_steps=1, progress=0.1, elapsed_s=1.0, eval_returns=returns
    )


def test_stop_on_plateau_counts_evaluations_without_improvement() -> None:
    callback = StopOnPlateau(patience=2, min_delta=1.0)
    answers = [callback.on_evaluation(_context((r,))) for r in (10.0, 12.0, 12.5, 11.0)]
    assert answers[:3] == [None, None, None]
    assert answers[3] is not None and "12.00" in answers[3] and "last 2 evaluations" in answers[3]
    assert callback.on_iteration(_context(())) is None
    with pytest.raises(ConfigValueError, match="StopOnPlateau.patience = 0"):
        StopOnPlateau(patience=0)


def test_a_callback_stops_a_run_with_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "alf_test_callbacks.py").write_text(
        textwrap.dedent(
            """
            import json
            from alf.config import configurable
            from alf.trainers.callbacks import Callback


            @configurable
            class StopAtIteration(Callback):
                def __init__(self, *, at=3):
                    self.at = at

                def on_iteration(self, context):
                    with open(context.root_dir + "/seen.jsonl", "a") as f:
                        f.write(json.dumps([context.iteration, context.env_steps]) + "\\n")
                    if context.iteration >= self.at:
                        return f"reached iteration {context.iteration}"
                    return None
            """
        )
    )
    conf = tmp_path / "conf.gin"
    conf.write_text(
        "import alf_test_callbacks\ninclude 'ppo_cart_pole.gin'\n"
        "TrainerConfig.callbacks = [@StopAtIteration()]\nStopAtIteration.at = 3\n"
    )
    root = tmp_path / "run"
    result = run_cli(
        train_cmd(root, "TrainerConfig.num_env_steps=4096", conf=conf), pythonpath=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Stopped by a callback at iteration 3 (reached iteration 3)" in result.stdout
    seen = [json.loads(line) for line in (root / "seen.jsonl").read_text().splitlines()]
    assert seen == [[1, 256], [2, 512], [3, 768]]
    status = json.loads((root / "status.json").read_text())
    assert status["state"] == "stopped" and status["stop_reason"] == "reached iteration 3"
    assert (root / "checkpoints" / "ckpt-3.pt").is_file()


def test_stop_on_plateau_from_a_config(tmp_path: Path) -> None:
    params = (
        "TrainerConfig.callbacks=[@StopOnPlateau()]",
        "StopOnPlateau.patience=1",
        "StopOnPlateau.min_delta=1000.0",  # nothing improves that much: stop at the 2nd
        "TrainerConfig.eval_interval=2",
        "TrainerConfig.num_eval_episodes=2",
        "TrainerConfig.num_env_steps=8192",
    )
    root = tmp_path / "run"
    result = run_cli(train_cmd(root, *params))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Stopped by a callback at iteration 4 (StopOnPlateau:" in result.stdout, result.stdout
    assert json.loads((root / "status.json").read_text())["state"] == "stopped"
