"""Bad data from environments and non-finite state: caught where they enter, named in
one line, and never at the cost of a good checkpoint (issue 17).

The environments misbehave through ``tests/alf_test_bad_envs.py``, switched on by
environment variables, so a good run can be resumed with the same config on a broken
environment.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers_cli import (
    REPO,
    assert_clean_user_error,
    checkpoint_steps,
    play_cmd,
    read_progress,
    run_cli,
    snapshot,
    train_cmd,
    train_records,
)

from alf.environments import create_environment
from alf.environments.data_check import EnvironmentDataError
from alf.run_dir.checkpoints import (
    Checkpointer,
    CheckpointError,
    NonFiniteStateError,
    non_finite_entry,
)

TRAIN, PLAY = "alf.bin.train", "alf.bin.play"
TESTS = Path(__file__).resolve().parent
ENV = "alf_test_bad_envs:BadCartPole-v0"
# PPO on the bad CartPole with an observation normaliser (whose statistics a NaN
# would poison), 4 environments x 16 steps per iteration, a checkpoint every 2.
RUN_PARAMS = (
    f'create_environment.env_name="{ENV}"',
    "create_environment.num_parallel_environments=4",
    "TrainerConfig.unroll_length=16",
    "TrainerConfig.data_transformer_ctor=[@ObservationNormalizer]",
    "TrainerConfig.summary_interval=1",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
    "TrainerConfig.checkpoint_interval=2",
    "TrainerConfig.num_checkpoints=2",
    "TrainerConfig.progress_interval_s=0",
)
GOOD_STEPS = 6 * 64


@pytest.fixture(autouse=True)
def _bad_envs_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    for name in ("ALF_TEST_BAD_AT", "ALF_TEST_BAD_KIND", "ALF_TEST_BAD_SEED"):
        monkeypatch.delenv(name, raising=False)


def _train(root: Path, *params: str) -> object:
    return run_cli(train_cmd(root, *RUN_PARAMS, *params), pythonpath=TESTS)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run on the healthy environment (copy it before changing it)."""
    root = tmp_path_factory.mktemp("good") / "run"
    result = run_cli(
        train_cmd(root, *RUN_PARAMS, f"TrainerConfig.num_env_steps={GOOD_STEPS}"),
        pythonpath=TESTS,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def _kept(root: Path) -> dict[str, str]:
    """What must survive a failed command byte for byte: checkpoints and progress."""
    return {
        path: digest
        for path, digest in snapshot(root).items()
        if path.startswith("checkpoints/") or path == "progress.jsonl"
    }


# ------------------------------------------------------------------ in-process
def _steps(env, n: int) -> list:  # noqa: ANN001
    out = [env.reset()]
    for _ in range(n):
        out.append(env.step(torch.zeros(env.batch_size, dtype=torch.int64)))
    return out


@pytest.mark.parametrize(
    ("kind", "named"),
    [("nan_obs", "non-finite observation (nan) at step 3"), ("inf_reward", "reward (inf)")],
)
def test_non_finite_data_stops_with_env_index_step_and_key(monkeypatch, kind, named):
    monkeypatch.setenv("ALF_TEST_BAD_AT", "3")
    monkeypatch.setenv("ALF_TEST_BAD_KIND", kind)
    env = create_environment(ENV, 2, seed=0)
    try:
        with pytest.raises(EnvironmentDataError) as err:
            _steps(env, 5)
    finally:
        env.close()
    message = str(err.value)
    assert "\n" not in message
    assert f"environment 1 of '{ENV}'" in message and named in message


def test_observation_of_the_wrong_shape_names_env_and_shapes(monkeypatch):
    monkeypatch.setenv("ALF_TEST_BAD_AT", "2")
    monkeypatch.setenv("ALF_TEST_BAD_KIND", "shape")
    env = create_environment(ENV, 2, seed=0)
    try:
        with pytest.raises(EnvironmentDataError) as err:
            _steps(env, 4)
    finally:
        env.close()
    assert str(err.value) == (
        f"environment 1 of '{ENV}' at step 2 of its episode: observation has shape (5,), "
        "expected (4,) by its observation space"
    )


def test_drop_episode_ends_the_episode_at_its_last_finite_step(monkeypatch):
    monkeypatch.setenv("ALF_TEST_BAD_AT", "3")
    env = create_environment(ENV, 2, seed=0, drop_nonfinite=True)
    try:
        steps = _steps(env, 6)
    finally:
        env.close()
    for ts in steps:
        assert torch.isfinite(ts.observation).all() and torch.isfinite(ts.reward).all()
    types = [int(ts.step_type[1]) for ts in steps]
    assert types[:5] == [0, 1, 1, 2, 0]  # FIRST MID MID LAST(dropped at step 3) FIRST
    assert torch.equal(steps[3].observation[1], steps[2].observation[1])
    assert float(steps[3].reward[1]) == 0.0 and float(steps[3].discount[1]) == 1.0
    assert [int(ts.step_type[0]) for ts in steps] == [0, 1, 1, 1, 1, 1, 1]
    assert env.num_dropped_episodes == 1


def test_subprocess_workers_name_the_run_wide_index_and_count_drops(monkeypatch):
    monkeypatch.setenv("ALF_TEST_BAD_AT", "2")
    monkeypatch.setenv("ALF_TEST_BAD_SEED", "3")
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    env = create_environment(ENV, 4, seed=0, vectorization_mode="subprocess", num_workers=2)
    try:
        with pytest.raises(EnvironmentDataError, match=f"^environment 3 of '{ENV}'"):
            _steps(env, 4)
    finally:
        env.close()
    env = create_environment(
        ENV, 4, seed=0, vectorization_mode="subprocess", num_workers=2, drop_nonfinite=True
    )
    try:
        _steps(env, 4)
        assert env.num_dropped_episodes == 1
    finally:
        env.close()


def test_checkpointer_refuses_non_finite_state_and_keeps_the_good_ones(tmp_path):
    checkpointer = Checkpointer(directory=str(tmp_path), num_to_keep=1)
    good = {"iteration": 1, "env_steps": 1, "algorithm": {"module": {"w": torch.ones(3)}}}
    checkpointer.save(1, good)
    before = (tmp_path / "ckpt-1.pt").read_bytes()
    bad = {"iteration": 2, "env_steps": 2, "algorithm": {"module": {"w": torch.ones(3)}}}
    bad["algorithm"]["optimizer"] = {"state": {0: {"exp_avg": torch.tensor([float("nan")])}}}
    with pytest.raises(NonFiniteStateError, match="algorithm/optimizer/state/0/exp_avg"):
        checkpointer.save(2, bad)
    assert checkpointer.steps() == [1] and (tmp_path / "ckpt-1.pt").read_bytes() == before
    torch.save(bad, tmp_path / "ckpt-3.pt")
    with pytest.raises(CheckpointError, match="ckpt-3.pt' holds NaN or infinite values"):
        checkpointer.load()
    assert non_finite_entry({"a": [torch.ones(2), torch.arange(3)]}) is None


# ------------------------------------------------------------- command line
def test_nan_env_resumed_on_a_good_run_stops_and_keeps_its_checkpoints(
    good_run, tmp_path, monkeypatch
):
    root = shutil.copytree(good_run, tmp_path / "run")
    kept = _kept(root)
    monkeypatch.setenv("ALF_TEST_BAD_AT", "5")
    monkeypatch.setenv("ALF_TEST_BAD_SEED", "all")  # (a resumed run reseeds its envs)
    result = _train(root, f"TrainerConfig.num_env_steps={2 * GOOD_STEPS}")
    assert result.returncode == 3, result.stderr[-3000:]
    assert_clean_user_error(result, TRAIN, f"environment 0 of '{ENV}'", "non-finite observation")
    assert _kept(root) == kept
    monkeypatch.delenv("ALF_TEST_BAD_AT")
    played = run_cli(
        play_cmd(root, "--num_episodes=2", "--trust_module=alf_test_bad_envs"), pythonpath=TESTS
    )
    assert played.returncode == 0, played.stderr[-3000:]
    assert float(played.stdout.strip().splitlines()[-1].split(": ")[1]) > 0


def test_shape_change_mid_episode_is_one_line_through_train(tmp_path, monkeypatch):
    monkeypatch.setenv("ALF_TEST_BAD_AT", "4")
    monkeypatch.setenv("ALF_TEST_BAD_KIND", "shape")
    result = _train(tmp_path / "run", "TrainerConfig.num_env_steps=512")
    assert result.returncode == 3, result.stderr[-3000:]
    assert_clean_user_error(result, TRAIN, "environment 1", "shape (5,), expected (4,)")


def test_drop_episode_trains_on_and_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("ALF_TEST_BAD_AT", "5")
    root = tmp_path / "run"
    result = _train(
        root, "TrainerConfig.num_env_steps=256", "TrainerConfig.nonfinite_data='drop_episode'"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = train_records(read_progress(root))
    assert records and records[-1]["train/dropped_nonfinite_episodes"] >= 1
    state = torch.load(
        root / "checkpoints" / f"ckpt-{checkpoint_steps(root)[-1]}.pt", weights_only=True
    )
    assert non_finite_entry(state["algorithm"]) is None


def test_resume_and_play_refuse_a_non_finite_checkpoint(good_run, tmp_path):
    root = shutil.copytree(good_run, tmp_path / "run")
    newest = root / "checkpoints" / f"ckpt-{checkpoint_steps(root)[-1]}.pt"
    state = torch.load(newest, weights_only=True)
    name = next(k for k, v in state["algorithm"]["module"].items() if v.is_floating_point())
    state["algorithm"]["module"][name].fill_(float("nan"))
    torch.save(state, newest)
    files = snapshot(root)
    for cmd, prog in (
        (train_cmd(root, *RUN_PARAMS, f"TrainerConfig.num_env_steps={2 * GOOD_STEPS}"), TRAIN),
        (play_cmd(root, "--num_episodes=1", "--trust_module=alf_test_bad_envs"), PLAY),
    ):
        result = run_cli(cmd, pythonpath=TESTS, cwd=REPO)
        assert result.returncode == 2, result.stderr[-3000:]
        assert_clean_user_error(result, prog, newest.name, "NaN or infinite", name)
        assert snapshot(root) == files
