"""Intrinsic rewards (RND, ICM) as components of PPO, APPO and SAC: the normalisers, the
bonus, the models' losses, the intrinsic value head and its non-episodic targets,
checkpoints, the async learner and bad input (issue 35)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers_cli import CONF, assert_clean_user_error, run_cli, train_cmd

from alf.algorithms import AppoAlgorithm, PPOAlgorithm, SacAlgorithm
from alf.algorithms.intrinsic import (
    ICMReward,
    IntrinsicRewardError,
    IntrinsicTargets,
    ReturnNormalizer,
    RNDReward,
    RunningMeanStd,
)
from alf.data_structures import BatchInfo, Experience, StepType
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.tensor_specs import BoundedTensorSpec, TensorSpec
from alf.utils.schedules import LinearSchedule
from alf.utils.value_ops import generalized_advantage_estimation

OBS = TensorSpec((6,))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
BOX = BoundedTensorSpec((2,), torch.float32, -np.ones(2), np.ones(2))
SMALL_ACTOR = functools.partial(ActorDistributionNetwork, fc_layer_params=(8,))
SMALL_VALUE = functools.partial(ValueNetwork, fc_layer_params=(8,))
SMALL_RND = functools.partial(RNDReward, fc_layer_params=(16,), output_size=8)
TRAIN = "alf.bin.train"


def _trajectory(
    length: int = 6, batch: int = 3, last_at: int | None = 2, obs_dim: int = 6, seed: int = 0
) -> Experience:
    """A ``[length, batch]`` trajectory whose column 0 ends an episode at row ``last_at``."""
    gen = torch.Generator().manual_seed(seed)
    step_type = torch.full((length, batch), StepType.MID, dtype=torch.int32)
    step_type[0] = StepType.FIRST
    discount = torch.ones(length, batch)
    if last_at is not None:
        step_type[last_at, 0] = StepType.LAST
        step_type[last_at + 1, 0] = StepType.FIRST
        discount[last_at, 0] = 0.0
    return Experience(
        step_type=step_type,
        reward=torch.rand(length, batch, generator=gen),
        discount=discount,
        observation=torch.randn(length, batch, obs_dim, generator=gen),
        prev_action=torch.zeros(length, batch, dtype=torch.int64),
        action=torch.randint(0, 3, (length, batch), generator=gen),
        rollout_info=(),
        env_id=torch.arange(batch).expand(length, batch),
    )


def _ppo(cls: type = PPOAlgorithm, reward_ctor: Any = SMALL_RND, **kwargs: Any) -> Any:
    torch.manual_seed(0)
    return cls(
        observation_spec=OBS,
        action_spec=DISCRETE,
        actor_network_ctor=SMALL_ACTOR,
        value_network_ctor=SMALL_VALUE,
        intrinsic_reward_ctor=reward_ctor,
        intrinsic_value_network_ctor=SMALL_VALUE,
        **kwargs,
    )


def _rolled_out(algorithm: Any, exp: Experience) -> Experience:
    """``exp`` with the rollout info ``algorithm.rollout_step`` gives for its rows."""
    from alf.algorithms.actor_critic import ActorCriticRolloutInfo

    dist, value, _ = algorithm.evaluate(exp.observation.reshape(-1, 6), ())
    outer = exp.step_type.shape
    info = ActorCriticRolloutInfo(
        log_prob=dist.log_prob(exp.action.reshape(-1)).reshape(outer).detach(),
        value=value.reshape(outer).detach(),
    )
    return exp._replace(rollout_info=info)


def _extrinsic_advantages(algorithm: Any, exp: Experience, *, td_lambda: float) -> torch.Tensor:
    """The GAE advantages of ``exp``'s own rewards and stored values."""
    advantages, _ = generalized_advantage_estimation(
        rewards=exp.reward,
        values=exp.rollout_info.value,
        step_types=exp.step_type,
        discounts=exp.discount,
        gamma=algorithm.gamma,
        td_lambda=td_lambda,
    )
    return advantages


# ------------------------------------------------------------------- normalisers
def test_running_mean_std_matches_numpy_over_batches() -> None:
    stats = RunningMeanStd(shape=(3,), epsilon=1e-12)
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randn(n, 3, generator=gen) * 3 + 2 for n in (5, 17, 1, 40)]
    for b in batches:
        stats.update(b)
    whole = torch.cat(batches).double().numpy()
    np.testing.assert_allclose(stats.mean.numpy(), whole.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats.var.numpy(), whole.var(0), rtol=1e-6)
    clipped = stats.normalize(torch.full((1, 3), 1e6), clip=5.0)
    assert torch.equal(clipped, torch.full((1, 3), 5.0))


def test_return_normalizer_divides_by_the_std_of_discounted_sums_carried_on() -> None:
    norm = ReturnNormalizer(gamma=0.5)
    rewards = torch.ones(4, 2)
    out = norm(rewards)
    sums = torch.tensor([1.0, 1.5, 1.75, 1.875]).repeat_interleave(2)
    expected = RunningMeanStd()
    expected.update(sums)
    torch.testing.assert_close(out, rewards / expected.std.float())
    norm(torch.zeros(1, 2))  # the sums carry on: 0.9375, not 0
    assert torch.allclose(norm._carried, torch.full((2,), 0.9375))


# ------------------------------------------------------------------------ the bonus
def test_rnd_bonus_falls_on_repeated_observations() -> None:
    torch.manual_seed(0)
    rnd = RNDReward(observation_spec=OBS, action_spec=DISCRETE)
    seen = torch.randn(32, 6)
    rnd.observe(torch.randn(512, 6))
    optimizer = torch.optim.Adam(rnd.parameters(), lr=1e-3)
    before = rnd.bonus(None, None, seen).mean()
    for _ in range(200):
        loss = rnd.losses(seen, None, ())["rnd_loss"].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = rnd.bonus(None, None, seen).mean()
    novel = rnd.bonus(None, None, torch.randn(32, 6) * 2).mean()
    assert after < 0.1 * before and novel > 5 * after
    assert all(not p.requires_grad for p in rnd.target_network.parameters())


def test_rnd_update_proportion_trains_on_a_share_of_the_rows() -> None:
    torch.manual_seed(0)
    rnd = SMALL_RND(observation_spec=OBS, action_spec=DISCRETE, update_proportion=0.25)
    losses = rnd.losses(torch.randn(16, 6), None, ())["rnd_loss"]
    assert losses.shape == (16,) and int((losses != 0).sum()) == 4


@pytest.mark.parametrize("action_spec", [DISCRETE, BOX], ids=["discrete", "box"])
def test_icm_inverse_and_forward_losses_decrease(action_spec: BoundedTensorSpec) -> None:
    torch.manual_seed(0)
    icm = ICMReward(observation_spec=OBS, action_spec=action_spec, feature_size=16)
    n = 256
    obs = torch.randn(n, 6)
    if action_spec.is_discrete:
        action = torch.randint(0, 3, (n,))
        effect = torch.nn.functional.one_hot(action, 6).float()[:, :6]
    else:
        action = torch.rand(n, 2) * 2 - 1
        effect = torch.cat([action, torch.zeros(n, 4)], -1)
    next_obs = obs + effect  # the action moves the state
    optimizer = torch.optim.Adam(icm.parameters(), lr=1e-3)
    first = None
    for _ in range(150):
        losses = icm.losses(obs, action, next_obs)
        total, extra = icm.weighted_loss(losses)
        first = first or {k: float(v) for k, v in extra.items()}
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
    last = {k: float(v) for k, v in icm.weighted_loss(icm.losses(obs, action, next_obs))[1].items()}
    assert last["intrinsic/icm_inverse_loss"] < 0.5 * first["intrinsic/icm_inverse_loss"]
    assert last["intrinsic/icm_forward_loss"] < first["intrinsic/icm_forward_loss"]
    assert icm.bonus(obs, action, next_obs).shape == (n,)


# ------------------------------------------------------------ PPO's intrinsic head
def test_ppo_intrinsic_targets_are_non_episodic_with_their_own_discount() -> None:
    algorithm = _ppo(gae_lambda=0.9)
    exp = _rolled_out(algorithm, _trajectory())
    processed = algorithm.preprocess_experience(exp)
    info = processed.rollout_info
    targets = info.intrinsic
    assert isinstance(targets, IntrinsicTargets)
    assert targets.value.shape == targets.returns.shape == info.advantage.shape == (5, 3)
    reward = algorithm.intrinsic.reward
    # Recompute: the bonus normalised by the same std, GAE over all-MID steps.
    raw = reward.bonus(
        exp.observation[:-1].reshape(-1, 6), None, exp.observation[1:].reshape(-1, 6)
    ).reshape(5, 3)
    raw[2, 0] = 0.0  # the LAST row starts no transition
    bonus = raw / reward.reward_normalizer.returns.std.float()
    values = algorithm.intrinsic.values(exp.observation)
    int_adv, int_ret = generalized_advantage_estimation(
        rewards=torch.cat([torch.zeros(1, 3), bonus]),
        values=values,
        step_types=torch.full((6, 3), StepType.MID),
        discounts=torch.ones(6, 3),
        gamma=reward.gamma,
        td_lambda=0.9,
    )
    torch.testing.assert_close(targets.returns, int_ret)
    assert targets.returns[2, 0] != targets.value[2, 0]  # the chain runs across LAST
    ext_adv = _extrinsic_advantages(algorithm, exp, td_lambda=0.9)
    torch.testing.assert_close(info.advantage, 2.0 * ext_adv + 1.0 * int_adv)
    stats = algorithm.trajectory_statistics(processed, torch.ones(5, 3, dtype=torch.bool))
    assert {"intrinsic/bonus_mean", "intrinsic/bonus_scale", "explained_variance"} <= set(stats)


@pytest.mark.parametrize("cls", [PPOAlgorithm, AppoAlgorithm], ids=["ppo", "appo"])
@pytest.mark.parametrize("reward_ctor", [SMALL_RND, ICMReward], ids=["rnd", "icm"])
def test_training_reports_and_trains_the_intrinsic_parts(cls: type, reward_ctor: Any) -> None:
    algorithm = _ppo(cls, reward_ctor, mini_batch_size=8)
    exp = _rolled_out(algorithm, _trajectory(length=9))
    reward_params = [p.detach().clone() for p in algorithm.intrinsic.reward.parameters()]
    value_params = [p.detach().clone() for p in algorithm.intrinsic.value_network.parameters()]
    stats = algorithm.train_from_unroll(exp)
    names = {"intrinsic/value_loss", "intrinsic/bonus_mean", "intrinsic/bonus_raw_mean"}
    names |= {f"intrinsic/{n}" for n in algorithm.intrinsic.reward.loss_weights}
    assert names <= set(stats), sorted(stats)
    assert all(torch.isfinite(torch.as_tensor(stats[n])) for n in names)
    moved = [
        not torch.equal(p, q)
        for p, q, trainable in zip(
            algorithm.intrinsic.reward.parameters(),
            reward_params,
            [p.requires_grad for p in algorithm.intrinsic.reward.parameters()],
            strict=True,
        )
        if trainable
    ]
    assert moved and all(moved)
    assert all(
        not torch.equal(p, q)
        for p, q in zip(algorithm.intrinsic.value_network.parameters(), value_params, strict=True)
    )


def test_recurrent_ppo_trains_the_intrinsic_parts_along_sequences() -> None:
    torch.manual_seed(0)
    algorithm = PPOAlgorithm(
        observation_spec=OBS,
        action_spec=DISCRETE,
        actor_network_ctor=functools.partial(
            ActorDistributionNetwork, fc_layer_params=(8,), lstm_hidden_size=4
        ),
        value_network_ctor=SMALL_VALUE,
        intrinsic_reward_ctor=ICMReward,
        intrinsic_value_network_ctor=SMALL_VALUE,
        mini_batch_size=8,
        mini_batch_length=4,
    )
    exp = _trajectory(length=9)
    state = algorithm.zero_state(algorithm.rollout_state_spec, 3)
    rows = []
    for t in range(9):
        row = exp._replace(rollout_info=())
        row = type(row)(*[x[t] if isinstance(x, torch.Tensor) else x for x in row])
        step = algorithm.rollout_step(row, state)
        rows.append((step.info, state))
        state = step.state
    from alf import nest

    exp = exp._replace(
        rollout_info=nest.stack([r[0] for r in rows]), state=nest.stack([r[1] for r in rows])
    )
    stats = algorithm.train_from_unroll(exp)
    assert "intrinsic/icm_forward_loss" in stats and "intrinsic/value_loss" in stats


def test_checkpoint_round_trip_keeps_networks_and_statistics() -> None:
    algorithm = _ppo()
    algorithm.train_from_unroll(_rolled_out(algorithm, _trajectory()))
    state = algorithm.checkpoint_state()
    keys = set(state["module"])
    assert {
        "intrinsic.reward.observation_normalizer.mean",
        "intrinsic.reward.reward_normalizer.returns.var",
    } <= keys
    assert any(k.startswith("intrinsic.reward.target_network.") for k in keys)
    assert any(k.startswith("intrinsic.value_network.") for k in keys)
    torch.manual_seed(123)  # a fresh algorithm with other random networks
    restored = PPOAlgorithm(
        observation_spec=OBS,
        action_spec=DISCRETE,
        actor_network_ctor=SMALL_ACTOR,
        value_network_ctor=SMALL_VALUE,
        intrinsic_reward_ctor=SMALL_RND,
        intrinsic_value_network_ctor=SMALL_VALUE,
    )
    restored.load_checkpoint_state(state)
    obs = torch.randn(7, 6)
    torch.testing.assert_close(
        restored.intrinsic.reward.bonus(None, None, obs),
        algorithm.intrinsic.reward.bonus(None, None, obs),
    )


# ----------------------------------------------------------------------------- SAC
def test_sac_adds_the_bonus_to_sampled_rewards_and_trains_the_predictor() -> None:
    torch.manual_seed(0)
    sac = SacAlgorithm(
        observation_spec=OBS,
        action_spec=BOX,
        intrinsic_reward_ctor=functools.partial(SMALL_RND, int_coef=0.5),
    )
    exp = _trajectory(length=2, batch=8, last_at=None)._replace(
        action=torch.rand(2, 8, 2) * 2 - 1,
        batch_info=BatchInfo(
            env_ids=torch.zeros(8, dtype=torch.int64),
            positions=torch.zeros(8, dtype=torch.int64),
            importance_weights=torch.ones(8),
        ),
    )
    augmented, (losses, stats) = sac._with_intrinsic_reward(exp)
    assert torch.equal(augmented.reward[0], exp.reward[0])
    assert (augmented.reward[1] > exp.reward[1]).all()
    before = [p.detach().clone() for p in sac.intrinsic.predictor_network.parameters()]
    loss_info = sac.calc_loss(sac.train_step(exp, (), ()).info)
    assert {"intrinsic/rnd_loss", "intrinsic/bonus_mean"} <= set(loss_info.extra)
    sac.update_with_gradient(loss_info)
    after = list(sac.intrinsic.predictor_network.parameters())
    assert all(not torch.equal(p, q) for p, q in zip(before, after, strict=True))


def test_int_coef_follows_a_schedule_of_training_progress() -> None:
    fading = functools.partial(SMALL_RND, int_coef=LinearSchedule(start=1.0, end=0.0))
    algorithm = _ppo(reward_ctor=fading, gae_lambda=0.9)
    exp = _rolled_out(algorithm, _trajectory())
    reward = algorithm.intrinsic.reward
    assert reward.int_coef == 1.0
    algorithm.set_progress(0.75)
    assert reward.int_coef == pytest.approx(0.25)
    algorithm.set_progress(1.0)
    # Curiosity faded out: the advantage is the extrinsic one alone (times ext_coef).
    info = algorithm.preprocess_experience(exp).rollout_info
    ext_adv = _extrinsic_advantages(algorithm, exp, td_lambda=0.9)
    torch.testing.assert_close(info.advantage, 2.0 * ext_adv)
    sac = SacAlgorithm(observation_spec=OBS, action_spec=BOX, intrinsic_reward_ctor=fading)
    sac.set_progress(0.5)
    assert sac.intrinsic.int_coef == pytest.approx(0.5)


# ------------------------------------------------------------------------ bad input
def test_a_dict_observation_needs_a_key() -> None:
    spec = {"image": TensorSpec((7, 7, 3), torch.uint8), "direction": DISCRETE}
    with pytest.raises(IntrinsicRewardError, match=r"RNDReward cannot encode the observation"):
        RNDReward(observation_spec=spec, action_spec=DISCRETE)
    with pytest.raises(IntrinsicRewardError, match=r"observation_key='mission'.*'direction'"):
        ICMReward(observation_spec=spec, action_spec=DISCRETE, observation_key="mission")
    with pytest.raises(IntrinsicRewardError, match=r"needs a Dict observation"):
        RNDReward(observation_spec=OBS, action_spec=DISCRETE, observation_key="image")
    rnd = RNDReward(observation_spec=spec, action_spec=DISCRETE, observation_key="image")
    assert rnd.input_spec.shape == (7, 7, 3)


def test_a_negative_int_coef_is_refused() -> None:
    with pytest.raises(IntrinsicRewardError, match="RNDReward.int_coef must be >= 0"):
        RNDReward(observation_spec=OBS, action_spec=DISCRETE, int_coef=-1.0)


def test_icm_refuses_actions_it_cannot_predict_and_errors_are_user_errors() -> None:
    multi = BoundedTensorSpec((2,), torch.int64, 0, 3)
    with pytest.raises(IntrinsicRewardError, match=r"MultiDiscrete.*RNDReward") as err:
        ICMReward(observation_spec=OBS, action_spec=multi)
    assert err.value.exit_code == 2
    with pytest.raises(IntrinsicRewardError, match=r"conv_layer_params needs a \[C, H, W\]"):
        RNDReward(observation_spec=OBS, action_spec=DISCRETE, conv_layer_params=((8, 3, 1),))
    with pytest.raises(IntrinsicRewardError, match=r"encoder_ctor"):
        SacAlgorithm(
            observation_spec=OBS,
            action_spec=BOX,
            encoder_ctor=functools.partial(
                __import__("alf.networks", fromlist=["EncodingNetwork"]).EncodingNetwork,
                lstm_hidden_size=4,
            ),
            intrinsic_reward_ctor=RNDReward,
        )


def test_rnd_on_an_observation_it_cannot_encode_is_one_line_with_status_2(tmp_path: Path) -> None:
    pytest.importorskip("minigrid")
    result = run_cli(
        train_cmd(
            tmp_path / "run",
            "create_environment.env_name='MiniGrid-Empty-5x5-v0'",
            "suite_gym.load.wrappers=[@DropObservationKeys]",
            "DropObservationKeys.keys=['mission']",
            "PPOAlgorithm.intrinsic_reward_ctor=@RNDReward",
            conf=CONF,
        )
    )
    assert result.returncode == 2
    assert_clean_user_error(result, TRAIN, "RNDReward cannot encode", "observation_key")


# ------------------------------------------------------------------ the async learner
def test_the_async_learner_trains_the_predictor(tmp_path: Path) -> None:
    root = tmp_path / "run"
    result = run_cli(
        train_cmd(
            root,
            "TrainerConfig.async_unroll=True",
            "AsyncUnroller.num_actors=1",
            "TrainerConfig.num_iterations=3",
            "TrainerConfig.summary_interval=1",
            "TrainerConfig.eval_interval=0",
            "TrainerConfig.checkpoint_interval=1",
            "TrainerConfig.num_checkpoints=5",
            "AppoAlgorithm.intrinsic_reward_ctor=@RNDReward",
            conf=CONF.parent / "appo_cart_pole.gin",
        ),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in (root / "progress.jsonl").read_text().splitlines()]
    train = [line for line in lines if "train/intrinsic/rnd_loss" in line]
    assert len(train) == 3
    first, last = (
        torch.load(root / "checkpoints" / f"ckpt-{i}.pt", weights_only=True)["algorithm"]["module"]
        for i in (1, 3)
    )
    name = "intrinsic.reward.predictor_network.mlp.0.weight"
    assert not torch.equal(first[name], last[name])
    target = "intrinsic.reward.target_network.mlp.0.weight"
    assert torch.equal(first[target], last[target])


def test_async_actors_are_not_sent_the_learner_only_intrinsic_state() -> None:
    import threading

    from alf.algorithms.appo import AppoAlgorithm
    from alf.unrollers.shared_memory import SharedParameters

    algorithm = _ppo(AppoAlgorithm)
    assert algorithm.learner_only_state == ("intrinsic.",)
    shared = SharedParameters(
        module=algorithm, lock=threading.Lock(), skip_prefixes=algorithm.learner_only_state
    )
    assert shared.tensors and not any(name.startswith("intrinsic.") for name in shared.tensors)
    assert any(name.startswith("intrinsic.") for name in algorithm.state_dict())
    actor_copy = _ppo(AppoAlgorithm)
    shared.publish(algorithm)
    assert shared.load_into(actor_copy) == 1
    for name in shared.tensors:
        torch.testing.assert_close(actor_copy.state_dict()[name], algorithm.state_dict()[name])
    assert _ppo(AppoAlgorithm, reward_ctor=None).learner_only_state == ()
