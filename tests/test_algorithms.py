"""Tests of the actor-critic family: step hooks, preprocessing, losses, schedules, updates."""

import functools

import numpy as np
import pytest
import torch

from alf import nest
from alf.algorithms import ActorCriticAlgorithm, PPOAlgorithm
from alf.algorithms.actor_critic import ActorCriticRolloutInfo, ActorCriticTrainInfo
from alf.algorithms.policy import Policy
from alf.data_structures import AlgStep, LossInfo, StepType, TimeStep
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.tensor_specs import BoundedTensorSpec
from alf.unrollers import SyncUnroller
from alf.utils.schedules import LinearSchedule
from alf.utils.value_ops import generalized_advantage_estimation

OBS = BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 1)
BOX = BoundedTensorSpec((2,), torch.float32, -np.ones(2), np.ones(2))

SMALL_ACTOR = functools.partial(ActorDistributionNetwork, fc_layer_params=(8,))
SMALL_VALUE = functools.partial(ValueNetwork, fc_layer_params=(8,))


class _RandomEnv:
    """A tiny deterministic batched environment (no gymnasium) for unrolling."""

    def __init__(self, batch_size=3, episode_length=4):
        self.batch_size = batch_size
        self._length = episode_length
        self._t = torch.zeros(batch_size, dtype=torch.int64)
        self._gen = torch.Generator().manual_seed(0)

    def observation_spec(self):
        return OBS

    def action_spec(self):
        return DISCRETE

    def _time_step(self, step_type, reward, discount, prev_action):
        return TimeStep(
            step_type=step_type.to(torch.int32),
            reward=reward,
            discount=discount,
            observation=torch.rand(self.batch_size, 4, generator=self._gen) * 2 - 1,
            prev_action=prev_action,
            env_id=torch.arange(self.batch_size),
        )

    def reset(self):
        self._t.zero_()
        n = self.batch_size
        return self._time_step(
            torch.full((n,), StepType.FIRST),
            torch.zeros(n),
            torch.ones(n),
            torch.zeros(n, dtype=torch.int64),
        )

    def step(self, action):
        was_last = self._t >= self._length
        self._t = torch.where(was_last, torch.zeros_like(self._t), self._t + 1)
        last = self._t >= self._length
        step_type = torch.where(
            was_last,
            torch.full_like(self._t, StepType.FIRST),
            torch.where(
                last,
                torch.full_like(self._t, StepType.LAST),
                torch.full_like(self._t, StepType.MID),
            ),
        )
        reward = torch.where(was_last, 0.0, action.float() + 1.0)
        discount = torch.where(last, 0.0, 1.0)
        prev_action = torch.where(was_last, torch.zeros_like(action), action)
        return self._time_step(step_type, reward, discount, prev_action)

    def close(self):
        pass


def _make(cls=PPOAlgorithm, action_spec=DISCRETE, **kwargs):
    torch.manual_seed(0)
    return cls(
        observation_spec=OBS,
        action_spec=action_spec,
        actor_network_ctor=SMALL_ACTOR,
        value_network_ctor=SMALL_VALUE,
        **kwargs,
    )


def _experience(algorithm, unroll_length=5, batch_size=3):
    unroller = SyncUnroller(
        env=_RandomEnv(batch_size), policy=Policy(algorithm=algorithm), unroll_length=unroll_length
    )
    return unroller.unroll()


@pytest.mark.parametrize("cls", [ActorCriticAlgorithm, PPOAlgorithm])
def test_rollout_and_predict_step_shapes(cls):
    algorithm = _make(cls)
    ts = _RandomEnv(3).reset()
    step = algorithm.rollout_step(ts, ())
    assert isinstance(step, AlgStep)
    assert step.output.shape == (3,) and step.output.dtype == torch.int64
    assert step.state == ()
    assert isinstance(step.info, ActorCriticRolloutInfo)
    assert step.info.log_prob.shape == (3,) and step.info.value.shape == (3,)
    dist = algorithm.actor_network(ts.observation)
    assert torch.allclose(step.info.log_prob, dist.log_prob(step.output))
    assert torch.allclose(step.info.value, algorithm.value_network(ts.observation))

    predict = algorithm.predict_step(ts, ())
    assert predict.output.shape == (3,)
    assert torch.equal(predict.output, dist.logits.argmax(-1))
    assert torch.equal(algorithm.predict_step(ts, ()).output, predict.output)


def test_continuous_rollout_and_predict_step():
    algorithm = _make(action_spec=BOX)
    ts = _RandomEnv(3).reset()
    step = algorithm.rollout_step(ts, ())
    assert step.output.shape == (3, 2)
    assert step.info.log_prob.shape == (3,)
    predict = algorithm.predict_step(ts, ())
    assert torch.allclose(predict.output, algorithm.actor_network(ts.observation).mean)


def test_preprocess_experience_returns_time_major_t_by_b():
    algorithm = _make(gamma=0.9, gae_lambda=0.7, reward_scale=2.0)
    exp = _experience(algorithm, unroll_length=5, batch_size=3)
    assert exp.step_type.shape == (6, 3)
    out = algorithm.preprocess_experience(exp)
    for leaf in nest.flatten(out):
        assert leaf.shape[:2] == (5, 3)
    info = out.rollout_info
    assert torch.equal(out.observation, exp.observation[:-1])
    assert torch.equal(info.log_prob, exp.rollout_info.log_prob[:-1])
    adv, ret = generalized_advantage_estimation(
        exp.reward * 2.0, exp.rollout_info.value, exp.step_type, exp.discount, 0.9, 0.7
    )
    assert torch.allclose(info.advantage, adv)
    assert torch.allclose(info.returns, ret)
    assert (exp.step_type[:-1] == StepType.LAST).any()  # episodes end inside the unroll


def test_train_step_and_calc_loss_shapes():
    algorithm = _make()
    exp = algorithm.preprocess_experience(_experience(algorithm))
    flat = nest.map_structure(lambda x: x.reshape(-1, *x.shape[2:]), exp)
    step = algorithm.train_step(flat, (), flat.rollout_info)
    info = step.info
    assert isinstance(info, ActorCriticTrainInfo)
    assert info.log_prob.shape == info.entropy.shape == info.value.shape == (15,)
    assert info.rollout is flat.rollout_info
    assert info.log_prob.requires_grad and info.value.requires_grad
    # Same parameters as during the rollout: the ratios are exactly 1.
    assert torch.allclose(info.log_prob, flat.rollout_info.log_prob, atol=1e-6)
    loss_info = algorithm.calc_loss(info)
    assert isinstance(loss_info, LossInfo)
    assert loss_info.loss.shape == ()
    assert set(loss_info.extra) == {"pg_loss", "value_loss", "entropy", "clip_fraction"}
    assert loss_info.extra["clip_fraction"].item() == 0.0
    # Off the summary iterations: the same loss, without the statistics only summaries use.
    algorithm.record_statistics = False
    lean = algorithm.calc_loss(info)
    assert set(lean.extra) == {"pg_loss", "value_loss"}
    assert torch.equal(lean.loss, loss_info.loss)
    loss_info.loss.backward()
    assert algorithm.actor_network.logits.weight.grad is not None


def _tiny_info():
    """A hand-made mini-batch of 3 steps."""
    rollout = ActorCriticRolloutInfo(
        log_prob=torch.tensor([-0.5, -1.0, -0.2]),
        value=torch.tensor([0.4, 0.0, 1.0]),
        advantage=torch.tensor([1.0, -2.0, 0.5]),
        returns=torch.tensor([1.0, -1.0, 2.0]),
    )
    return ActorCriticTrainInfo(
        log_prob=torch.tensor([-0.2, -1.5, -0.2]),  # ratios e^0.3, e^-0.5, 1
        entropy=torch.tensor([0.6, 0.4, 0.5]),
        value=torch.tensor([0.5, 0.5, 1.0]),
        rollout=rollout,
    )


def test_ppo_loss_equals_hand_computation():
    algorithm = _make(clip=0.2, normalize_advantages=False, value_loss_coef=0.5, entropy_coef=0.01)
    loss_info = algorithm.calc_loss(_tiny_info())
    r0, r1, r2 = np.exp(0.3), np.exp(-0.5), 1.0
    # step 0: A=1 > 0, ratio 1.35 clipped to 1.2 -> -1.2
    # step 1: A=-2 < 0, ratio 0.61 clipped to 0.8 -> -min(-1.21, -1.6) = 1.6
    # step 2: ratio 1 -> -0.5
    pg = (-min(r0 * 1.0, 1.2 * 1.0) - min(r1 * -2.0, 0.8 * -2.0) - r2 * 0.5) / 3
    assert pg == pytest.approx((-1.2 + 1.6 - 0.5) / 3)
    # value loss: mean squared error to the returns (SB3's convention)
    value = ((0.5 - 1.0) ** 2 + (0.5 + 1.0) ** 2 + (1.0 - 2.0) ** 2) / 3
    entropy = (0.6 + 0.4 + 0.5) / 3
    assert loss_info.extra["pg_loss"].item() == pytest.approx(pg, rel=1e-5)
    assert loss_info.extra["value_loss"].item() == pytest.approx(value, rel=1e-5)
    assert loss_info.extra["entropy"].item() == pytest.approx(entropy, rel=1e-5)
    assert loss_info.loss.item() == pytest.approx(pg + 0.5 * value - 0.01 * entropy, rel=1e-5)
    assert loss_info.extra["clip_fraction"].item() == pytest.approx(2 / 3)


def test_ppo_loss_with_normalized_advantages_and_value_clip():
    algorithm = _make(clip=0.2, normalize_advantages=True, value_clip=0.2, entropy_coef=0.0)
    loss_info = algorithm.calc_loss(_tiny_info())
    adv = np.array([1.0, -2.0, 0.5])
    adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    ratios = np.exp([0.3, -0.5, 0.0])
    pg = np.mean(-np.minimum(ratios * adv, np.clip(ratios, 0.8, 1.2) * adv))
    old, new, ret = np.array([0.4, 0.0, 1.0]), np.array([0.5, 0.5, 1.0]), np.array([1.0, -1.0, 2.0])
    clipped = old + np.clip(new - old, -0.2, 0.2)  # 0.5, 0.2, 1.0
    value = np.mean(np.maximum((new - ret) ** 2, (clipped - ret) ** 2))
    assert loss_info.extra["pg_loss"].item() == pytest.approx(pg, rel=1e-5)
    assert loss_info.extra["value_loss"].item() == pytest.approx(value, rel=1e-5)
    assert loss_info.loss.item() == pytest.approx(pg + 0.5 * value, rel=1e-5)


def test_a2c_loss_equals_hand_computation():
    algorithm = _make(ActorCriticAlgorithm, value_loss_coef=0.25, entropy_coef=0.1)
    loss_info = algorithm.calc_loss(_tiny_info())
    pg = (-(1.0 * -0.2) - (-2.0 * -1.5) - (0.5 * -0.2)) / 3
    value = (0.25 + 2.25 + 1.0) / 3
    entropy = 0.5
    assert loss_info.extra["pg_loss"].item() == pytest.approx(pg, rel=1e-5)
    assert loss_info.loss.item() == pytest.approx(pg + 0.25 * value - 0.1 * entropy, rel=1e-5)


def test_learning_rate_and_clip_follow_set_progress():
    algorithm = _make(
        learning_rate=LinearSchedule(start=1e-3), clip=LinearSchedule(start=0.2, end=0.1)
    )
    assert algorithm.learning_rate == pytest.approx(1e-3)
    assert algorithm.clip == pytest.approx(0.2)
    algorithm.set_progress(0.5)
    assert algorithm.learning_rate == pytest.approx(5e-4)
    assert all(g["lr"] == pytest.approx(5e-4) for g in algorithm.optimizer.param_groups)
    assert algorithm.clip == pytest.approx(0.15)
    algorithm.set_progress(1.0)
    assert algorithm.learning_rate == pytest.approx(0.0)
    assert algorithm.clip == pytest.approx(0.1)


def test_constant_learning_rate():
    algorithm = _make(ActorCriticAlgorithm, learning_rate=0.01)
    algorithm.set_progress(0.7)
    assert algorithm.learning_rate == pytest.approx(0.01)


def _params(algorithm):
    return [p.detach().clone() for p in algorithm.parameters()]


def test_update_with_gradient_changes_parameters():
    algorithm = _make()
    before = _params(algorithm)
    loss = sum((p**2).sum() for p in algorithm.parameters())
    stats = algorithm.update_with_gradient(LossInfo(loss=loss))
    assert set(stats) == {"grad_norm", "skipped"} and stats["grad_norm"] > 0
    assert float(stats["skipped"]) == 0.0
    assert algorithm.num_skipped_updates == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(algorithm), strict=True))


def test_max_grad_norm_clips_the_global_gradient():
    algorithm = _make(optimizer_ctor=torch.optim.SGD, learning_rate=1.0, max_grad_norm=0.5)
    before = _params(algorithm)
    loss = sum((p - 3.0).pow(2).sum() for p in algorithm.parameters())
    stats = algorithm.update_with_gradient(LossInfo(loss=loss))
    assert float(stats["grad_norm"]) > 0.5  # the norm before clipping
    step = torch.cat([(a - b).reshape(-1) for a, b in zip(_params(algorithm), before, strict=True)])
    assert step.norm().item() == pytest.approx(0.5, rel=1e-3)


@pytest.mark.parametrize("kind", ["nan_loss", "inf_loss", "nan_gradient"])
def test_update_with_gradient_skips_non_finite(kind):
    algorithm = _make()
    before = _params(algorithm)
    params = list(algorithm.parameters())
    if kind == "nan_loss":
        loss = params[0].sum() * float("nan")
    elif kind == "inf_loss":
        loss = params[0].sum() + float("inf")
    else:  # a finite loss whose gradient is NaN: d/dx sqrt(x) at 0, times 0
        loss = (params[0] * 0).abs().sqrt().sum()
        assert torch.isfinite(loss)
    stats = algorithm.update_with_gradient(LossInfo(loss=loss))
    assert float(stats["skipped"]) == 1.0
    assert algorithm.num_skipped_updates == 1
    for a, b in zip(before, _params(algorithm), strict=True):
        assert torch.equal(a, b)
    # A later good update still works.
    good = sum((p**2).sum() for p in algorithm.parameters())
    assert float(algorithm.update_with_gradient(LossInfo(loss=good))["skipped"]) == 0.0
    assert algorithm.num_skipped_updates == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(algorithm), strict=True))


def test_train_from_unroll_runs_epochs_of_mini_batches():
    algorithm = _make(num_epochs=2, mini_batch_size=5, learning_rate=1e-2)
    before = _params(algorithm)
    exp = _experience(algorithm, unroll_length=5, batch_size=3)
    # 15 steps, of which the 3 LAST ones (row 4: 4-step episodes) start no transition.
    assert int((exp.step_type[:-1] == StepType.LAST).sum()) == 3
    stats = algorithm.train_from_unroll(exp)
    expected = {"loss", "pg_loss", "value_loss", "entropy", "clip_fraction", "grad_norm"}
    assert expected <= set(stats)
    assert stats["skipped"] == 0.0
    assert all(np.isfinite(float(v)) for v in stats.values())
    state = algorithm.optimizer.state[algorithm.actor_network.logits.weight]
    # 12 valid steps, mini-batch 5: every step is used, in ceil(12 / 5) = 3 batches of 4.
    assert int(state["step"]) == 6  # 2 epochs x 3 mini-batches
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(algorithm), strict=True))


def test_zero_state_and_state_specs_are_empty():
    algorithm = _make()
    assert algorithm.predict_state_spec == ()
    assert algorithm.rollout_state_spec == ()
    assert algorithm.zero_state((), 4) == ()


def test_num_epochs_must_be_positive():
    with pytest.raises(ValueError):
        _make(num_epochs=0)


def test_train_from_unroll_with_no_valid_step_does_not_crash():
    algorithm = _make(ActorCriticAlgorithm)
    unroller = SyncUnroller(
        env=_RandomEnv(3, episode_length=1), policy=Policy(algorithm=algorithm), unroll_length=1
    )
    first = unroller.unroll()  # rows FIRST, LAST
    assert algorithm.train_from_unroll(first)["skipped"] == 0.0
    second = unroller.unroll()  # rows LAST, FIRST: no transition to learn from
    assert (second.step_type[0] == StepType.LAST).all()
    algorithm.train_from_unroll(second)
