"""Action spaces beyond a 0-based Discrete or a Box (MultiDiscrete, MultiBinary, a
Discrete with a start, Dict/Tuple hybrids) and invalid-action masks: specs,
distributions, networks, the actor-critic family and DQN, the replay buffer and the
environments' mask checks, on the real environments of
``alf/environments/action_space_envs.py``."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf import nest
from alf.algorithms import ActorCriticAlgorithm, AppoAlgorithm, DqnAlgorithm, PPOAlgorithm
from alf.algorithms.off_policy_algorithm import n_step_target
from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import LearningSetup
from alf.algorithms.sac import SacAlgorithm
from alf.algorithms.td3 import Td3Algorithm
from alf.data_structures import TimeStep
from alf.environments import create_environment
from alf.environments.action_space_envs import InvalidActionError
from alf.environments.data_check import DataChecker, EnvironmentDataError
from alf.networks import ActorDistributionNetwork, QNetwork, ValueNetwork
from alf.networks.action_mask import ActionMaskError
from alf.replay_buffers import ReplayBuffer
from alf.tensor_specs import (
    BoundedTensorSpec,
    UnsupportedActionSpaceError,
    describe_spec,
    from_gym_space,
    sample_uniform,
    zeros_from_spec,
)
from alf.unrollers.sync_unroller import SyncUnroller
from alf.utils.distributions import (
    Categorical,
    MultiCategorical,
    NestDistribution,
    distribution_mode,
    sample,
)

MASKED = "alf/MaskedChoice-v0"
MULTI = "alf/MultiDiscreteMatch-v0"
HYBRID = "alf/HybridMatch-v0"

SMALL_ACTOR = functools.partial(ActorDistributionNetwork, fc_layer_params=(8,))
SMALL_VALUE = functools.partial(ValueNetwork, fc_layer_params=(8,))


def _own_message(err: BaseException) -> str:
    """The error's message without the line gin adds in a call of a configurable (the
    command line drops it too, see ``alf.bin.cli``)."""
    lines = str(err).splitlines()
    return "\n".join(line for line in lines if "In call to configurable" not in line).strip()


def _spec(space: gym.Space):
    return from_gym_space(space)


# ------------------------------------------------------------------ specs and dists
def test_describe_spec_names_gymnasium_spaces():
    space = gym.spaces.Dict(
        {
            "a": gym.spaces.Discrete(3, start=1),
            "b": gym.spaces.Box(-1, 1, (2,)),
            "c": gym.spaces.MultiDiscrete([2, 3]),
            "d": gym.spaces.MultiBinary(4),
        }
    )
    assert describe_spec(_spec(space)) == (
        "Dict(a: Discrete(3, start=1), b: Box(shape=(2,)), c: MultiDiscrete([2, 3]), "
        "d: MultiBinary([4]))"
    )
    assert describe_spec(_spec(gym.spaces.Tuple([gym.spaces.Discrete(2)]))) == (
        "Tuple(Discrete(2))"
    )


def test_categorical_offset_and_mask():
    torch.manual_seed(0)
    logits = torch.randn(64, 4)
    mask = torch.rand(64, 4) > 0.5
    mask[:, 3] = False  # the best action under large logits is always masked
    logits[:, 3] = 10.0
    dist = Categorical(logits, offset=5, mask=mask)
    allowed = mask | ~mask.any(-1, keepdim=True)
    for _ in range(20):
        action = sample(dist)
        assert ((action >= 5) & (action <= 8)).all()
        assert allowed.gather(-1, (action - 5).unsqueeze(-1)).all()
    mode = distribution_mode(dist)
    assert allowed.gather(-1, (mode - 5).unsqueeze(-1)).all()
    # The probabilities of the allowed actions sum to one; the masked add no entropy.
    probs = dist.logits.exp()
    torch.testing.assert_close(probs.sum(-1), torch.ones(64))
    assert (probs[~allowed] == 0).all()
    restricted = torch.distributions.Categorical(logits=logits.masked_fill(~allowed, float("-inf")))
    expected_entropy = -(restricted.probs * restricted.logits.clamp(min=-1e30)).sum(-1)
    torch.testing.assert_close(dist.entropy(), expected_entropy)
    torch.testing.assert_close(dist.log_prob(mode), restricted.log_prob(mode - 5))


def test_multi_categorical_uneven_sizes_and_mask():
    spec = _spec(gym.spaces.MultiDiscrete([2, 4], start=[1, -1]))
    net = ActorDistributionNetwork(input_spec=_spec(gym.spaces.Box(-1, 1, (3,))), action_spec=spec)
    obs = torch.randn(256, 3)
    dist = net(obs)
    assert isinstance(dist, MultiCategorical)
    action = sample(dist)
    assert action.shape == (256, 2)
    assert set(action[:, 0].tolist()) == {1, 2} and set(action[:, 1].tolist()) == {-1, 0, 1, 2}
    # log_prob and entropy sum the elements' categoricals (element 0 has 2 values).
    first = torch.distributions.Categorical(logits=dist.logits[:, 0, :2])
    second = torch.distributions.Categorical(logits=dist.logits[:, 1])
    torch.testing.assert_close(
        dist.log_prob(action), first.log_prob(action[:, 0] - 1) + second.log_prob(action[:, 1] + 1)
    )
    torch.testing.assert_close(dist.entropy(), first.entropy() + second.entropy())
    assert distribution_mode(dist).shape == (256, 2)


def test_nest_distribution_sums_leaves():
    spec = _spec(
        gym.spaces.Dict(
            {"choice": gym.spaces.Discrete(3, start=1), "amount": gym.spaces.Box(-1, 1, (1,))}
        )
    )
    net = ActorDistributionNetwork(input_spec=_spec(gym.spaces.Box(-1, 1, (4,))), action_spec=spec)
    dist = net(torch.randn(8, 4))
    assert isinstance(dist, NestDistribution)
    action = sample(dist)
    assert set(action) == {"choice", "amount"}
    assert action["choice"].shape == (8,) and action["amount"].shape == (8, 1)
    assert ((action["choice"] >= 1) & (action["choice"] <= 3)).all()
    amount, choice = dist.dists  # in nest.flatten order: sorted keys
    torch.testing.assert_close(
        dist.log_prob(action),
        choice.log_prob(action["choice"]) + amount.log_prob(action["amount"]),
    )
    torch.testing.assert_close(dist.entropy(), choice.entropy() + amount.entropy())
    mode = distribution_mode(dist)
    assert set(mode) == {"choice", "amount"}


def test_multi_binary_and_tuple_actions():
    obs_spec = _spec(gym.spaces.Box(-1, 1, (4,)))
    binary = ActorDistributionNetwork(
        input_spec=obs_spec, action_spec=_spec(gym.spaces.MultiBinary([2, 3]))
    )
    action = sample(binary(torch.randn(16, 4)))
    assert action.shape == (16, 2, 3) and set(action.unique().tolist()) <= {0, 1}
    tuple_spec = _spec(gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.MultiDiscrete([3])]))
    net = ActorDistributionNetwork(input_spec=obs_spec, action_spec=tuple_spec)
    action = sample(net(torch.randn(16, 4)))
    assert isinstance(action, tuple) and action[0].shape == (16,) and action[1].shape == (16, 1)


# ---------------------------------------------------------------- masks in networks
def _masked_obs_spec(n: int = 5, mask: int | None = None) -> dict:
    return {
        "values": BoundedTensorSpec((n,), torch.float32, 0.0, 1.0),
        "action_mask": BoundedTensorSpec((mask or n,), torch.int64, 0, 1),
    }


def test_actor_network_does_not_encode_the_mask():
    spec = _spec(gym.spaces.Discrete(5, start=2))
    net = ActorDistributionNetwork(input_spec=_masked_obs_spec(), action_spec=spec)
    assert net.encoder.output_size == 64
    assert net.encoder.mlp[0].in_features == 5  # "values" only, not the mask
    values = torch.rand(32, 5)
    allow_one = torch.zeros(32, 5, dtype=torch.int64)
    allow_one[:, 3] = 1
    dist = net({"values": values, "action_mask": allow_one})
    assert (sample(dist) == 5).all() and (distribution_mode(dist) == 5).all()
    torch.testing.assert_close(dist.entropy(), torch.zeros(32))
    # The mask changes nothing but the distribution: the features are the same.
    unmasked = net({"values": values, "action_mask": torch.ones(32, 5, dtype=torch.int64)})
    assert unmasked.entropy().min() > 1.0


def test_recurrent_actor_applies_the_mask_at_every_step():
    spec = _spec(gym.spaces.Discrete(5))
    net = ActorDistributionNetwork(
        input_spec=_masked_obs_spec(), action_spec=spec, lstm_hidden_size=8
    )
    state = zeros_from_spec(net.state_spec, (4,))
    for index in range(5):
        mask = torch.zeros(4, 5, dtype=torch.int64)
        mask[:, index] = 1
        dist, state = net.step({"values": torch.rand(4, 5), "action_mask": mask}, state)
        assert (sample(dist) == index).all()


def test_multi_discrete_mask_is_the_values_concatenated():
    spec = _spec(gym.spaces.MultiDiscrete([2, 3]))
    net = ActorDistributionNetwork(input_spec=_masked_obs_spec(3, mask=5), action_spec=spec)
    mask = torch.tensor([[0, 1, 1, 0, 0]] * 64)  # element 0: value 1; element 1: value 0
    dist = net({"values": torch.rand(64, 3), "action_mask": mask})
    assert (sample(dist) == torch.tensor([1, 0])).all()


def test_mask_of_the_wrong_shape_is_one_clear_error():
    with pytest.raises(ActionMaskError) as err:
        ActorDistributionNetwork(
            input_spec=_masked_obs_spec(5, mask=4), action_spec=_spec(gym.spaces.Discrete(5))
        )
    message = _own_message(err.value)
    assert "\n" not in message
    assert "observation['action_mask']" in message and "(4,)" in message and "(5,)" in message
    with pytest.raises(ActionMaskError, match=r"QNetwork: .*Discrete\(5\) needs shape \(5,\)"):
        QNetwork(input_spec=_masked_obs_spec(5, mask=6), action_spec=_spec(gym.spaces.Discrete(5)))
    with pytest.raises(ActionMaskError, match=r"MultiDiscrete\(\[2, 3\]\) needs shape \(5,\)"):
        ActorDistributionNetwork(
            input_spec=_masked_obs_spec(3, mask=6),
            action_spec=_spec(gym.spaces.MultiDiscrete([2, 3])),
        )
    with pytest.raises(ActionMaskError, match="needs a Discrete or MultiDiscrete action space"):
        ActorDistributionNetwork(
            input_spec=_masked_obs_spec(5),
            action_spec={"a": _spec(gym.spaces.Discrete(5))},
        )


def test_mask_key_is_configurable():
    import gin

    spec = _spec(gym.spaces.Discrete(5))
    obs_spec = {"values": _masked_obs_spec()["values"], "legal": _masked_obs_spec()["action_mask"]}
    with gin.unlock_config():
        gin.bind_parameter("action_mask_key.name", "legal")
    try:
        net = ActorDistributionNetwork(input_spec=obs_spec, action_spec=spec)
        assert net.encoder.mlp[0].in_features == 5
    finally:
        gin.clear_config()
    net = ActorDistributionNetwork(input_spec=obs_spec, action_spec=spec)
    assert net.encoder.mlp[0].in_features == 10  # an ordinary input again


# ---------------------------------------------------------------- refusals
def test_dqn_and_sac_refuse_what_they_cannot_do():
    obs = _spec(gym.spaces.Box(-1, 1, (4,)))
    hybrid = _spec(
        gym.spaces.Dict({"choice": gym.spaces.Discrete(3), "amount": gym.spaces.Box(-1, 1, (1,))})
    )
    with pytest.raises(UnsupportedActionSpaceError) as err:
        DqnAlgorithm(observation_spec=obs, action_spec=hybrid)
    message = _own_message(err.value)
    assert "\n" not in message and "DqnAlgorithm" in message
    assert "Dict(amount: Box(shape=(1,)), choice: Discrete(3))" in message
    with pytest.raises(UnsupportedActionSpaceError, match="SacAlgorithm.*MultiDiscrete"):
        SacAlgorithm(observation_spec=obs, action_spec=_spec(gym.spaces.MultiDiscrete([2, 2])))
    with pytest.raises(UnsupportedActionSpaceError, match="DqnAlgorithm.*MultiBinary"):
        DqnAlgorithm(observation_spec=obs, action_spec=_spec(gym.spaces.MultiBinary(3)))
    with pytest.raises(UnsupportedActionSpaceError, match=r"Td3Algorithm .*Discrete\(2\)"):
        Td3Algorithm(observation_spec=obs, action_spec=_spec(gym.spaces.Discrete(2)))


# ---------------------------------------------------------------- end to end (API)
def _collect(env_name: str, algorithm_cls, iterations: int = 2, **env_kwargs) -> None:
    env = create_environment(env_name, 4, seed=0, env_kwargs=env_kwargs or None)
    try:
        torch.manual_seed(0)
        kwargs = {"mini_batch_size": 32} if algorithm_cls is not ActorCriticAlgorithm else {}
        algorithm = algorithm_cls(
            observation_spec=env.observation_spec(),
            action_spec=env.action_spec(),
            actor_network_ctor=SMALL_ACTOR,
            value_network_ctor=SMALL_VALUE,
            **kwargs,
        )
        unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=16)
        for _ in range(iterations):
            stats = algorithm.learn(unroller.collect())
            assert all(torch.isfinite(torch.as_tensor(v)).all() for v in stats.values()), stats
        time_step = env.step(unroller._action)
        for _ in range(10):  # greedy actions reach the environment too
            time_step = env.step(algorithm.predict_step(time_step, ()).output)
    finally:
        env.close()


@pytest.mark.parametrize("algorithm_cls", [ActorCriticAlgorithm, PPOAlgorithm, AppoAlgorithm])
@pytest.mark.parametrize("env_name", [MULTI, HYBRID])
def test_actor_critic_family_trains_on_multi_discrete_and_hybrid(env_name, algorithm_cls):
    # The environments raise on an action outside their space (e.g. a choice that lost
    # its Discrete start).
    _collect(env_name, algorithm_cls)


@pytest.mark.parametrize("algorithm_cls", [ActorCriticAlgorithm, PPOAlgorithm, AppoAlgorithm])
def test_masked_actions_are_never_taken(algorithm_cls):
    # strict: the environment raises InvalidActionError on a masked action; an untrained
    # policy without masking takes one within a few steps (see the next test).
    _collect(MASKED, algorithm_cls, iterations=3, strict=True, start=3)


def test_an_unmasked_policy_takes_masked_actions():
    env = create_environment(MASKED, 4, seed=0, env_kwargs={"strict": True})
    algorithm = PPOAlgorithm(
        observation_spec={"values": env.observation_spec()["values"]},
        action_spec=env.action_spec(),
        actor_network_ctor=SMALL_ACTOR,
        value_network_ctor=SMALL_VALUE,
    )
    env.reset()
    with pytest.raises(InvalidActionError):
        for _ in range(50):
            env.step(sample(algorithm.actor_network(torch.rand(4, 5))))
    env.close()


def test_dqn_with_start_and_mask_never_takes_masked_actions_and_maximises_valid_targets():
    env = create_environment(MASKED, 4, seed=0, env_kwargs={"strict": True, "start": -2})
    try:
        torch.manual_seed(0)
        algorithm = DqnAlgorithm(
            observation_spec=env.observation_spec(),
            action_spec=env.action_spec(),
            q_network_ctor=functools.partial(QNetwork, fc_layer_params=(8,)),
            epsilon_greedy=0.5,
            mini_batch_size=16,
            mini_batch_length=2,
        )
        algorithm.prepare_learning(LearningSetup(num_envs=4, unroll_length=8))
        # Random warm-up steps, then epsilon-random and greedy steps: the strict
        # environment raises on any masked action.
        unroller = SyncUnroller(
            env=env, policy=Policy(algorithm=algorithm), unroll_length=8, initial_collect_steps=64
        )
        for _ in range(6):
            algorithm.learn(unroller.collect())
    finally:
        env.close()
    exp, _ = algorithm.replay_buffer.get_batch(256, 2)
    assert exp.action.min() >= -2 and exp.action.max() <= 2
    # Make action 2 (index 4) look best by far to both networks: the targets must
    # ignore it wherever the next observation masks it.
    for net in (algorithm.q_network, algorithm.target_q_network):
        with torch.no_grad():
            net.mlp.weights[-1].zero_()
            net.mlp.biases[-1].copy_(torch.tensor([0.0, 0.0, 0.0, 0.0, 1000.0]))
    next_allows_best = exp.observation["action_mask"][1, :, 4].bool()
    assert next_allows_best.any() and not next_allows_best.all()
    for double_q in (True, False):
        algorithm.double_q = double_q
        expected = n_step_target(exp, 1000.0 * next_allows_best.float(), gamma=algorithm.gamma)
        torch.testing.assert_close(algorithm._target(exp), expected)
    # Greedy actions: the best allowed one.
    obs = nest.map_structure(lambda x: x[0], exp.observation)
    time_step = TimeStep(
        step_type=exp.step_type[0],
        reward=exp.reward[0],
        discount=exp.discount[0],
        observation=obs,
        prev_action=exp.action[0],
        env_id=exp.env_id[0],
    )
    greedy = algorithm.predict_step(time_step, ()).output
    assert torch.equal(greedy == 2, obs["action_mask"][:, 4].bool())


def test_discrete_sac_with_start_and_mask_never_takes_masked_actions():
    env = create_environment(MASKED, 4, seed=0, env_kwargs={"strict": True, "start": 1})
    try:
        torch.manual_seed(0)
        algorithm = SacAlgorithm(
            observation_spec=env.observation_spec(),
            action_spec=env.action_spec(),
            actor_network_ctor=SMALL_ACTOR,
            q_network_ctor=functools.partial(QNetwork, fc_layer_params=(8,)),
            mini_batch_size=16,
            mini_batch_length=2,
        )
        algorithm.prepare_learning(LearningSetup(num_envs=4, unroll_length=8))
        unroller = SyncUnroller(
            env=env, policy=Policy(algorithm=algorithm), unroll_length=8, initial_collect_steps=32
        )
        for _ in range(4):
            stats = algorithm.learn(unroller.collect())
        assert stats and all(torch.isfinite(torch.as_tensor(v)).all() for v in stats.values())
    finally:
        env.close()


def test_all_false_mask_is_refused_where_an_action_is_taken():
    spec = {"action_mask": BoundedTensorSpec((3,), torch.int64, 0, 1)}
    check = DataChecker(env_name="alf/MaskedChoice-v0", observation_spec=spec, batch_size=2)
    ok = {"action_mask": np.array([[1, 0, 0], [0, 0, 1]])}
    bad = {"action_mask": np.array([[1, 0, 0], [0, 0, 0]])}
    check.check_action_mask(ok)
    check.check_action_mask(bad, ignore=np.array([False, True]))  # a LAST step: ignored
    check.advance(None)
    check.advance(None)
    with pytest.raises(EnvironmentDataError) as err:
        check.check_action_mask(bad)
    message = str(err.value)
    assert "\n" not in message
    assert "environment 1 of 'alf/MaskedChoice-v0'" in message
    assert "all-false action mask" in message and "step 2" in message


def test_random_draws_respect_the_mask():
    spec = _spec(gym.spaces.Discrete(4, start=1))
    mask = torch.tensor([[0, 1, 0, 1]] * 500)
    draws = sample_uniform(spec, 500, mask=mask)
    assert set(draws.tolist()) == {2, 4}


# ---------------------------------------------------------------- replay buffer
@pytest.mark.parametrize("env_name", [MULTI, HYBRID])
def test_replay_buffer_stores_and_restores_nested_actions(env_name):
    env = create_environment(env_name, 2, seed=0)
    try:
        algorithm = PPOAlgorithm(
            observation_spec=env.observation_spec(),
            action_spec=env.action_spec(),
            actor_network_ctor=SMALL_ACTOR,
            value_network_ctor=SMALL_VALUE,
        )
        spec = algorithm.experience_spec()
        buffer = ReplayBuffer(data_spec=spec, num_envs=2, max_length=64, enable_checkpoint=True)
        exp = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=20).collect()
    finally:
        env.close()
    steps = exp.experience()
    for t in range(steps.step_type.shape[0]):
        row = nest.map_structure(lambda x, t=t: x[t], steps._replace(batch_info=()))
        buffer.add_batch(row, row.env_id)
    copy = ReplayBuffer(data_spec=spec, num_envs=2, max_length=64, enable_checkpoint=True)
    copy.load_checkpoint_state(buffer.checkpoint_state())
    stored = copy.gather_all().action
    nest.map_structure(torch.testing.assert_close, stored, steps.action)
    batch, _ = copy.get_batch(8, 3)
    assert nest.flatten(batch.action)[0].shape[:2] == (3, 8)
