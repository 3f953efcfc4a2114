"""The tutorial docs/writing_an_algorithm.md: its code and config, extracted from the page.

The Python block is written out as the module ``reinforce`` and the gin block as
``reinforce_cart_pole.gin`` (whose first statement is ``import reinforce``), exactly as a
reader would save them, so the page and these tests cannot drift apart.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType

import gin
import pytest
import torch
from helpers_cli import (
    eval_records,
    play_cmd,
    played_average_return,
    read_progress,
    run_cli,
    train_cmd,
)

from alf import config as alf_config
from alf.algorithms.policy import Policy
from alf.data_structures import StepType
from alf.environments import create_environment
from alf.trainers import RLTrainer, TrainerConfig
from alf.unrollers.sync_unroller import SyncUnroller
from alf.utils.value_ops import generalized_advantage_estimation, valid_mask

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing_an_algorithm.md"
MODULE_NAME = "reinforce"
FINAL_RETURN_THRESHOLD = 195.0


def fenced_blocks(language: str) -> list[str]:
    """The bodies of the page's ```<language> fenced blocks, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(), flags=re.M | re.S)


def write_tutorial_files(directory: Path) -> tuple[Path, Path]:
    """Saves the page's module and config into ``directory``, as the tutorial says."""
    (python_block,) = fenced_blocks("python")
    (gin_block,) = fenced_blocks("gin")
    module_path = directory / f"{MODULE_NAME}.py"
    conf_path = directory / "reinforce_cart_pole.gin"
    module_path.write_text(python_block)
    conf_path.write_text(gin_block)
    return module_path, conf_path


@pytest.fixture(scope="module")
def tutorial_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tutorial")
    write_tutorial_files(directory)
    return directory


@pytest.fixture(scope="module")
def reinforce(tutorial_dir: Path) -> ModuleType:
    """The tutorial's module, imported once per process (gin refuses to register a
    second, different ``ReinforceAlgorithm`` under the same name)."""
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    sys.path.insert(0, str(tutorial_dir))
    try:
        return importlib.import_module(MODULE_NAME)
    finally:
        sys.path.remove(str(tutorial_dir))


@pytest.fixture
def clean_gin():
    yield
    gin.clear_config()


def make_algorithm(reinforce: ModuleType, env, **kwargs):
    return reinforce.ReinforceAlgorithm(
        observation_spec=env.observation_spec(), action_spec=env.action_spec(), **kwargs
    )


def test_page_has_one_python_and_one_gin_block():
    assert len(fenced_blocks("python")) == 1
    gin_blocks = fenced_blocks("gin")
    assert len(gin_blocks) == 1
    assert f"import {MODULE_NAME}" in gin_blocks[0]
    assert "TrainerConfig.algorithm_ctor = @ReinforceAlgorithm" in gin_blocks[0]


def test_module_imports_and_registers(reinforce):
    from alf.algorithms import OnPolicyAlgorithm

    assert issubclass(reinforce.ReinforceAlgorithm, OnPolicyAlgorithm)
    assert gin.config._REGISTRY.get_match("ReinforceAlgorithm") is not None


def test_returns_equal_gae_lambda_one(reinforce):
    torch.manual_seed(0)
    # A short time limit gives truncated episodes (discount 1 at LAST) next to
    # terminated ones (discount 0 at LAST).
    env = create_environment("CartPole-v1", 4, seed=0, max_episode_steps=15)
    algorithm = make_algorithm(reinforce, env, gamma=0.9)
    exp = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=60).unroll()
    env.close()
    last = exp.step_type == StepType.LAST
    assert bool((last & (exp.discount == 0)).any()), "no terminated episode in the unroll"
    assert bool((last & (exp.discount == 1)).any()), "no truncated episode in the unroll"

    processed = algorithm.preprocess_experience(exp)
    info = processed.rollout_info
    assert processed.step_type.shape == (60, 4)
    assert info.returns.shape == info.advantage.shape == info.value.shape == (60, 4)
    torch.testing.assert_close(processed.observation, exp.observation[:-1])

    advantages, returns = generalized_advantage_estimation(
        rewards=exp.reward,
        values=exp.rollout_info.value,
        step_types=exp.step_type,
        discounts=exp.discount,
        gamma=0.9,
        td_lambda=1.0,
    )
    valid = valid_mask(exp.step_type).bool()
    torch.testing.assert_close(info.returns[valid], returns[valid])
    torch.testing.assert_close(info.advantage[valid], advantages[valid])


def test_one_train_from_unroll(reinforce):
    torch.manual_seed(0)
    env = create_environment("CartPole-v1", 4, seed=0)
    algorithm = make_algorithm(reinforce, env, learning_rate=1e-2)
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=8)
    before = [p.detach().clone() for p in algorithm.parameters()]
    stats = algorithm.train_from_unroll(unroller.unroll())
    for name in ("loss", "pg_loss", "value_loss", "entropy", "grad_norm"):
        assert name in stats and torch.isfinite(torch.as_tensor(stats[name])), (name, stats)
    assert stats.get("skipped", 0.0) == 0.0
    assert all(not torch.equal(b, a) for b, a in zip(before, algorithm.parameters(), strict=True))

    with torch.no_grad():
        action = algorithm.predict_step(env.reset(), ()).output
    env.close()
    assert action.shape == (4,) and bool(((action == 0) | (action == 1)).all())


def test_gin_config_trains_two_iterations(reinforce, tutorial_dir, tmp_path, clean_gin):
    threads = torch.get_num_threads()
    alf_config.load_config(
        str(tutorial_dir / "reinforce_cart_pole.gin"),
        [
            "TrainerConfig.num_env_steps = 0",
            "TrainerConfig.num_iterations = 2",
            "TrainerConfig.eval_interval = 0",
            "TrainerConfig.num_eval_episodes = 2",
            "TrainerConfig.num_eval_environments = 2",
        ],
    )
    config = TrainerConfig()
    assert config.algorithm_ctor is reinforce.ReinforceAlgorithm
    trainer = RLTrainer(config=config, root_dir=str(tmp_path / "run"))
    try:
        result = trainer.train()
    finally:
        trainer.close()
        torch.set_num_threads(threads)
    assert isinstance(trainer.algorithm, reinforce.ReinforceAlgorithm)
    assert result["iteration"] == 2 and "eval_average_return" in result
    saved = (tmp_path / "run" / "config.gin").read_text()
    assert saved.startswith(f"import {MODULE_NAME}\n")  # so play and resume re-import it


@pytest.mark.slow
def test_cli_trains_cart_pole_to_195(tmp_path):
    """The tutorial's commands: the files saved in one directory, found through PYTHONPATH
    by the real ``python -m alf.bin.train``, then ``python -m alf.bin.play``."""
    tutorial = tmp_path / "my_algorithms"
    tutorial.mkdir()
    _, conf_path = write_tutorial_files(tutorial)
    root_dir = tmp_path / "run"
    proc = run_cli(
        train_cmd(root_dir, conf=conf_path), timeout=600, cwd=tmp_path, pythonpath=tutorial
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = eval_records(read_progress(root_dir))
    returns = [r["eval/average_return"] for r in evals]
    print(f"evaluation returns: {returns}; final at {evals[-1]['env_steps']} env steps")
    assert evals[-1]["env_steps"] >= 200_000, evals[-1]
    assert returns[-1] >= FINAL_RETURN_THRESHOLD, returns

    # play re-imports the module through the `import reinforce` line of config.gin.
    proc = run_cli(
        play_cmd(root_dir, "--num_episodes=10", "--trust_module=reinforce"),
        timeout=300,
        cwd=tmp_path,
        pythonpath=tutorial,
    )
    played = played_average_return(proc)
    print(f"average_return: {played}")
    assert played >= FINAL_RETURN_THRESHOLD
