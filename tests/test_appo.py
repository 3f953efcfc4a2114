"""Tests of APPO (alf.algorithms.appo): V-trace preprocessing against GAE and against
``vtrace`` itself, the shared clipped objective, a gradient update on CartPole, and (slow)
learning CartPole with the example config."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from alf import config as alf_config
from alf import nest
from alf.algorithms import ActorCriticAlgorithm, AppoAlgorithm, PPOAlgorithm
from alf.algorithms.actor_critic import ActorCriticRolloutInfo, ActorCriticTrainInfo
from alf.algorithms.policy import Policy
from alf.config import EXAMPLES_DIR
from alf.data_structures import Experience, StepType
from alf.environments import create_environment
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.unrollers.sync_unroller import SyncUnroller
from alf.utils.schedules import LinearSchedule
from alf.utils.value_ops import generalized_advantage_estimation, valid_mask, vtrace

SMALL_ACTOR = functools.partial(ActorDistributionNetwork, fc_layer_params=(16,))
SMALL_VALUE = functools.partial(ValueNetwork, fc_layer_params=(16,))


def _make(
    env,
    algorithm_class: type[ActorCriticAlgorithm] = AppoAlgorithm,
    value_network_ctor: functools.partial = SMALL_VALUE,
    **kwargs,
) -> ActorCriticAlgorithm:
    torch.manual_seed(0)
    return algorithm_class(
        observation_spec=env.observation_spec(),
        action_spec=env.action_spec(),
        actor_network_ctor=SMALL_ACTOR,
        value_network_ctor=value_network_ctor,
        **kwargs,
    )


def _env(name: str = "CartPole-v1", num_envs: int = 4, max_episode_steps: int = 12):
    """A short time limit, so a trajectory holds both truncated and terminated episodes."""
    return create_environment(name, num_envs, seed=0, max_episode_steps=max_episode_steps)


def _unroll(env, algorithm, length: int = 40) -> Experience:
    return SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=length).unroll()


def _current_log_prob(algorithm: AppoAlgorithm, exp: Experience) -> torch.Tensor:
    """The current policy's log-probabilities of ``exp``'s actions, step by step."""
    with torch.no_grad():
        rows = [
            algorithm.actor_network(exp.observation[t]).log_prob(exp.action[t])
            for t in range(exp.step_type.shape[0])
        ]
    return torch.stack(rows)


def _with_behaviour_log_prob(exp: Experience, log_prob: torch.Tensor) -> Experience:
    return exp._replace(rollout_info=exp.rollout_info._replace(log_prob=log_prob))


@pytest.fixture(scope="module")
def cart_pole():
    env = _env()
    yield env
    env.close()


def test_appo_is_an_actor_critic_not_a_ppo_and_has_async_defaults(cart_pole):
    assert issubclass(AppoAlgorithm, ActorCriticAlgorithm)
    assert not issubclass(AppoAlgorithm, PPOAlgorithm)
    algorithm = _make(cart_pole)
    assert algorithm.clip == pytest.approx(0.2)
    assert algorithm.gae_lambda == 1.0
    assert (algorithm.clip_rho, algorithm.clip_c, algorithm.clip_pg_rho) == (1.0, 1.0, 1.0)
    assert algorithm.num_epochs == 1 and algorithm.mini_batch_size is None
    assert algorithm.normalize_advantages and algorithm.value_clip is None
    with pytest.raises(ValueError, match="clip_rho"):
        _make(cart_pole, clip_rho=0.0)


@pytest.mark.parametrize("env_name", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("lam", [0.7, 1.0])
def test_on_policy_preprocessing_equals_gae_lambda_returns(env_name, lam):
    """Behaviour = current policy (a fresh rollout): every ratio is 1, so the targets are
    V-trace's with ``log_rhos = 0``, i.e. GAE's lambda-returns; with lambda 1 the
    policy-gradient advantages are GAE's advantages too."""
    env = _env(env_name)
    algorithm = _make(env, gamma=0.9, gae_lambda=lam, reward_scale=2.0)
    exp = _unroll(env, algorithm)
    env.close()
    last = exp.step_type[:-1] == StepType.LAST
    assert last.any()
    if env_name == "CartPole-v1":  # both kinds of episode ends are exercised
        assert (exp.discount[:-1][last] == 0).any() and (exp.discount[:-1][last] == 1).any()
    with torch.no_grad():
        out = algorithm.preprocess_experience(exp)
    for leaf in nest.flatten(out):
        assert leaf.shape[:2] == (40, 4)
    info = out.rollout_info
    assert isinstance(info, ActorCriticRolloutInfo)
    assert torch.equal(info.log_prob, exp.rollout_info.log_prob[:-1])
    torch.testing.assert_close(info.value, exp.rollout_info.value[:-1])
    assert torch.equal(out.observation, exp.observation[:-1])

    on_policy = vtrace(
        rewards=exp.reward * 2.0,
        values=exp.rollout_info.value,
        step_types=exp.step_type,
        discounts=exp.discount,
        log_rhos=torch.zeros_like(exp.reward),
        gamma=0.9,
        td_lambda=lam,
    )
    torch.testing.assert_close(info.returns, on_policy[0])
    torch.testing.assert_close(info.advantage, on_policy[1])
    gae_adv, gae_returns = generalized_advantage_estimation(
        exp.reward * 2.0, exp.rollout_info.value, exp.step_type, exp.discount, 0.9, lam
    )
    valid = valid_mask(exp.step_type).bool()
    torch.testing.assert_close(info.returns[valid], gae_returns[valid])
    assert (info.advantage[~valid] == 0).all()
    if lam == 1.0:
        torch.testing.assert_close(info.advantage, gae_adv)


def test_stale_behaviour_log_probs_change_the_targets_through_clipped_rhos(cart_pole):
    kwargs = dict(gamma=0.95, gae_lambda=0.9, clip_rho=1.0, clip_c=0.8, clip_pg_rho=1.5)
    algorithm = _make(cart_pole, **kwargs)
    exp = _unroll(cart_pole, algorithm)
    target = _current_log_prob(algorithm, exp)
    with torch.no_grad():
        on_policy = algorithm.preprocess_experience(exp).rollout_info

    # Behaviour log-probs perturbed both ways: some rhos < 1, some above every clip level.
    offsets = torch.randn(exp.reward.shape, generator=torch.Generator().manual_seed(1))
    behaviour = target + offsets
    with torch.no_grad():
        info = algorithm.preprocess_experience(_with_behaviour_log_prob(exp, behaviour))
        info = info.rollout_info
    assert torch.equal(info.log_prob, behaviour[:-1])  # the behaviour's, for the ratio
    expected = vtrace(
        rewards=exp.reward,
        values=exp.rollout_info.value,
        step_types=exp.step_type,
        discounts=exp.discount,
        log_rhos=target - behaviour,
        gamma=0.95,
        td_lambda=0.9,
        clip_rho=1.0,
        clip_c=0.8,
        clip_pg_rho=1.5,
    )
    torch.testing.assert_close(info.returns, expected[0])
    torch.testing.assert_close(info.advantage, expected[1])
    assert not torch.allclose(info.returns, on_policy.returns)
    # The truncation is applied: without it the targets would differ.
    unclipped = vtrace(
        rewards=exp.reward,
        values=exp.rollout_info.value,
        step_types=exp.step_type,
        discounts=exp.discount,
        log_rhos=target - behaviour,
        gamma=0.95,
        td_lambda=0.9,
        clip_rho=1e9,
        clip_c=1e9,
        clip_pg_rho=1e9,
    )
    assert not torch.allclose(info.returns, unclipped[0])

    # Behaviour much more likely than the target everywhere (rho = e^-3): the
    # corrections towards the observed returns shrink, and so do the advantages.
    with torch.no_grad():
        likely = algorithm.preprocess_experience(_with_behaviour_log_prob(exp, target + 3.0))
    likely = likely.rollout_info
    shrink = (likely.returns - likely.value).abs().sum()
    assert shrink < 0.2 * (on_policy.returns - on_policy.value).abs().sum()
    assert likely.advantage.abs().sum() < 0.2 * on_policy.advantage.abs().sum()

    # Behaviour much less likely (rho = e^3): every weight is clipped to its level, so
    # the targets are the on-policy ones with the pg weights at clip_pg_rho.
    with torch.no_grad():
        unlikely = algorithm.preprocess_experience(_with_behaviour_log_prob(exp, target - 3.0))
    unlikely = unlikely.rollout_info
    at_clip = vtrace(
        rewards=exp.reward,
        values=exp.rollout_info.value,
        step_types=exp.step_type,
        discounts=exp.discount,
        log_rhos=torch.zeros_like(exp.reward),
        gamma=0.95,
        td_lambda=0.9 * 0.8,  # c = lambda * clip_c
    )
    torch.testing.assert_close(unlikely.returns, at_clip[0])
    torch.testing.assert_close(unlikely.advantage, 1.5 * at_clip[1])


def _tiny_info() -> ActorCriticTrainInfo:
    rollout = ActorCriticRolloutInfo(
        log_prob=torch.tensor([-0.5, -1.0, -0.2, -0.7]),
        value=torch.tensor([0.4, 0.0, 1.0, 0.3]),
        advantage=torch.tensor([1.0, -2.0, 0.5, 0.1]),
        returns=torch.tensor([1.0, -1.0, 2.0, 0.2]),
    )
    return ActorCriticTrainInfo(
        log_prob=torch.tensor([-0.2, -1.5, -0.2, -0.6]),
        entropy=torch.tensor([0.6, 0.4, 0.5, 0.3]),
        value=torch.tensor([0.5, 0.5, 1.0, 0.1]),
        rollout=rollout,
    )


@pytest.mark.parametrize("normalize", [False, True])
def test_loss_is_ppos_clipped_objective_plus_mean_rho(cart_pole, normalize):
    kwargs = dict(
        clip=0.2,
        value_clip=0.2,
        normalize_advantages=normalize,
        value_loss_coef=0.3,
        entropy_coef=0.01,
        actor_network_ctor=SMALL_ACTOR,
        value_network_ctor=SMALL_VALUE,
        observation_spec=cart_pole.observation_spec(),
        action_spec=cart_pole.action_spec(),
    )
    appo = AppoAlgorithm(**kwargs).calc_loss(_tiny_info())
    ppo = PPOAlgorithm(**kwargs).calc_loss(_tiny_info())
    assert set(appo.extra) == set(ppo.extra) | {"mean_rho"}
    torch.testing.assert_close(appo.loss, ppo.loss)
    for name, value in ppo.extra.items():
        torch.testing.assert_close(appo.extra[name], value)
    ratios = torch.exp(torch.tensor([0.3, -0.5, 0.0, 0.1]))
    assert appo.extra["mean_rho"].item() == pytest.approx(ratios.mean().item())
    assert appo.extra["clip_fraction"].item() == pytest.approx(0.5)


def test_clip_follows_set_progress(cart_pole):
    algorithm = _make(cart_pole, clip=LinearSchedule(start=0.3, end=0.1))
    assert algorithm.clip == pytest.approx(0.3)
    algorithm.set_progress(0.5)
    assert algorithm.clip == pytest.approx(0.2)


@pytest.mark.parametrize("algorithm_class", [AppoAlgorithm, PPOAlgorithm])
def test_only_appo_collects_without_the_value_network(cart_pole, algorithm_class):
    """V-trace recomputes the values in training, so APPO's collection skips the (stateless,
    separate) value network; PPO's GAE reads the collected values."""
    algorithm = _make(cart_pole, algorithm_class, fused_rollout=False)
    calls = []
    algorithm.value_network.register_forward_hook(lambda *_: calls.append(1))
    exp = _unroll(cart_pole, algorithm, length=8)
    values = exp.rollout_info.value
    assert values.shape == exp.rollout_info.log_prob.shape
    if algorithm_class is PPOAlgorithm:
        assert calls and bool((values != 0).any())
        assert algorithm.learner_only_state == ()
        return
    assert not calls and bool((values == 0).all())
    assert algorithm.learner_only_state == ("value_network.",)  # actors are not sent it
    other = exp._replace(rollout_info=exp.rollout_info._replace(value=torch.randn_like(values)))
    with torch.no_grad():
        first, second = algorithm.preprocess_experience(exp), algorithm.preprocess_experience(other)
    for a, b in zip(nest.flatten(first), nest.flatten(second), strict=True):
        torch.testing.assert_close(a, b)


def test_fused_or_recurrent_collection_keeps_the_value_network_on_the_actors(cart_pole):
    assert _make(cart_pole).learner_only_state == ()  # fused: evaluates both networks
    recurrent_value = functools.partial(ValueNetwork, fc_layer_params=(16,), lstm_hidden_size=8)
    appo = _make(cart_pole, value_network_ctor=recurrent_value, fused_rollout=False)
    assert appo.learner_only_state == ()  # its state is stored with the trajectory


def test_train_from_unroll_updates_parameters_with_finite_stats(cart_pole):
    algorithm = _make(cart_pole, num_epochs=2, mini_batch_size=32, learning_rate=1e-2)
    unroller = SyncUnroller(env=cart_pole, policy=Policy(algorithm=algorithm), unroll_length=16)
    before = [p.detach().clone() for p in algorithm.parameters()]
    stats = algorithm.train_from_unroll(unroller.unroll())
    expected = {
        "loss",
        "pg_loss",
        "value_loss",
        "entropy",
        "clip_fraction",
        "mean_rho",
        "grad_norm",
        "vtrace_mean_rho",
        "vtrace_mean_abs_log_rho",
        "skipped",
    }
    assert expected <= set(stats)
    assert stats["skipped"] == 0.0
    assert all(torch.isfinite(torch.as_tensor(v)) for v in stats.values()), stats
    # A fresh rollout: the behaviour policy is the current one when V-trace is computed.
    assert float(stats["vtrace_mean_rho"]) == pytest.approx(1.0, abs=1e-5)
    assert float(stats["vtrace_mean_abs_log_rho"]) < 1e-5
    assert 0.0 <= float(stats["clip_fraction"]) <= 1.0
    after = list(algorithm.parameters())
    assert all(not torch.equal(b, a) for b, a in zip(before, after, strict=True))

    # The next trajectory's row 0 was chosen before the update: its rho is not 1.
    exp = unroller.unroll()
    log_rhos = _current_log_prob(algorithm, exp) - exp.rollout_info.log_prob
    assert log_rhos[0].abs().max() > 1e-4
    torch.testing.assert_close(log_rhos[1:], torch.zeros_like(log_rhos[1:]), atol=1e-5, rtol=0)
    stats = algorithm.train_from_unroll(exp)
    assert all(torch.isfinite(torch.as_tensor(v)) for v in stats.values()), stats
    assert float(stats["vtrace_mean_abs_log_rho"]) > 1e-6


LEARNING_BUDGET = 100_000  # env steps: TrainerConfig.num_env_steps of appo_cart_pole.gin


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_appo_cart_pole_reaches_475_within_100k_steps(tmp_path, seed):
    """The example config, trained in-process with synchronous collection (the async
    version is in test_learning_async.py), stopping at the first evaluation (every 10
    iterations, 2560 env steps) that reaches 475."""
    from alf.trainers import RLTrainer, TrainerConfig

    threads = torch.get_num_threads()
    alf_config.load_config(
        str(Path(EXAMPLES_DIR) / "appo_cart_pole.gin"),
        [
            f"TrainerConfig.random_seed={seed}",
            "TrainerConfig.eval_interval=10",
            "TrainerConfig.stop_at_eval_return=475",
            "TrainerConfig.progress_interval_s=1000000",
            "TrainerConfig.async_unroll=False",
        ],
    )
    config = TrainerConfig()
    assert config.num_env_steps == LEARNING_BUDGET
    trainer = RLTrainer(config=config, root_dir=str(tmp_path / "run"))
    try:
        assert isinstance(trainer.algorithm, AppoAlgorithm)
        result = trainer.train()
    finally:
        trainer.close()
        torch.set_num_threads(threads)
    with open(tmp_path / "run" / "progress.jsonl") as f:
        records = [json.loads(line) for line in f]
    returns = [
        (r["env_steps"], r["eval/average_return"]) for r in records if "eval/average_return" in r
    ]
    print(f"seed {seed}: evaluations (env steps, return) {returns}")
    assert result["reached_target"], returns
    assert result["env_steps"] <= LEARNING_BUDGET
    assert result["eval_average_return"] >= 475
