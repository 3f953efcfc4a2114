"""Faults of a synchronous environment, through the commands a user types: one that
raises, returns the old 4-tuple or a reward that is not one number, hangs (in ``step``
or ``reset``), or never ends an episode; and the smaller start-time checks (too many
environments, a bad ``--checkpoint_step``), and the final checkpoint of a healthy learner
whose APPO actor is killed.

The environment is ``alf_test_bad_envs:FaultyEnv-v0`` (``tests/alf_test_bad_envs.py``),
its fault chosen through ``create_environment.env_kwargs``; with
``ppo_cart_pole.gin``'s 8 environments x 32 steps, a fault at the 100th step of an
environment stops the run in its 4th iteration (3 completed).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers_cli import (
    REPO,
    assert_clean_user_error,
    checkpoint_steps,
    error_lines,
    play_cmd,
    read_progress,
    run_cli,
    run_many,
    snapshot,
    train_cmd,
)

TESTS = REPO / "tests"
EXIT_TRAINING_ERROR = 3
EXIT_USER_ERROR = 2
ENV_ID = "alf_test_bad_envs:FaultyEnv-v0"
ENV = f'create_environment.env_name="{ENV_ID}"'
BASE = (
    ENV,
    "TrainerConfig.num_iterations=6",
    "TrainerConfig.checkpoint_interval=2",
    "TrainerConfig.evaluate=False",
    "TrainerConfig.progress_interval_s=0",
    "PPOAlgorithm.num_epochs=1",
)


@pytest.fixture(autouse=True)
def _bad_envs_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands (``run_many`` too) find ``alf_test_bad_envs`` on their path."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.syspath_prepend(str(TESTS))


def _faulty(**kwargs: object) -> str:
    return "create_environment.env_kwargs=" + json.dumps(kwargs)


def _train(root: Path, *params: str, conf: Path | str | None = None) -> object:
    cmd = train_cmd(root, *params) if conf is None else train_cmd(root, *params, conf=conf)
    return run_cli(cmd, pythonpath=TESTS)


def _status(root: Path) -> dict:
    return json.loads((root / "status.json").read_text())


def _one_line(result: object) -> str:
    """The run failed after training started: exit 3, one error line, no traceback;
    ``status.json`` records the same line. Returns the message."""
    assert result.returncode == EXIT_TRAINING_ERROR, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = error_lines(result.stderr, "alf.bin.train")
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0].removeprefix("alf.bin.train: error: ")


def _user_line(marker: str) -> int:
    """The line of ``tests/alf_test_bad_envs.py`` holding ``marker``."""
    text = (TESTS / "alf_test_bad_envs.py").read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if marker in line)


def test_env_raising_in_step_names_env_call_and_user_line_and_checkpoints(tmp_path):
    root = tmp_path / "run"
    good = _train(root, *BASE[:-1], "TrainerConfig.num_iterations=2")
    assert good.returncode == 0, good.stderr[-3000:]
    before = snapshot(root / "checkpoints")
    # Resumed on an environment that raises at its 100th step (4th iteration of the session).
    result = _train(
        root, *BASE, "TrainerConfig.allow_config_change=True", _faulty(fault="raise_step", at=100)
    )
    message = _one_line(result)
    assert message.startswith(f"environment 0 of '{ENV_ID}' raised in step() at step "), message
    line = _user_line("_ = self.t / 0")
    assert message.endswith(
        f"ZeroDivisionError: division by zero (tests/alf_test_bad_envs.py:{line})"
    ), message
    status = _status(root)
    assert status["state"] == "failed" and status["error"] == message, status
    # The healthy learner's final checkpoint (iteration 2 + 3), the earlier one untouched.
    assert checkpoint_steps(root) == [2, 4, 5]
    assert snapshot(root / "checkpoints")["ckpt-2.pt"] == before["ckpt-2.pt"]


BAD_RETURNS = {
    "raise_reset": ("environment 1 of", "raised in reset()", "ZeroDivisionError"),
    "legacy_step": ("environment 1 of", "4 values", "suite_gym.load.legacy_api=True"),
    "vector_reward": ("environment 1 of", "reward of shape (2,)", "must be a scalar"),
    "none_reward": ("environment 1 of", "reward None (not a number)", "must be a scalar"),
}


def test_env_faults_are_one_line_naming_the_env_and_the_fix(tmp_path):
    cmds = {
        fault: train_cmd(tmp_path / fault, *BASE, _faulty(fault=fault, at=100, only_seed=1))
        for fault in BAD_RETURNS
    }
    results = run_many(cmds, max_workers=2)
    for fault, words in BAD_RETURNS.items():
        message = _one_line(results[fault])
        assert ENV_ID in message, message
        for word in words:
            assert word in message, (fault, message)
        status = _status(tmp_path / fault)
        assert status["state"] == "failed" and status["error"] == message, status
    assert checkpoint_steps(tmp_path / "raise_reset") == []  # nothing trained
    assert checkpoint_steps(tmp_path / "none_reward") == [2, 3]


@pytest.mark.parametrize("fault", ["spin_step", "hang_step"], ids=["python", "c_call"])
def test_hanging_env_call_stops_the_run_with_one_line(tmp_path, fault):
    """A call hung in Python code is interrupted; one hung in C (a sleep) cannot be: the
    watchdog ends the process itself, the same way (exit 3, status, checkpoint)."""
    root = tmp_path / "run"
    start = time.monotonic()
    result = _train(
        root,
        *BASE,
        "TrainerConfig.env_timeout_s=2",
        _faulty(fault=fault, at=100, only_seed=1),
    )
    assert time.monotonic() - start < 90
    message = _one_line(result)
    assert message.startswith(f"step() of environment 1 of '{ENV_ID}' (environments 0..7)")
    assert "TrainerConfig.env_timeout_s=2" in message and "hangs" in message, message
    status = _status(root)
    assert status["state"] == "failed" and status["error"] == message, status
    assert checkpoint_steps(root) == [2, 3]


def test_hanging_reset_stops_the_run_with_one_line(tmp_path):
    """A synchronous ``reset`` that hangs (in C: a sleep) is stopped by
    ``TrainerConfig.env_timeout_s`` like a hung ``step``; resumed on such an environment,
    the run's checkpoint stays as it was (nothing was trained since)."""
    root = tmp_path / "run"
    good = _train(root, *BASE[:-1], "TrainerConfig.num_iterations=2")
    assert good.returncode == 0, good.stderr[-3000:]
    before = snapshot(root / "checkpoints")
    start = time.monotonic()
    result = _train(
        root,
        *BASE,
        "TrainerConfig.allow_config_change=True",
        "TrainerConfig.env_timeout_s=2",
        _faulty(fault="hang_reset"),
    )
    assert time.monotonic() - start < 90
    message = _one_line(result)
    assert message.startswith(f"reset() of environment 0 of '{ENV_ID}' (environments 0..7)")
    assert "TrainerConfig.env_timeout_s=2" in message and "hangs" in message, message
    status = _status(root)
    assert status["state"] == "failed" and status["error"] == message, status
    assert status["exit_code"] == EXIT_TRAINING_ERROR
    assert snapshot(root / "checkpoints") == before


@pytest.fixture(scope="module")
def never_ending_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("never_ends") / "run"
    result = _train(
        root,
        ENV,
        _faulty(fault="never_ends"),
        "TrainerConfig.num_iterations=2",
        "TrainerConfig.num_eval_episodes=3",
        "TrainerConfig.num_eval_environments=2",
        "TrainerConfig.max_eval_episode_steps=50",
        "PPOAlgorithm.num_epochs=1",
    )
    return root, result


def test_evaluation_cuts_a_never_ending_episode_and_says_so(never_ending_run):
    root, result = never_ending_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert "3 of 3 episodes played did not end within 50 steps and were cut" in result.stderr
    assert "TrainerConfig.max_eval_episode_steps" in result.stderr
    (record,) = [r for r in read_progress(root) if "eval/average_return" in r]
    assert record["eval/cut_episodes"] == 3
    assert record["eval/average_episode_length"] == 50


def test_play_cuts_a_never_ending_episode_and_says_so(never_ending_run):
    root, _ = never_ending_run
    before = snapshot(root)
    result = run_cli(
        play_cmd(
            root, "--num_episodes=2", "--max_episode_steps=30", "--trust_module=alf_test_bad_envs"
        ),
        pythonpath=TESTS,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("length 30 (cut: not ended within 30 steps") == 2, result.stdout
    assert result.stdout.strip().splitlines()[-1] == "average_return: 30.0"
    assert "--max_episode_steps" in result.stderr
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        ("--checkpoint_step=abc", ("abc",)),
        ("--checkpoint_step=-1", ("-1",)),
        ("--max_episode_steps=0", ("--max_episode_steps", "integer")),
    ],
)
def test_play_refuses_a_bad_count_in_one_line(never_ending_run, flag, words):
    root, _ = never_ending_run
    result = run_cli(play_cmd(root, flag, "--trust_module=alf_test_bad_envs"), pythonpath=TESTS)
    assert result.returncode == EXIT_USER_ERROR, result.stderr[-3000:]
    assert_clean_user_error(result, "alf.bin.play", *words)


def test_evaluation_cap_defaults_to_the_env_time_limit_else_a_bound():
    import alf_test_bad_envs  # noqa: F401 - registers FaultyEnv-v0

    from alf.environments import create_environment
    from alf.trainers.evaluator import DEFAULT_MAX_EVAL_EPISODE_STEPS, Evaluator

    for env_name, cap in (("CartPole-v1", 500), ("FaultyEnv-v0", DEFAULT_MAX_EVAL_EPISODE_STEPS)):
        env = create_environment(env_name, 1)
        try:
            assert Evaluator(env=env, policy=None, num_episodes=1).max_episode_steps == cap
        finally:
            env.close()
    assert DEFAULT_MAX_EVAL_EPISODE_STEPS == 100_000


def test_too_many_environments_are_refused_before_building(tmp_path):
    root = tmp_path / "run"
    start = time.monotonic()
    result = run_cli(train_cmd(root, "create_environment.num_parallel_environments=1000000"))
    assert time.monotonic() - start < 60
    assert result.returncode == EXIT_USER_ERROR
    assert_clean_user_error(
        result, "alf.bin.train", "num_parallel_environments=1000000", "max_parallel_environments"
    )
    assert not root.exists()


def test_killed_appo_actor_leaves_the_learners_final_checkpoint(tmp_path):
    root = tmp_path / "run"
    result = _train(
        root,
        ENV,
        _faulty(fault="kill_self", at=100),
        "create_environment.num_parallel_environments=4",
        "AsyncUnroller.num_actors=2",
        "TrainerConfig.unroll_length=16",
        "TrainerConfig.num_iterations=1000",
        "TrainerConfig.checkpoint_interval=1000",
        "TrainerConfig.evaluate=False",
        "AppoAlgorithm.num_epochs=1",
        conf=REPO / "alf" / "examples" / "appo_cart_pole.gin",
    )
    message = _one_line(result)
    assert message.startswith("Actor ") and "exited unexpectedly" in message, message
    steps = checkpoint_steps(root)
    assert len(steps) == 1 and steps[0] > 0, steps


def test_a_nan_reward_of_another_backend_mentions_none():
    """Backends without the per-environment guard see a None reward as nan."""
    import numpy as np

    from alf.environments.data_check import DataChecker, EnvironmentDataError
    from alf.tensor_specs import TensorSpec

    checker = DataChecker(env_name="x", observation_spec=TensorSpec((2,)), batch_size=1)
    with pytest.raises(EnvironmentDataError, match="reward of None, not a number"):
        checker.check(np.zeros((1, 2), np.float32), np.array([np.nan], np.float32))
