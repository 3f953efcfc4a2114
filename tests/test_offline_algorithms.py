"""The offline RL algorithms (BC, TD3+BC, IQL, CQL, discrete CQL) on generated data: loss
shapes, which network each loss term trains, the terms' values, per-network learning
rates, and the statistics of the offline data (state normalisation, return range)."""

from __future__ import annotations

import functools
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_off_policy import _ddpg_params, _params, _trainer
from helpers_offline import greedy_return, pendulum_buffer, random_buffer, train_offline_on

from alf import nest
from alf.algorithms import (
    BcAlgorithm,
    CqlAlgorithm,
    DiscreteCqlAlgorithm,
    IqlAlgorithm,
    Td3BcAlgorithm,
)
from alf.algorithms.iql import expectile_loss
from alf.algorithms.off_policy_algorithm import (
    OffPolicyAlgorithm,
    bootstrap_observations,
    n_step_target,
)
from alf.algorithms.offline_rl import OfflineDataError, episode_returns, prepare_offline_data
from alf.data_structures import Experience, StepType
from alf.data_transformers import ObservationNormalizer, build_data_transformer
from alf.networks import (
    ActorDistributionNetwork,
    ActorNetwork,
    CriticNetwork,
    QNetwork,
    ValueNetwork,
)
from alf.tensor_specs import BoundedTensorSpec, TensorSpec, UnsupportedActionSpaceError
from alf.utils.distributions import distribution_mode
from alf.utils.schedules import CosineSchedule

OBS = TensorSpec((3,))
BOX = BoundedTensorSpec((2,), torch.float32, -2.0, 2.0)
DISCRETE = BoundedTensorSpec((), torch.int64, 1, 4)  # Discrete(4, start=1)
MULTI_DISCRETE = BoundedTensorSpec((3,), torch.int64, 0, np.array([1, 2, 4]))
HYBRID = {"choice": BoundedTensorSpec((), torch.int64, 0, 2), "amount": BOX}
MASKED_OBS = {"values": TensorSpec((3,)), "action_mask": BoundedTensorSpec((4,), torch.int64, 0, 1)}
SMALL = {
    "actor_network_ctor": functools.partial(ActorNetwork, fc_layer_params=(16,)),
    "distribution_network_ctor": functools.partial(ActorDistributionNetwork, fc_layer_params=(16,)),
}
CRITIC = functools.partial(CriticNetwork, fc_layer_params=(16,))
BATCH = 32


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


def _bc(**kwargs) -> BcAlgorithm:
    return BcAlgorithm(mini_batch_size=BATCH, **SMALL, **kwargs)


def _td3bc(**kwargs) -> Td3BcAlgorithm:
    return Td3BcAlgorithm(
        observation_spec=OBS,
        action_spec=BOX,
        actor_network_ctor=SMALL["actor_network_ctor"],
        critic_network_ctor=CRITIC,
        mini_batch_size=BATCH,
        **kwargs,
    )


def _iql(**kwargs) -> IqlAlgorithm:
    return IqlAlgorithm(
        observation_spec=OBS,
        action_spec=BOX,
        actor_network_ctor=SMALL["distribution_network_ctor"],
        critic_network_ctor=CRITIC,
        value_network_ctor=functools.partial(ValueNetwork, fc_layer_params=(16,)),
        mini_batch_size=BATCH,
        **{"return_range": None, **kwargs},
    )


def _cql(**kwargs) -> CqlAlgorithm:
    return CqlAlgorithm(
        observation_spec=OBS,
        action_spec=BOX,
        actor_network_ctor=SMALL["distribution_network_ctor"],
        critic_network_ctor=CRITIC,
        num_sampled_actions=3,
        mini_batch_size=BATCH,
        **kwargs,
    )


def _discrete_cql(**kwargs) -> DiscreteCqlAlgorithm:
    return DiscreteCqlAlgorithm(
        observation_spec=MASKED_OBS,
        action_spec=DISCRETE,
        q_network_ctor=functools.partial(QNetwork, fc_layer_params=(16,)),
        mini_batch_size=BATCH,
        **kwargs,
    )


BUILDERS: dict[str, Callable[[], OffPolicyAlgorithm]] = {
    "bc": lambda: _bc(observation_spec=OBS, action_spec=BOX),
    "bc_gaussian": lambda: _bc(observation_spec=OBS, action_spec=BOX, deterministic=False),
    "bc_discrete": lambda: _bc(observation_spec=MASKED_OBS, action_spec=DISCRETE),
    "bc_multi_discrete": lambda: _bc(observation_spec=OBS, action_spec=MULTI_DISCRETE),
    "bc_hybrid": lambda: _bc(observation_spec=OBS, action_spec=HYBRID),
    "td3bc": _td3bc,
    "iql": _iql,
    "cql": _cql,
    "cql_lagrange": lambda: _cql(lagrange_threshold=1.0),
    "discrete_cql": _discrete_cql,
}

# The networks each loss term may train (a term that reached another would be a bug).
TERMS = {
    "bc": {"loss": {"actor_network"}},
    "bc_gaussian": {"loss": {"actor_network"}},
    "bc_discrete": {"loss": {"actor_network"}},
    "bc_hybrid": {"loss": {"actor_network"}},
    "td3bc": {"td3.critics": {"critic_network"}, "td3.actor_loss": {"actor_network"}},
    "iql": {
        "critics": {"critic_network"},
        "value": {"value_network"},
        "actor_loss": {"actor_network"},
    },
    "cql": {
        "sac.critics": {"critic_network"},
        "sac.actor_loss": {"actor_network"},
        "gap": {"critic_network"},
    },
    "discrete_cql": {"dqn.q": {"q_network"}, "gap": {"q_network"}},
}


def _offline(name: str) -> tuple[OffPolicyAlgorithm, Experience]:
    algorithm = BUILDERS[name]()
    train_offline_on(algorithm, random_buffer(algorithm))
    exp, num_online = algorithm.sample_batch()
    assert num_online == 0
    return algorithm, exp


def _field(info: object, path: str) -> torch.Tensor:
    for name in path.split("."):
        info = getattr(info, name)
    assert isinstance(info, torch.Tensor)
    return info


def _trained_networks(algorithm: OffPolicyAlgorithm, term: torch.Tensor) -> set[str]:
    named = [(n, p) for n, p in algorithm.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(
        term.sum(), [p for _, p in named], retain_graph=True, allow_unused=True
    )
    return {
        name.split(".")[0]
        for (name, _), grad in zip(named, grads, strict=True)
        if grad is not None and bool(grad.abs().sum() > 0)
    }


@pytest.mark.parametrize("name", list(BUILDERS))
def test_losses_are_finite_scalars_and_every_update_applies(name):
    algorithm, exp = _offline(name)
    assert type(algorithm).needs_offline_data is True
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    for leaf in nest.flatten(info):
        assert leaf.shape[0] == BATCH and bool(torch.isfinite(leaf).all())
    loss_info = algorithm.calc_loss(info)
    assert loss_info.loss.shape == () and bool(torch.isfinite(loss_info.loss))
    stats = [algorithm.update_on(algorithm.sample_batch()[0])[1] for _ in range(4)]
    assert all(float(s["skipped"]) == 0.0 for s in stats)
    assert algorithm.num_skipped_updates == 0


@pytest.mark.parametrize("name", list(TERMS))
def test_each_loss_term_trains_its_own_network_only(name):
    algorithm, exp = _offline(name)
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    for path, networks in TERMS[name].items():
        assert _trained_networks(algorithm, _field(info, path)) == networks, path


def test_bc_clones_deterministic_actions_by_normalized_squared_error():
    algorithm, exp = _offline("bc")
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    expected = ((algorithm.actor_network(exp.observation[0]) - exp.action[0]) / 2.0) ** 2
    torch.testing.assert_close(info.loss, expected.mean(-1))


def test_discrete_bc_is_cross_entropy_with_the_mask():
    algorithm, exp = _offline("bc_discrete")
    obs = exp.observation
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    dist = algorithm.actor_network(nest.map_structure(lambda x: x[0], obs))
    torch.testing.assert_close(info.loss, -dist.log_prob(exp.action[0]))
    masked = {"values": obs["values"][0], "action_mask": torch.tensor([[1, 0, 0, 1]] * BATCH)}
    greedy = algorithm.predict_step(_time_step(masked), ()).output
    assert set(greedy.tolist()) <= {1, 4}  # actions 1 and 4 (indices 0 and 3) allowed


def _time_step(observation: object):
    from alf.data_structures import TimeStep

    return TimeStep(
        step_type=torch.full((BATCH,), int(StepType.MID), dtype=torch.int32),
        reward=torch.zeros(BATCH),
        discount=torch.ones(BATCH),
        observation=observation,
        prev_action=torch.zeros(BATCH, dtype=torch.int64),
        env_id=torch.arange(BATCH),
    )


def test_td3bc_actor_loss_normalizes_q_by_its_mean_magnitude():
    algorithm, exp = _offline("td3bc")
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    obs, data_action = exp.observation[0], exp.action[0]
    with torch.no_grad():
        action = algorithm.actor_network(obs)
        q = algorithm.critic_network(obs, action)[:, 0]
        valid = info.td3.valid.bool()
        lam = 2.5 / q[valid].abs().mean()
        bc = (((action - data_action) / 2.0) ** 2).mean(-1)
    torch.testing.assert_close(info.td3.actor_loss.detach(), bc - lam * q)
    torch.testing.assert_close(info.bc_error, bc)
    algorithm.num_updates += 1  # between actor updates: no actor term
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    assert not bool(info.td3.actor_loss.any()) and not bool(info.bc_error.any())


def test_expectile_loss_weights_the_two_signs():
    diff = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])
    torch.testing.assert_close(
        expectile_loss(diff, 0.7), torch.tensor([0.3 * 4, 0.3, 0.0, 0.7, 0.7 * 4])
    )
    # Its minimiser over a constant is the expectile: above the mean for tau > 0.5.
    samples = torch.randn(4000)
    value = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.Adam([value], lr=0.05)
    for _ in range(400):
        optimizer.zero_grad()
        expectile_loss(samples - value, 0.9).mean().backward()
        optimizer.step()
    assert float(samples.mean()) + 0.5 < float(value.detach()) < float(samples.quantile(0.95))


def test_iql_weights_are_clipped_advantage_exponentials():
    algorithm = _iql(beta=1000.0, max_weight=7.0)
    train_offline_on(algorithm, random_buffer(algorithm))
    exp, _ = algorithm.sample_batch()
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    log_prob = algorithm.policy(exp.observation[0]).log_prob(exp.action[0])
    weight = torch.where(info.advantage > 0, 7.0, torch.exp(1000.0 * info.advantage))
    torch.testing.assert_close(info.actor_loss, -weight.clamp(max=7.0) * log_prob)
    with torch.no_grad():
        target_q = algorithm.target_critic_network(exp.observation[0], exp.action[0])
    torch.testing.assert_close(info.value_target, target_q.min(-1).values)


def test_iql_evaluates_the_clipped_mean_and_explores_within_the_bounds():
    algorithm = _iql(squash_mean=False)
    with torch.no_grad():
        algorithm.actor_network.mean.bias.fill_(5.0)  # a mean beyond the bounds
    obs = torch.randn(BATCH, 3)
    assert bool((algorithm.predict_step(_time_step(obs), ()).output == 2.0).all())
    sampled = algorithm.rollout_step(_time_step(obs), ()).output
    assert bool((sampled.abs() <= 2.0).all())


def test_iql_squashes_its_mean_into_the_bounds_and_clamps_its_log_std():
    algorithm = _iql()  # squash_mean=True, as d3rlpy's IQL
    with torch.no_grad():
        algorithm.actor_network.mean.bias.fill_(0.0)
        algorithm.actor_network.mean.weight.zero_()
        algorithm.actor_network.std_param.fill_(10.0)  # log-std beyond d3rlpy's 2
    obs = torch.randn(BATCH, 3)
    policy = algorithm.policy(obs)
    torch.testing.assert_close(policy.mean, torch.zeros(BATCH, 2))  # tanh(0) mid-range
    torch.testing.assert_close(policy.stddev, torch.full((BATCH, 2), math.exp(2.0)))
    with torch.no_grad():
        algorithm.actor_network.mean.bias.fill_(50.0)
    mean = algorithm.predict_step(_time_step(obs), ()).output
    assert bool((mean <= 2.0).all()) and bool((mean > 1.99).all())
    # a data action on the bound keeps a finite likelihood (the Normal is not squashed)
    assert bool(torch.isfinite(algorithm.policy(obs).log_prob(torch.full((BATCH, 2), 2.0))).all())


def test_cql_gap_is_an_importance_sampled_logsumexp(monkeypatch):
    algorithm, exp = _offline("cql")
    with torch.no_grad():
        for p in algorithm.critic_network.parameters():
            p.zero_()  # Q = 0 everywhere: the gap is logsumexp(-log p)
    log_p = torch.linspace(-3.0, 1.0, 3 * BATCH).reshape(3, BATCH)
    monkeypatch.setattr(algorithm, "_policy_samples", lambda obs: (torch.zeros(3, BATCH, 2), log_p))
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    uniform = -math.log(4.0**2)
    exponents = torch.cat([torch.full((3, BATCH), uniform), log_p, log_p])
    expected = torch.logsumexp(-exponents, dim=0)
    torch.testing.assert_close(info.gap, expected.unsqueeze(-1).expand(BATCH, 2))


def test_cql_adds_the_weighted_gaps_of_both_critics():
    algorithm, exp = _offline("cql")
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    without = CqlAlgorithm.__mro__[1].calc_loss(algorithm, info.sac).loss
    valid = info.sac.valid.unsqueeze(-1)
    gaps = (info.gap * valid).sum(0) / valid.sum()
    torch.testing.assert_close(algorithm.calc_loss(info).loss, without + 5.0 * gaps.sum())


def test_cql_targets_bootstrap_from_a_sample_or_the_mean_action():
    """``next_action="mean"`` (d3rlpy's soft_q_backup=False): the target critics'
    minimum at the policy's squashed mean at the next state, the same every call;
    ``"sample"`` (the paper's, CORL's) draws the action, so two calls differ."""
    torch.manual_seed(0)
    algorithm, exp = _offline("cql")
    mean = _cql(next_action="mean")
    mean.load_state_dict(algorithm.state_dict())
    alpha = torch.ones(())
    obs = bootstrap_observations(exp)
    with torch.no_grad():
        action = distribution_mode(mean.actor_network(obs))
        values = mean.target_critic_network(obs, action).min(dim=-1).values
    expected = n_step_target(exp, values, gamma=mean.gamma, reward_scale=mean.reward_scale)
    torch.testing.assert_close(mean._target(exp, alpha), expected)
    torch.testing.assert_close(mean._target(exp, alpha), expected)
    assert not torch.allclose(algorithm._target(exp, alpha), algorithm._target(exp, alpha))


@pytest.mark.parametrize(
    "kwargs", [{"next_action": "mode"}, {"next_action": "mean", "backup_entropy": True}]
)
def test_cql_refuses_a_next_action_it_cannot_take(kwargs):
    with pytest.raises(ValueError, match=r"CqlAlgorithm.next_action"):
        _cql(**kwargs)


@pytest.mark.parametrize(("threshold", "rises"), [(-100.0, True), (100.0, False)])
def test_cql_lagrange_multiplier_follows_the_gap(threshold, rises):
    algorithm = _cql(lagrange_threshold=threshold)
    train_offline_on(algorithm, random_buffer(algorithm))
    for _ in range(5):
        algorithm.update_on(algorithm.sample_batch()[0])
    assert (float(algorithm.log_alpha_prime.detach()) > 0.0) == rises


def test_discrete_cql_logsumexp_skips_masked_actions():
    algorithm, exp = _offline("discrete_cql")
    mask = torch.tensor([1, 1, 0, 1])
    observation = {**exp.observation, "action_mask": mask.expand_as(exp.observation["action_mask"])}
    exp = exp._replace(observation=observation)
    info = algorithm.train_step(exp, (), exp.rollout_info).info
    q = algorithm.q_network(nest.map_structure(lambda x: x[0], observation))[:, 0]
    index = exp.action[0] - 1
    expected = torch.logsumexp(q[:, [0, 1, 3]], -1) - q.gather(-1, index[:, None])[:, 0]
    torch.testing.assert_close(info.gap, expected)
    loss = algorithm.calc_loss(info).loss
    plain = DiscreteCqlAlgorithm.__mro__[1].calc_loss(algorithm, info.dqn).loss
    valid = info.dqn.valid
    torch.testing.assert_close(loss, plain + (info.gap * valid).sum() / valid.sum())


def test_actor_learning_rates_form_their_own_group_in_the_lean_step():
    algorithm, _ = _offline("cql")
    groups = algorithm.optimizer.param_groups
    assert [g["lr"] for g in groups] == [3e-4, 1e-4]
    actor = {id(p) for p in algorithm.actor_network.parameters()} | {id(algorithm.log_alpha)}
    assert {id(p) for p in groups[1]["params"]} == actor
    algorithm.update_on(algorithm.sample_batch()[0])
    assert algorithm._lean_step is not None
    iql = _iql(actor_learning_rate=CosineSchedule(start=1e-3))
    iql.set_progress(0.5)
    assert [g["lr"] for g in iql.optimizer.param_groups] == pytest.approx([3e-4, 5e-4])


def test_continuous_methods_refuse_discrete_actions_and_encoders():
    for build in (IqlAlgorithm, CqlAlgorithm, Td3BcAlgorithm):
        with pytest.raises(UnsupportedActionSpaceError):
            build(observation_spec=OBS, action_spec=DISCRETE)
    with pytest.raises(ValueError, match="encoder_ctor"):
        _cql(encoder_ctor=functools.partial(torch.nn.Identity))


def _episodes(rewards: list[list[float]]) -> Experience:
    """One column of the episodes of ``rewards`` (each: the rewards of its transitions)."""
    kinds, values = [], []
    for episode in rewards:
        kinds += [StepType.FIRST] + [StepType.MID] * (len(episode) - 1) + [StepType.LAST]
        values += [0.0, *episode]
    n = len(kinds)
    return Experience(
        step_type=torch.tensor([int(k) for k in kinds]).reshape(n, 1),
        reward=torch.tensor(values).reshape(n, 1),
        discount=torch.ones(n, 1),
        observation=torch.arange(n, dtype=torch.float32).reshape(n, 1, 1),
        prev_action=torch.zeros(n, 1),
        env_id=torch.zeros(n, 1, dtype=torch.int64),
        action=torch.zeros(n, 1),
    )


def test_episode_returns_count_whole_episodes_only():
    exp = _episodes([[1.0, 2.0], [3.0], [4.0, 4.0, 4.0]])
    assert sorted(episode_returns(exp).tolist()) == [3.0, 3.0, 12.0]
    cut = nest.map_structure(lambda x: x[2:-1], exp)  # cut the first and the last
    assert episode_returns(cut).tolist() == [3.0]


def test_offline_data_starts_the_normalizer_and_gives_the_return_scale():
    transformer = build_data_transformer([ObservationNormalizer], OBS)
    algorithm = _iql(return_range=1000.0)
    algorithm.set_data_transformer(transformer)
    buffer = random_buffer(algorithm, episode_length=6)
    train_offline_on(algorithm, buffer)
    scale = prepare_offline_data(algorithm, return_range=1000.0)
    data = buffer.gather_all()
    stats = transformer.transformers[0].stats[0]
    observations = data.observation.reshape(-1, 3).double()
    torch.testing.assert_close(stats.mean, observations.mean(0))
    torch.testing.assert_close(stats.var, observations.var(0, unbiased=False))
    returns = episode_returns(data)
    assert scale == pytest.approx(1000.0 / float(returns.max() - returns.min()))
    # Fitted once: later data leaves the statistics to the normalizer's update mode.
    count = float(stats.count)
    prepare_offline_data(algorithm, return_range=None)
    assert float(stats.count) == count


def test_a_return_range_needs_two_whole_episodes_of_different_returns():
    algorithm = _iql()
    train_offline_on(algorithm, random_buffer(algorithm, episode_length=100))  # none whole
    with pytest.raises(OfflineDataError, match="return_range = None"):
        prepare_offline_data(algorithm, return_range=1000.0)
    assert prepare_offline_data(algorithm, return_range=None) == 1.0


# ------------------------------------------------------------------ through the trainer
@pytest.fixture(scope="module")
def saved_buffer_run(tmp_path_factory) -> Path:
    """A DDPG Pendulum run (episodes cut at 20 steps) whose checkpoint holds its buffer."""
    root = tmp_path_factory.mktemp("offline_source") / "source"
    params = _ddpg_params(
        "ReplayBuffer.enable_checkpoint=True",
        "create_environment.max_episode_steps=20",
        num_iterations=60,
        initial_collect_steps=20,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _trainer(root, params) as trainer:
            trainer.train()
    finally:
        torch.set_num_threads(threads)
    return root


@pytest.mark.parametrize("name", ["BcAlgorithm", "Td3BcAlgorithm", "IqlAlgorithm", "CqlAlgorithm"])
def test_trains_offline_on_a_saved_buffer_and_evaluates(tmp_path, saved_buffer_run, name):
    params = _params(
        name,
        "Pendulum-v1",
        f'TrainerConfig.offline_buffer_dir="{saved_buffer_run}"',
        "TrainerConfig.offline_fraction=1.0",
        "TrainerConfig.num_env_steps=0",
        "TrainerConfig.data_transformer_ctor=[@ObservationNormalizer]",
        "TrainerConfig.evaluate=True",
        "TrainerConfig.num_eval_episodes=1",
        "TrainerConfig.num_eval_environments=1",
        "create_environment.max_episode_steps=20",
        "ValueNetwork.fc_layer_params=(16, 16)",
        num_iterations=5,
    )
    with _trainer(tmp_path / name, params) as trainer:
        result = trainer.train()
        algorithm = trainer.algorithm
    assert result["iteration"] == 5 and result["env_steps"] == 0
    assert int(algorithm.replay_buffer.total_size) == 0
    saved = algorithm.replay.offline[0].gather_all()
    stats = algorithm.data_transformer.transformers[0].stats[0]
    observations = saved.observation.reshape(-1, 3).double()
    torch.testing.assert_close(stats.mean, observations.mean(0))  # the data's, unchanged
    if name == "IqlAlgorithm":
        returns = episode_returns(saved)
        spread = float(returns.max() - returns.min())
        assert returns.numel() >= 2
        assert algorithm.data_reward_scale == pytest.approx(1000.0 / spread)


def test_iql_fine_tunes_online_from_a_copy_of_its_offline_run(tmp_path, saved_buffer_run):
    """The offline-to-online path of docs/offline_algorithms.md: the finished offline
    run, copied, resumes with half of every mini-batch from the environment."""
    offline = [
        f'TrainerConfig.offline_buffer_dir="{saved_buffer_run}"',
        "TrainerConfig.num_env_steps=0",
        "TrainerConfig.initial_collect_steps=0",
        "create_environment.max_episode_steps=20",
        "ValueNetwork.fc_layer_params=(16, 16)",
    ]
    base = _params("IqlAlgorithm", "Pendulum-v1", *offline, num_iterations=None)
    first = [*base, "TrainerConfig.offline_fraction=1.0", "TrainerConfig.num_iterations=5"]
    with _trainer(tmp_path / "offline", first) as trainer:
        trainer.train()
        offline_actor = trainer.algorithm.actor_network.state_dict()
    shutil.copytree(tmp_path / "offline", tmp_path / "online")
    online = [
        *base,
        "TrainerConfig.offline_fraction=0.5",
        "TrainerConfig.allow_config_change=True",
        "TrainerConfig.num_iterations=40",
    ]
    with _trainer(tmp_path / "online", online) as trainer:
        assert trainer.iteration == 5  # resumed, not started afresh
        restored = trainer.algorithm.actor_network.state_dict()
        assert all(torch.equal(restored[k], v) for k, v in offline_actor.items())
        result = trainer.train()
        algorithm = trainer.algorithm
    assert result["iteration"] == 40 and result["env_steps"] == 35
    assert algorithm.replay_buffer.total_size == 36  # the first observation, then a step each
    assert algorithm.replay.offline_fraction == 0.5


# ------------------------------------------------------------------ learning (slow)
PENDULUM_OBS = TensorSpec((3,))
PENDULUM_ACTION = BoundedTensorSpec((1,), torch.float32, -2.0, 2.0)
HIDDEN = (64, 64)
_ACTOR = functools.partial(ActorNetwork, fc_layer_params=HIDDEN)
_GAUSSIAN = functools.partial(ActorDistributionNetwork, fc_layer_params=HIDDEN, activation="relu")
_CRITIC = functools.partial(CriticNetwork, fc_layer_params=HIDDEN)
_VALUE = functools.partial(ValueNetwork, fc_layer_params=HIDDEN, activation="relu")
LEARNERS: dict[str, tuple[Callable[..., OffPolicyAlgorithm], int]] = {
    # name: (the algorithm with its networks, updates)
    "bc": (functools.partial(BcAlgorithm, actor_network_ctor=_ACTOR), 400),
    "td3bc": (
        functools.partial(Td3BcAlgorithm, actor_network_ctor=_ACTOR, critic_network_ctor=_CRITIC),
        1200,
    ),
    "iql": (
        functools.partial(
            IqlAlgorithm,
            actor_network_ctor=_GAUSSIAN,
            critic_network_ctor=_CRITIC,
            value_network_ctor=_VALUE,
        ),
        800,
    ),
    "cql": (
        functools.partial(
            CqlAlgorithm,
            actor_network_ctor=_GAUSSIAN,
            critic_network_ctor=_CRITIC,
            num_sampled_actions=4,
            actor_learning_rate=None,
        ),
        1500,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LEARNERS))
def test_learns_pendulum_offline_from_a_noisy_controller(name):
    """20 episodes of a swing-up controller (about -160) with action noise of std 0.5:
    trained on them alone, each method's greedy policy is far better than random
    (about -1200) after a few hundred to 1500 updates (about a minute for CQL)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    build, updates = LEARNERS[name]
    algorithm = build(
        observation_spec=PENDULUM_OBS,
        action_spec=PENDULUM_ACTION,
        mini_batch_size=128,
        learning_rate=1e-3,
    )
    algorithm.set_data_transformer(build_data_transformer([ObservationNormalizer], PENDULUM_OBS))
    train_offline_on(algorithm, pendulum_buffer(algorithm, episodes=20, noise=0.5))
    scale = prepare_offline_data(algorithm, return_range=getattr(algorithm, "return_range", None))
    if isinstance(algorithm, IqlAlgorithm):
        algorithm.data_reward_scale = scale
    algorithm.num_updates_per_train_iter = updates
    stats = algorithm.train_from_replay()
    assert math.isfinite(stats["loss"])
    average = greedy_return(algorithm, episodes=3)
    print(f"{name}: greedy return {average:.0f} after {updates} updates")
    assert average > -600.0, average
