"""Recurrent off-policy training (R2D2-style): SAC with an LSTM observation encoder
shared by the actor and the critics, DQN with one before its Q network; the encoder state
stored in the replay buffer, burn-in on sampled sequences, resume with a saved buffer,
and (slow) recurrent SAC learning Pendulum with the angular velocity hidden."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from helpers_cli import eval_records, read_progress, run_many, train_cmd
from helpers_learning import EXAMPLES, TIMEOUT_S, check_reached
from helpers_off_policy import _trainer

from alf import nest
from alf.algorithms import DqnAlgorithm, SacAlgorithm
from alf.algorithms.rl_algorithm import LearningSetup, reset_state_on_first
from alf.config import ConfigValueError
from alf.data_structures import Experience, StepType, TimeStep
from alf.networks import EncodingNetwork
from alf.replay_buffers import ReplayBuffer, ReplayBufferError
from alf.tensor_specs import BoundedTensorSpec

OBS = BoundedTensorSpec((2,), torch.float32, -np.ones(2), np.ones(2))
BOX = BoundedTensorSpec((1,), torch.float32, -2 * np.ones(1), 2 * np.ones(1))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
ENCODER = functools.partial(EncodingNetwork, fc_layer_params=(8,), lstm_hidden_size=6)
CONF = EXAMPLES / "sac_lstm_pendulum.gin"


def _make(action_spec=BOX, **kwargs) -> SacAlgorithm:
    torch.manual_seed(0)
    return SacAlgorithm(
        observation_spec=OBS,
        action_spec=action_spec,
        encoder_ctor=ENCODER,
        mini_batch_size=4,
        mini_batch_length=3,
        burn_in=2,
        **{"replay_buffer_ctor": functools.partial(ReplayBuffer, max_length=64), **kwargs},
    )


def _collect(algorithm: SacAlgorithm, steps: int, batch: int = 2) -> Experience:
    """Steps ``rollout_step`` as an unroller does (episodes of 5 steps) and returns the
    ``[steps, batch]`` experience with the states given to each step."""
    torch.manual_seed(1)
    state = algorithm.zero_state(algorithm.rollout_state_spec, batch)
    rows = []
    for t in range(steps):
        phase = t % 6
        kind = StepType.FIRST if phase == 0 else StepType.LAST if phase == 5 else StepType.MID
        time_step = TimeStep(
            step_type=torch.full((batch,), kind, dtype=torch.int32),
            reward=torch.rand(batch),
            discount=torch.ones(batch),
            observation=torch.rand(batch, 2) * 2 - 1,
            prev_action=algorithm.action_spec.zeros((batch,)),
            env_id=torch.arange(batch),
        )
        state = reset_state_on_first(state, time_step.step_type)
        with torch.no_grad():
            step = algorithm.rollout_step(time_step, state)
        rows.append(Experience.from_time_step(time_step, step.output, step.info, state))
        state = step.state
    return nest.stack(rows)


@pytest.mark.parametrize("action_spec", [BOX, DISCRETE])
def test_the_encoder_state_is_the_algorithm_state_and_reaches_the_buffer(action_spec):
    algorithm = _make(action_spec)
    assert algorithm.is_recurrent
    assert algorithm.rollout_state_spec == algorithm.encoder.state_spec
    assert algorithm.experience_spec().state == algorithm.encoder.state_spec
    algorithm.prepare_learning(LearningSetup(num_envs=2))
    assert algorithm.sample_length == 2 + 3
    exp = _collect(algorithm, 20)
    algorithm.observe_for_replay(exp)
    batch, _ = algorithm.sample_batch()
    assert batch.step_type.shape == (5, 4)
    assert nest.flatten(batch.state)[0].shape == (5, 4, 6)
    # The stored states are the ones the policy stepped from.
    stored = algorithm.replay_buffer.gather_all()
    for got, want in zip(nest.flatten(stored.state), nest.flatten(exp.state), strict=True):
        assert torch.equal(got, want)


def test_burn_in_state_equals_stepping_the_encoder():
    algorithm = _make()
    exp = _collect(algorithm, 9)
    start = nest.map_structure(lambda x: x[0], exp.state)
    state, rest = algorithm.burn_in_state(algorithm.encoder, exp, start)
    assert rest.step_type.shape[0] == 9 - 2
    # Stepping the encoder from the stored state over the burn-in rows reproduces the
    # state stored with the first trained row (same parameters as during collection).
    for got, want in zip(nest.flatten(state), nest.flatten(exp.state), strict=True):
        torch.testing.assert_close(got, want[2], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("action_spec", [BOX, DISCRETE])
def test_updates_train_the_encoder_through_the_critic_only(action_spec):
    algorithm = _make(action_spec)
    algorithm.prepare_learning(LearningSetup(num_envs=2))
    algorithm.observe_for_replay(_collect(algorithm, 20))
    batch, _ = algorithm.sample_batch()
    state = nest.map_structure(lambda x: x[0], batch.state)
    info = algorithm.train_step(batch, state, batch.rollout_info).info
    assert info.critics.shape[0] == info.target.shape[0] == (3 - 1) * 4
    actor_loss = info.actor_loss.mean()
    encoder_params = list(algorithm.encoder.parameters())
    grads = torch.autograd.grad(actor_loss, encoder_params, allow_unused=True, retain_graph=True)
    assert all(g is None or not g.any() for g in grads)
    critic_loss = algorithm.calc_loss(info).loss
    grads = torch.autograd.grad(critic_loss, encoder_params, allow_unused=True)
    lstm = algorithm.encoder.lstm.cells[0]
    index = [p is lstm.weight_hh for p in encoder_params].index(True)
    assert grads[index] is not None and grads[index].abs().sum() > 0
    before = {n: p.detach().clone() for n, p in algorithm.target_encoder.named_parameters()}
    stats = algorithm.train_from_replay()
    assert stats["skipped"] == 0.0 and torch.isfinite(torch.as_tensor(stats["loss"]))
    after = dict(algorithm.target_encoder.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before)  # Polyak-updated


def test_burn_in_needs_a_recurrent_algorithm_and_uniform_sampling():
    torch.manual_seed(0)
    plain = SacAlgorithm(observation_spec=OBS, action_spec=BOX, burn_in=3)
    with pytest.raises(ConfigValueError, match="SacAlgorithm.burn_in = 3"):
        plain.prepare_learning(LearningSetup(num_envs=1))
    with pytest.raises(ConfigValueError, match="SacAlgorithm.burn_in"):
        SacAlgorithm(observation_spec=OBS, action_spec=BOX, burn_in=-1)
    prioritized = _make(replay_buffer_ctor=functools.partial(ReplayBuffer, prioritized=True))
    with pytest.raises(ReplayBufferError, match="ReplayBuffer.prioritized is not supported"):
        prioritized.prepare_learning(LearningSetup(num_envs=1))


def test_recurrent_sac_resumes_with_its_saved_buffer(tmp_path):
    """The stored states travel through the replay-buffer checkpoint."""
    params = [
        "TrainerConfig.num_env_steps=0",
        "TrainerConfig.num_iterations=60",
        "TrainerConfig.initial_collect_steps=40",
        "TrainerConfig.evaluate=False",
        "TrainerConfig.checkpoint_interval=30",
        "TrainerConfig.summary_interval=1000",
        "TrainerConfig.progress_interval_s=1000000",
        "ReplayBuffer.enable_checkpoint=True",
        "SacAlgorithm.mini_batch_size=8",
        "encoder/EncodingNetwork.lstm_hidden_size=8",
        "ActorDistributionNetwork.fc_layer_params=(16,)",
        "CriticNetwork.fc_layer_params=(16,)",
    ]
    with _trainer(tmp_path / "run", params, CONF) as trainer:
        trainer.train()
        stored = trainer.algorithm.data_checkpoint_state()
    resumed = [*params[:1], "TrainerConfig.num_iterations=70", *params[2:]]
    with _trainer(tmp_path / "run", resumed, CONF) as trainer:
        assert trainer.iteration == 60
        restored = trainer.algorithm.data_checkpoint_state()
        for got, want in zip(nest.flatten(restored), nest.flatten(stored), strict=True):
            if isinstance(got, torch.Tensor) and got.dtype.is_floating_point:
                assert torch.equal(got, want)
        trainer.train()
        assert trainer.iteration == 70


def test_recurrent_dqn_trains_its_encoder_from_stored_states():
    torch.manual_seed(0)
    algorithm = DqnAlgorithm(
        observation_spec=OBS,
        action_spec=DISCRETE,
        encoder_ctor=ENCODER,
        mini_batch_size=4,
        mini_batch_length=4,
        burn_in=3,
        replay_buffer_ctor=functools.partial(ReplayBuffer, max_length=64),
    )
    assert algorithm.rollout_state_spec == algorithm.encoder.state_spec
    algorithm.prepare_learning(LearningSetup(num_envs=2))
    exp = _collect(algorithm, 20)
    # Rollouts thread the encoder state: the greedy action depends on the history.
    assert nest.flatten(exp.state)[0][1:].abs().sum() > 0
    algorithm.observe_for_replay(exp)
    batch, _ = algorithm.sample_batch()
    assert batch.step_type.shape == (3 + 4, 4)
    state = nest.map_structure(lambda x: x[0], batch.state)
    info = algorithm.train_step(batch, state, batch.rollout_info).info
    assert info.q.shape == info.target.shape == info.valid.shape == ((4 - 1) * 4,)
    loss = algorithm.calc_loss(info).loss
    lstm = algorithm.encoder.lstm.cells[0].weight_hh
    (grad,) = torch.autograd.grad(loss, [lstm])
    assert grad.abs().sum() > 0
    stats = algorithm.train_from_replay()
    assert stats["skipped"] == 0.0 and torch.isfinite(torch.as_tensor(stats["loss"]))


BUDGET = 30_000  # the config's num_env_steps
TARGET = -400.0


@pytest.mark.slow
def test_recurrent_sac_learns_pendulum_without_velocities(tmp_path):
    cmd = train_cmd(
        tmp_path / "sac_lstm",
        "TrainerConfig.random_seed=0",
        f"TrainerConfig.stop_at_eval_return={TARGET}",
        conf=CONF,
    )
    proc = run_many({0: cmd}, max_workers=1, timeout=TIMEOUT_S)[0]
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {0: eval_records(read_progress(tmp_path / "sac_lstm"))}
    check_reached("Recurrent SAC, Pendulum without velocities", runs, TARGET, BUDGET)
