"""In-process tests of the replay data of off-policy runs through :class:`RLTrainer`:
offline buffers of earlier runs (offline-only and hybrid training, spec checks) and
resuming with (and without) the saved replay buffer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_off_policy import (  # noqa: F401 (_one_thread: an autouse fixture)
    POLICY_ACTION,
    _assert_finite_stats,
    _constant_policy,
    _ddpg_params,
    _one_thread,
    _record_unrolls,
    _record_updates,
    _trainer,
)

from alf import nest
from alf.algorithms.off_policy_algorithm import valid_transitions
from alf.data_structures import StepType
from alf.run_dir.checkpoints import CheckpointError

# ------------------------------------------------------------------------------ 7
OFFLINE_ITERATIONS = 60


@pytest.fixture(scope="module")
def offline_source(tmp_path_factory) -> tuple[Path, dict]:
    """A finished DDPG run whose checkpoint holds its replay buffer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("offline") / "source"
    params = _ddpg_params(
        "ReplayBuffer.enable_checkpoint=True",
        num_iterations=OFFLINE_ITERATIONS,
        initial_collect_steps=20,
    )
    try:
        with _trainer(root, params) as trainer:
            trainer.train()
    finally:
        torch.set_num_threads(threads)
    state = torch.load(root / "checkpoints" / f"ckpt-{OFFLINE_ITERATIONS}.pt", weights_only=True)
    return root, state


def _held_observations(buffer_state: dict) -> torch.Tensor:
    """``[N, obs_dim]`` every observation held by a saved buffer."""
    obs = buffer_state["storage"]["observation"]
    held = buffer_state["positions"].clamp(max=buffer_state["max_length"])
    return torch.cat([obs[e, : int(h)] for e, h in enumerate(held)])


def _rows_in(rows: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return (rows.unsqueeze(1) == table.unsqueeze(0)).all(-1).any(-1)


def test_checkpoint_holds_replay_buffer_when_enabled(offline_source):
    _, state = offline_source
    assert "replay_buffer" in state
    saved = state["replay_buffer"]
    assert saved["positions"].tolist() == [OFFLINE_ITERATIONS + 1]
    assert ("observation", (3,), "float32") in [tuple(s) for s in saved["spec"]]


def test_offline_only_training(tmp_path, offline_source):
    source, _ = offline_source
    params = _ddpg_params(
        f'TrainerConfig.offline_buffer_dir="{source}"',
        "TrainerConfig.offline_fraction=1.0",
        "TrainerConfig.num_env_steps=0",
        num_iterations=25,
    )
    with _trainer(tmp_path / "offline", params) as trainer:
        assert trainer.offline_only
        updates = _record_updates(trainer)
        unrolls = _record_unrolls(trainer)
        result = trainer.train()
        algorithm = trainer.algorithm
        assert result["iteration"] == 25 and result["env_steps"] == 0
        assert unrolls == []
        assert algorithm.replay_buffer.total_size == 0
        assert [u["iteration"] for u in updates] == list(range(25))
        assert int(algorithm.num_updates) == 25
        _assert_finite_stats(updates)
        exp, num_online = algorithm.sample_batch()
        assert num_online == 0 and bool((exp.batch_info.env_ids == -1).all())


def test_offline_fraction_mixes_both_buffers(tmp_path, offline_source):
    source, state = offline_source
    params = _ddpg_params(
        f'TrainerConfig.offline_buffer_dir="{source}"',
        "TrainerConfig.offline_fraction=0.5",
        "TrainerConfig.random_seed=7",  # other episodes than the source run's
        num_iterations=30,
        initial_collect_steps=0,
    )
    with _trainer(tmp_path / "mixed", params) as trainer:
        updates = _record_updates(trainer)
        result = trainer.train()
        algorithm = trainer.algorithm
        assert result["env_steps"] == 30
        assert len(updates) == 30
        _assert_finite_stats(updates)
        torch.manual_seed(0)
        exp, num_online = algorithm.sample_batch()
        online_obs = _held_observations(algorithm.replay_buffer.checkpoint_state())
    assert num_online == 16
    env_ids = exp.batch_info.env_ids
    assert bool((env_ids[:16] == 0).all()) and bool((env_ids[16:] == -1).all())
    assert bool((exp.batch_info.importance_weights == 1.0).all())
    first_obs = exp.observation[0]
    offline_obs = _held_observations(state["replay_buffer"])
    assert bool(_rows_in(first_obs[:16], online_obs).all())
    assert not bool(_rows_in(first_obs[:16], offline_obs).any())
    assert bool(_rows_in(first_obs[16:], offline_obs).all())
    assert not bool(_rows_in(first_obs[16:], online_obs).any())


def test_offline_buffer_with_other_observation_spec_is_refused(tmp_path, offline_source):
    source, _ = offline_source
    params = _ddpg_params(
        'create_environment.env_name="MountainCarContinuous-v0"',
        f'TrainerConfig.offline_buffer_dir="{source}"',
        "TrainerConfig.offline_fraction=1.0",
        num_iterations=5,
    )
    with pytest.raises(CheckpointError) as info:
        with _trainer(tmp_path / "other", params):
            pass
    message = str(info.value)
    assert "observation" in message and "(3,)" in message and "(2,)" in message


def test_offline_dir_without_saved_buffer_is_refused(tmp_path):
    source = tmp_path / "no_buffer"
    with _trainer(source, _ddpg_params(num_iterations=5, initial_collect_steps=0)) as trainer:
        trainer.train()
    params = _ddpg_params(
        f'TrainerConfig.offline_buffer_dir="{source}"',
        "TrainerConfig.offline_fraction=1.0",
        num_iterations=5,
    )
    with pytest.raises(CheckpointError, match="enable_checkpoint"):
        with _trainer(tmp_path / "offline", params):
            pass


# ------------------------------------------------------------------------------ 8
RESUME_COLLECT = 200
FIRST_BUDGET = 240


def _resume_params(budget: int, enable_checkpoint: bool) -> list[str]:
    return _ddpg_params(
        f"ReplayBuffer.enable_checkpoint={enable_checkpoint}",
        f"TrainerConfig.num_env_steps={budget}",
        num_iterations=None,
        initial_collect_steps=RESUME_COLLECT,
    )


def _first_run(root: Path, enable_checkpoint: bool) -> None:
    with _trainer(root, _resume_params(FIRST_BUDGET, enable_checkpoint)) as trainer:
        updates = _record_updates(trainer)
        result = trainer.train()
    assert result["env_steps"] == FIRST_BUDGET
    assert updates and updates[0]["stored"] == RESUME_COLLECT


def test_resume_restores_the_replay_buffer(tmp_path):
    root = tmp_path / "run"
    _first_run(root, enable_checkpoint=True)
    saved = torch.load(root / "checkpoints" / f"ckpt-{FIRST_BUDGET}.pt", weights_only=True)[
        "replay_buffer"
    ]
    newest = FIRST_BUDGET  # slot of the last saved step (the reset step is slot 0)
    assert int(saved["storage"]["step_type"][0, newest]) == StepType.MID
    budget = FIRST_BUDGET + 40
    with _trainer(root, _resume_params(budget, True)) as trainer:
        assert trainer.iteration == FIRST_BUDGET and trainer.env_steps == FIRST_BUDGET
        buffer = trainer.algorithm.replay_buffer
        restored = buffer.checkpoint_state()
        assert restored["positions"].tolist() == saved["positions"].tolist() == [FIRST_BUDGET + 1]
        assert restored["storage"].keys() == saved["storage"].keys()
        for path, tensor in saved["storage"].items():
            if path == "step_type":
                # The restarted environment begins a new episode: the stored one ends
                # (is truncated) at its last saved step; every other step is as saved.
                expected = tensor.clone()
                expected[0, newest] = StepType.LAST
                assert torch.equal(restored["storage"][path], expected)
            else:
                assert torch.equal(restored["storage"][path], tensor), path
        _constant_policy(trainer, POLICY_ACTION)
        updates = _record_updates(trainer)
        unrolls = _record_unrolls(trainer)
        result = trainer.train()
        assert result["env_steps"] == budget
        assert not trainer.unroller.random_actions
        assert unrolls and not any(u["random_actions"] for u in unrolls)
        # Trains from the first resumed iteration on.
        assert [u["iteration"] for u in updates] == list(range(FIRST_BUDGET, budget))
        _assert_finite_stats(updates)
        new_steps = buffer.gather_all()
        torch.manual_seed(0)
        exp, info = buffer.get_batch(4000, 2)
    # The resumed run restarts its episode with a reset time step, then 40 steps.
    new_actions = new_steps.action[newest + 1 :, 0, 0]
    assert new_actions.shape == (41,)
    assert bool((new_actions == POLICY_ACTION).all())
    assert int(new_steps.step_type[newest + 1, 0]) == StepType.FIRST

    def sequences(mask):
        assert bool(mask.any())
        return nest.map_structure(lambda x: x[:, mask], exp)

    # The last saved step's action was never executed, and the step stored after it
    # starts another episode: no transition across the resume.
    crossing = sequences(info.positions == newest)
    assert bool((crossing.step_type[1] == StepType.FIRST).all())
    assert not bool(valid_transitions(crossing).any())
    # The transition into the last saved step still counts and bootstraps (truncation).
    into = sequences(info.positions == newest - 1)
    assert bool(valid_transitions(into).all())
    assert bool((into.step_type[1] == StepType.LAST).all())
    assert bool((into.discount[1] == 1.0).all())


def test_resume_without_saved_buffer_collects_again_with_the_policy(tmp_path):
    root = tmp_path / "run"
    _first_run(root, enable_checkpoint=False)
    state = torch.load(root / "checkpoints" / f"ckpt-{FIRST_BUDGET}.pt", weights_only=True)
    assert "replay_buffer" not in state
    budget = FIRST_BUDGET + 220
    with _trainer(root, _resume_params(budget, False)) as trainer:
        buffer = trainer.algorithm.replay_buffer
        assert buffer.total_size == 0
        _constant_policy(trainer, POLICY_ACTION)
        updates = _record_updates(trainer)
        unrolls = _record_unrolls(trainer)
        trainer.train()
        assert unrolls and not any(u["random_actions"] for u in unrolls)
        actions = buffer.gather_all().action[:, 0, 0]
    assert actions.shape == (221,)
    assert bool((actions == POLICY_ACTION).all())
    # No update before the new buffer holds initial_collect_steps steps.
    assert updates and min(u["stored"] for u in updates) >= RESUME_COLLECT
    assert updates[0]["stored"] == RESUME_COLLECT
    assert updates[0]["iteration"] == FIRST_BUDGET + RESUME_COLLECT - 2
