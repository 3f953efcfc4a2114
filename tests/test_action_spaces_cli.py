"""Action spaces and masks through the real command line: the mistakes a user can make
(a mask of the wrong shape, a Dict action given to DQN, an environment whose mask
allows nothing) each end the run with one clear line, and an asynchronous APPO run
(actor processes, shared-memory fragments, checkpoints, play) works with a hybrid
``Dict`` action.

The commands are independent, so the module fixture runs them concurrently."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers_cli import (
    CONF,
    assert_clean_user_error,
    checkpoint_steps,
    play_cmd,
    played_average_return,
    run_cli,
    train_cmd,
)

EXAMPLES = CONF.parent
TESTS = Path(__file__).resolve().parent
TRAIN = "alf.bin.train"
BAD_MASK_ENV = 'create_environment.env_name="alf_test_bad_envs:BadMaskedChoice-v0"'
TINY = (
    "TrainerConfig.num_env_steps=256",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_episodes=1",
    "TrainerConfig.num_eval_environments=1",
    "TrainerConfig.progress_interval_s=0",
)
ASYNC = (
    "TrainerConfig.num_env_steps=512",
    "create_environment.num_parallel_environments=4",
    "TrainerConfig.unroll_length=16",
    "AsyncUnroller.fragments_per_iteration=1",
    "AppoAlgorithm.mini_batch_size=32",
    "AppoAlgorithm.num_epochs=2",
    "TrainerConfig.eval_interval=0",
    "TrainerConfig.num_eval_episodes=2",
    "TrainerConfig.num_eval_environments=2",
    "TrainerConfig.checkpoint_interval=4",
    "TrainerConfig.progress_interval_s=0",
)


def _commands(tmp: Path) -> dict[str, list[str]]:
    masked = EXAMPLES / "ppo_masked.gin"
    return {
        "mask_shape": train_cmd(
            tmp / "mask_shape",
            BAD_MASK_ENV,
            'create_environment.env_kwargs={"mask_size": 4}',
            *TINY,
            conf=masked,
        ),
        "all_false": train_cmd(
            tmp / "all_false",
            BAD_MASK_ENV,
            'create_environment.env_kwargs={"all_false_at": 3}',
            *TINY,
            conf=masked,
        ),
        "dqn_dict": train_cmd(
            tmp / "dqn_dict",
            'create_environment.env_name="alf/HybridMatch-v0"',
            *TINY,
            conf=EXAMPLES / "dqn_cart_pole.gin",
        ),
        "appo_hybrid": train_cmd(
            tmp / "appo_hybrid",
            'create_environment.env_name="alf/HybridMatch-v0"',
            *ASYNC,
            conf=EXAMPLES / "appo_cart_pole.gin",
        ),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:  # noqa: ANN001
    from concurrent.futures import ThreadPoolExecutor

    tmp = tmp_path_factory.mktemp("action_spaces_cli")
    cmds = _commands(tmp)
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {
            name: pool.submit(run_cli, cmd, 300, pythonpath=TESTS) for name, cmd in cmds.items()
        }
        out = {name: future.result() for name, future in futures.items()}
    out["tmp"] = tmp  # type: ignore[assignment]
    return out


def test_mask_of_the_wrong_shape(results):
    result = results["mask_shape"]
    assert result.returncode == 2
    assert_clean_user_error(
        result, TRAIN, "observation['action_mask']", "shape (4,)", "Discrete(5) needs shape (5,)"
    )


def test_all_false_mask_names_the_environment_and_step(results):
    result = results["all_false"]
    assert result.returncode == 3
    assert_clean_user_error(
        result, TRAIN, "environment 0 of", "BadMaskedChoice-v0", "all-false action mask", "step 2"
    )


def test_dict_action_given_to_dqn(results):
    result = results["dqn_dict"]
    assert result.returncode == 2
    assert_clean_user_error(
        result, TRAIN, "DqnAlgorithm", "Dict(amount: Box(shape=(1,)), choice: Discrete(3, start=1))"
    )


def test_async_appo_with_a_hybrid_action_trains_checkpoints_and_plays(results):
    # A Dict of a Discrete(3, start=1) and a Box: the environment raises on a choice
    # without its start. (A MultiDiscrete action goes through the same specs.)
    result = results["appo_hybrid"]
    assert result.returncode == 0, result.stderr[-3000:]
    root = results["tmp"] / "appo_hybrid"
    assert checkpoint_steps(root), "no checkpoint written"
    played = run_cli(play_cmd(root, "--num_episodes=2"), 120)
    assert played_average_return(played) > 0
