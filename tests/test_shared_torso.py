"""The shared torso of the actor-critic family (``ActorValueNetwork`` through
``actor_value_network_ctor``): shapes for every action space and a mask, gradients of
both losses reaching the torso, learning CartPole with PPO and APPO, an LSTM torso
through ``SyncUnroller`` and ``train_from_unroll``, export against ``greedy_step``, and a
checkpoint round trip."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch

from alf import nest
from alf.algorithms import ActorCriticAlgorithm, AppoAlgorithm, PPOAlgorithm
from alf.algorithms.actor_critic import ActorCriticRolloutInfo
from alf.algorithms.actor_critic_networks import SeparateNetworks, SharedTorso
from alf.algorithms.policy import Policy, PolicyState
from alf.data_structures import Experience, StepType, TimeStep
from alf.environments import create_environment
from alf.networks import ActorValueNetwork, ValueNetwork
from alf.tensor_specs import BoundedTensorSpec, TensorSpec
from alf.unrollers import SyncUnroller

OBS = BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
MULTI_DISCRETE = BoundedTensorSpec((2,), torch.int64, 0, np.array([2, 3]))
BOX = BoundedTensorSpec((2,), torch.float32, -np.ones(2), np.ones(2))
HYBRID = {"move": BOX, "pick": DISCRETE}
SMALL = functools.partial(ActorValueNetwork, fc_layer_params=(16,))
LSTM = functools.partial(ActorValueNetwork, fc_layer_params=(16,), lstm_hidden_size=8)


def _shared(cls=PPOAlgorithm, network=SMALL, observation_spec=OBS, action_spec=DISCRETE, **kw):
    torch.manual_seed(0)
    return cls(
        observation_spec=observation_spec,
        action_spec=action_spec,
        actor_value_network_ctor=network,
        **kw,
    )


def _first_layer(network: ActorValueNetwork) -> torch.Tensor:
    return network.torso.mlp[0].weight


@pytest.mark.parametrize("action_spec", [DISCRETE, MULTI_DISCRETE, BOX, HYBRID])
def test_one_call_gives_the_distribution_the_value_and_both_gradients(action_spec):
    network = SMALL(input_spec=OBS, action_spec=action_spec)
    observation = torch.rand(5, 4)
    dist, value = network(observation)
    assert value.shape == (5,)
    action = dist.sample()
    assert dist.log_prob(action).shape == (5,)
    assert nest.map_structure(lambda a: a.shape[0], action) == nest.map_structure(
        lambda _: 5, action_spec
    )
    dist.log_prob(action).sum().backward()  # the policy loss alone reaches the torso
    assert _first_layer(network).grad.abs().sum() > 0
    assert network.value.weight.grad is None
    network.zero_grad(set_to_none=True)
    network(observation)[1].sum().backward()  # and so does the value loss alone
    assert _first_layer(network).grad.abs().sum() > 0


def test_algorithm_builds_one_network_and_both_losses_train_its_torso():
    algorithm = _shared()
    assert algorithm.shared_torso and isinstance(algorithm._networks, SharedTorso)
    assert not hasattr(algorithm, "actor_network") and not algorithm.fused_rollout
    keys = algorithm.state_dict().keys()
    assert any(k.startswith("actor_value_network.torso.") for k in keys)
    separate = PPOAlgorithm(observation_spec=OBS, action_spec=DISCRETE)
    assert isinstance(separate._networks, SeparateNetworks) and not separate.shared_torso
    info = _one_step_info(algorithm)
    losses = {
        "policy": -(info.rollout.advantage * info.log_prob).mean(),
        "value": ((info.value - info.rollout.returns) ** 2).mean(),
    }
    for name, loss in losses.items():
        algorithm.zero_grad(set_to_none=True)
        loss.backward(retain_graph=True)
        assert _first_layer(algorithm.actor_value_network).grad.abs().sum() > 0, name


def _one_step_info(algorithm):
    """``train_step``'s info for one batch of 6 steps, with random advantages and
    returns."""
    observation = torch.rand(6, 4)
    time_step = _time_step(observation, torch.full((6,), StepType.MID))
    with torch.no_grad():
        step = algorithm.rollout_step(time_step, ())
    rollout = ActorCriticRolloutInfo(
        log_prob=step.info.log_prob,
        value=step.info.value,
        advantage=torch.randn(6),
        returns=torch.randn(6),
    )
    exp = Experience.from_time_step(time_step, step.output, rollout, ())
    return algorithm.train_step(exp, (), rollout).info


def _time_step(observation, step_type):
    batch = step_type.shape[0]
    return TimeStep(
        step_type=step_type.to(torch.int32),
        reward=torch.zeros(batch),
        discount=torch.ones(batch),
        observation=observation,
        prev_action=torch.zeros(batch, dtype=torch.int64),
        env_id=torch.arange(batch),
    )


def test_separate_and_shared_constructors_are_not_mixed():
    with pytest.raises(ValueError, match="leave actor_network_ctor and value_network_ctor"):
        _shared(value_network_ctor=functools.partial(ValueNetwork, fc_layer_params=(8,)))


def test_masked_actions_are_never_drawn_and_the_mask_is_not_encoded():
    spec = {"obs": OBS, "action_mask": TensorSpec((3,), torch.bool)}
    algorithm = _shared(observation_spec=spec)
    assert algorithm.actor_value_network.torso.output_size == 16
    mask = torch.tensor([[True, False, False], [False, True, True]]).repeat(50, 1)
    observation = {"obs": torch.rand(100, 4), "action_mask": mask}
    time_step = _time_step(observation, torch.full((100,), StepType.MID))
    with torch.no_grad():
        rolled = algorithm.rollout_step(time_step, ())
        greedy = algorithm.predict_step(time_step, ())
    for action in (rolled.output, greedy.output):
        assert mask.gather(1, action[:, None]).all()


def _first_episode_length(algorithm, num_envs: int = 16, max_steps: int = 300) -> float:
    """The mean length of the first episode of ``num_envs`` fresh CartPoles, acting with
    ``rollout_step`` (sampled actions; about 22 for a random policy)."""
    with create_environment("CartPole-v1", num_envs, seed=123) as env:
        time_step = env.reset()
        alive = torch.ones(num_envs, dtype=torch.bool)
        length = torch.zeros(num_envs)
        with torch.no_grad():
            for _ in range(max_steps):
                time_step = env.step(algorithm.rollout_step(time_step, ()).output)
                length += alive
                alive &= time_step.step_type != StepType.LAST
                if not alive.any():
                    break
    return float(length.mean())


@pytest.mark.parametrize("cls", [PPOAlgorithm, AppoAlgorithm])
def test_learns_cart_pole(cls):
    """About five seconds of in-process training (10k steps) lift the episode length
    from about 22 (random) to over 80. (The value loss trains the torso too: unscaled
    returns of up to 50 let it dominate the policy's gradient, hence ``reward_scale``.)"""
    network = functools.partial(ActorValueNetwork, fc_layer_params=(64, 64))
    with create_environment("CartPole-v1", 8, seed=0) as env:
        algorithm = _shared(
            cls,
            network=network,
            observation_spec=env.observation_spec(),
            action_spec=env.action_spec(),
            gamma=0.98,
            gae_lambda=0.8,
            reward_scale=0.1,
            num_epochs=4,
            mini_batch_size=128,
            learning_rate=2e-3,
        )
        unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=64)
        for _ in range(20):
            algorithm.train_from_unroll(unroller.unroll())
    assert _first_episode_length(algorithm) > 80


@pytest.mark.parametrize("cls", [PPOAlgorithm, AppoAlgorithm])
def test_lstm_torso_through_the_sync_unroller_and_train_from_unroll(cls):
    """The stored rollout states reproduce the behaviour policy's log-probabilities and
    values (all ratios 1 in the one update on the whole trajectory), and the update moves
    the LSTM."""
    with create_environment("CartPole-v1", 4, seed=0, max_episode_steps=12) as env:
        algorithm = _shared(
            cls,
            network=LSTM,
            observation_spec=env.observation_spec(),
            action_spec=env.action_spec(),
            clip=1e-6,
            num_epochs=1,
            mini_batch_size=None,
        )
        assert algorithm.rollout_state_spec == ((TensorSpec((8,)), TensorSpec((8,))),)
        assert algorithm.predict_state_spec == algorithm.rollout_state_spec
        unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=20)
        unroller.unroll()
        exp = unroller.unroll()  # continues the episodes of the first unroll
    assert nest.flatten(exp.state)[0][0].abs().sum() > 0
    assert (exp.step_type[1:] == StepType.FIRST).any()
    with torch.no_grad():
        info = algorithm.train_sequence(exp, nest.map_structure(lambda x: x[0], exp.state)).info
    torch.testing.assert_close(info.log_prob, exp.rollout_info.log_prob, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(info.value, exp.rollout_info.value, atol=1e-5, rtol=1e-5)
    lstm = algorithm.actor_value_network.torso.lstm.cells[0].weight_hh
    before = lstm.detach().clone()
    stats = algorithm.train_from_unroll(exp)
    assert stats["skipped"] == 0.0 and float(stats["clip_fraction"]) == 0.0
    assert not torch.equal(lstm, before)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_export_matches_greedy_step(fmt, tmp_path: Path):
    """An LSTM shared torso exported and run step by step gives ``greedy_step``'s
    actions and next states."""
    from alf.export import export_policy

    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    from test_export import _Exported

    algorithm = _shared(ActorCriticAlgorithm, network=LSTM)
    path = export_policy(algorithm, str(tmp_path / f"p.{fmt}"), format=fmt).path
    model = _Exported(Path(path))
    model.state = {n: np.repeat(v, 3, axis=0) for n, v in model.state.items()}
    algorithm.eval()
    policy = Policy(algorithm=algorithm)
    state = PolicyState(
        algorithm=algorithm.zero_state(algorithm.predict_state_spec, 3),
        transform=algorithm.data_transformer.initial_state(3),
    )
    generator = torch.Generator().manual_seed(1)
    for t in range(20):
        first = torch.rand(3, generator=generator) < 0.2 if t else torch.ones(3, dtype=torch.bool)
        observation = torch.rand(3, 4, generator=generator) * 2 - 1
        step_type = torch.where(first, StepType.FIRST, StepType.MID)
        with torch.no_grad():
            action, state = policy.greedy_step(_time_step(observation, step_type), state)
        outputs = model(
            {"step_type": step_type.to(torch.int32).numpy(), "observation": observation.numpy()}
        )
        assert np.array_equal(outputs["action"], action.numpy()), t
        np.testing.assert_allclose(
            outputs["next_policy_state.0.0"], state.algorithm[0][0].numpy(), atol=1e-5
        )


def test_checkpoint_round_trip(tmp_path: Path):
    """``checkpoint_state`` saved to a file and loaded into a fresh algorithm restores the
    same parameters, optimizer state and therefore the same next update."""
    with create_environment("CartPole-v1", 4, seed=0, max_episode_steps=12) as env:
        specs = {"observation_spec": env.observation_spec(), "action_spec": env.action_spec()}
        algorithm = _shared(AppoAlgorithm, network=LSTM, **specs)
        unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=10)
        algorithm.train_from_unroll(unroller.unroll())
        exp = unroller.unroll()
    torch.save(algorithm.checkpoint_state(), tmp_path / "ckpt.pt")
    restored = _shared(AppoAlgorithm, network=LSTM, **specs)
    restored.load_checkpoint_state(torch.load(tmp_path / "ckpt.pt", weights_only=False))
    assert algorithm.state_dict().keys() == restored.state_dict().keys()
    for a, b in zip(algorithm.parameters(), restored.parameters(), strict=True):
        assert torch.equal(a, b)
    for one in (algorithm, restored):
        torch.manual_seed(3)
        one.train_from_unroll(exp)
    for a, b in zip(algorithm.parameters(), restored.parameters(), strict=True):
        torch.testing.assert_close(a, b)
