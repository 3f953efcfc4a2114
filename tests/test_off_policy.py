"""In-process tests of off-policy training through :class:`RLTrainer`: SAC (continuous and
discrete), DDPG (Gaussian and OU noise), TD3 and DQN with tiny networks and budgets;
fractional unroll lengths, initial random collection, n-step targets, prioritized replay,
NaN losses, and the settings that on-policy algorithms must refuse. Offline buffers and
resuming with the replay buffer are in ``test_off_policy_data.py``."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_off_policy import (  # noqa: F401 (_one_thread: an autouse fixture)
    PENDULUM_HIGH,
    PENDULUM_LOW,
    POLICY_ACTION,
    PPO_CONF,
    _assert_finite_stats,
    _clone_params,
    _constant_policy,
    _ddpg_params,
    _one_thread,
    _params,
    _record_unrolls,
    _record_updates,
    _sha256,
    _trainer,
)

from alf import nest
from alf.algorithms import DdpgAlgorithm
from alf.algorithms.off_policy_algorithm import valid_transitions
from alf.data_structures import Experience, StepType
from alf.networks import ActorNetwork, CriticNetwork
from alf.replay_buffers import ReplayBufferError
from alf.tensor_specs import BoundedTensorSpec
from alf.trainers.rl_trainer import TrainingDivergedError

# ------------------------------------------------------------------------------ 1
ALGORITHMS = {
    "sac_pendulum": ("SacAlgorithm", "Pendulum-v1", ()),
    "td3_pendulum": ("Td3Algorithm", "Pendulum-v1", ()),
    "ddpg_ou_pendulum": ("DdpgAlgorithm", "Pendulum-v1", ('DdpgAlgorithm.exploration_noise="ou"',)),
    "ddpg_gaussian_pendulum": (
        "DdpgAlgorithm",
        "Pendulum-v1",
        ('DdpgAlgorithm.exploration_noise="gaussian"',),
    ),
    "dqn_cart_pole": (
        "DqnAlgorithm",
        "CartPole-v1",
        ("DqnAlgorithm.target_update_period=10", "DqnAlgorithm.target_update_tau=1.0"),
    ),
    "sac_cart_pole": ("SacAlgorithm", "CartPole-v1", ()),
}


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_algorithm_trains_all_parameters_and_targets(tmp_path, name):
    alg, env, extra = ALGORITHMS[name]
    with _trainer(tmp_path / "run", _params(alg, env, *extra)) as trainer:
        algorithm = trainer.algorithm
        trained = {n for n, p in algorithm.named_parameters() if p.requires_grad}
        targets = {n for n in _clone_params(algorithm) if n.startswith("target_")}
        assert trained and targets and not trained & targets
        for target in targets:
            assert target.removeprefix("target_") in trained, target
        before = _clone_params(algorithm)
        log = _record_updates(trainer)

        # Every after_update: are the targets equal to the online networks?
        equal_after_update: list[bool] = []
        original_after_update = algorithm.after_update

        def after_update():
            original_after_update()
            params = dict(algorithm.named_parameters())
            equal_after_update.append(
                all(torch.equal(params[t], params[t.removeprefix("target_")]) for t in targets)
            )

        algorithm.after_update = after_update
        result = trainer.train()

    assert result["iteration"] == 300 and result["env_steps"] == 300
    _assert_finite_stats(log)
    # Training starts once the buffer holds initial_collect_steps (50) steps.
    assert len(log) == 300 - 48 and log[0]["stored"] == 50
    after = _clone_params(algorithm)
    for n in trained:
        assert not torch.equal(before[n], after[n]), f"{n} was not trained"
    for t in targets:
        assert not torch.equal(before[t], after[t]), f"target {t} never moved"
    num_updates = len(log)
    assert len(equal_after_update) == num_updates
    if alg == "DqnAlgorithm":
        # A hard copy every 10th update, and the online network moves on right after.
        for i, equal in enumerate(equal_after_update, start=1):
            assert equal == (i % 10 == 0), (i, equal)
    else:
        # Polyak averaging: the targets follow but never catch up.
        assert not any(equal_after_update)
        for t in targets:
            assert not torch.equal(after[t], after[t.removeprefix("target_")]), t


def test_polyak_update_is_a_lerp_with_tau(tmp_path):
    tau = 0.05
    params = _params("SacAlgorithm", "Pendulum-v1", f"SacAlgorithm.target_update_tau={tau}")
    with _trainer(tmp_path / "run", params) as trainer:
        algorithm = trainer.algorithm
        original_after_update = algorithm.after_update
        checked = []

        def after_update():
            params = dict(algorithm.named_parameters())
            names = [n for n in params if n.startswith("target_")]
            old = {n: params[n].detach().clone() for n in names}
            original_after_update()
            for n in names:
                online = params[n.removeprefix("target_")].detach()
                expected = old[n] + tau * (online - old[n])
                torch.testing.assert_close(params[n].detach(), expected)
            checked.append(len(names))

        algorithm.after_update = after_update
        trainer.config.num_iterations = 60
        trainer.train()
    assert checked and all(checked)


# ------------------------------------------------------------------------------ 2
@pytest.mark.parametrize(
    ("length", "iterations", "unroll_iterations", "steps_per_env"),
    [(0.25, 8, [3, 7], 2), (1.5, 4, [0, 1, 2, 3], 6)],
)
def test_fractional_unroll_length(tmp_path, length, iterations, unroll_iterations, steps_per_env):
    params = _params(
        "DdpgAlgorithm",
        "Pendulum-v1",
        f"TrainerConfig.unroll_length={length}",
        num_iterations=iterations,
        num_envs=2,
        initial_collect_steps=0,
    )
    with _trainer(tmp_path / "run", params) as trainer:
        updates = _record_updates(trainer)
        unrolls = _record_unrolls(trainer)
        result = trainer.train()
        algorithm = trainer.algorithm
        buffer = algorithm.replay_buffer
        assert result["iteration"] == iterations
        assert result["env_steps"] == trainer.env_steps == steps_per_env * 2
        assert [u["iteration"] for u in unrolls] == unroll_iterations
        assert sum(u["num_steps"] for u in unrolls) == steps_per_env
        # The buffer holds every time step once: the env steps plus the first (reset)
        # time step of each environment.
        assert buffer.num_steps().tolist() == [steps_per_env + 1] * 2
        assert buffer.total_size == trainer.env_steps + 2
        # Updates on every iteration from the first unroll on, one per iteration.
        first = unroll_iterations[0]
        assert [u["iteration"] for u in updates] == list(range(first, iterations))
        assert int(algorithm.num_updates) == iterations - first
        _assert_finite_stats(updates)


# ------------------------------------------------------------------------------ 3
INITIAL_COLLECT = 100


def _initial_collect_run(tmp_path: Path) -> tuple[torch.Tensor, list[dict], list[dict]]:
    params = _params(
        "DdpgAlgorithm",
        "Pendulum-v1",
        "DdpgAlgorithm.exploration_std=0.0",
        num_iterations=150,
        initial_collect_steps=INITIAL_COLLECT,
    )
    with _trainer(tmp_path / "run", params) as trainer:
        _constant_policy(trainer, POLICY_ACTION)
        updates = _record_updates(trainer)
        unrolls = _record_unrolls(trainer)
        trainer.train()
        actions = trainer.algorithm.replay_buffer.gather_all().action[:, 0, 0]
    return actions, updates, unrolls


def test_initial_collect_steps_random_then_policy(tmp_path):
    actions, updates, unrolls = _initial_collect_run(tmp_path)
    n = INITIAL_COLLECT
    assert actions.shape == (151,)  # the reset time step and 150 env steps
    # Action k of the buffer is the one taken at env step k: the first n are uniform.
    random = actions[:n]
    assert not bool((random == POLICY_ACTION).any())
    assert bool(((random >= PENDULUM_LOW) & (random <= PENDULUM_HIGH)).all())
    assert float(random.min()) < -1.5 and float(random.max()) > 1.5
    assert len(torch.unique(random)) == n
    # Spread over the range: each quarter of [-2, 2] gets some.
    quarters = torch.histc(random, bins=4, min=PENDULUM_LOW, max=PENDULUM_HIGH)
    assert bool((quarters >= 10).all()), quarters
    # Later steps follow the policy.
    assert bool((actions[n + 1 :] == POLICY_ACTION).all()), actions[n + 1 :]
    assert [u["random_actions"] for u in unrolls] == [i < n for i in range(150)]
    # No update before the buffer holds n steps; then one every iteration.
    assert updates and min(u["stored"] for u in updates) >= n
    assert updates[0]["stored"] == n
    first = updates[0]["iteration"]
    assert [u["iteration"] for u in updates] == list(range(first, 150))
    _assert_finite_stats(updates)


def test_initial_collect_steps_takes_exactly_n_random_actions(tmp_path):
    actions, _, _ = _initial_collect_run(tmp_path)
    assert float(actions[INITIAL_COLLECT]) == POLICY_ACTION


# ------------------------------------------------------------------------------ 4
def _reference_n_step_targets(algorithm, exp: Experience) -> torch.Tensor:
    """Double-DQN n-step targets computed step by step, one sequence at a time."""
    length, batch = exp.step_type.shape
    gamma = algorithm.gamma
    targets = torch.zeros(batch)
    with torch.no_grad():
        for b in range(batch):
            ret, scale = 0.0, 1.0
            for k in range(1, length):
                ret += scale * float(exp.reward[k, b])
                scale *= gamma * float(exp.discount[k, b])
                if int(exp.step_type[k, b]) == StepType.LAST or k == length - 1:
                    obs = exp.observation[k, b].unsqueeze(0)
                    best = int(algorithm.q_network(obs)[0, 0].argmax())
                    value = float(algorithm.target_q_network(obs)[0, 0, best])
                    targets[b] = ret + scale * value
                    break
    return targets


def test_dqn_n_step_targets(tmp_path):
    params = _params(
        "DqnAlgorithm",
        "CartPole-v1",
        "DqnAlgorithm.mini_batch_length=4",
        "DqnAlgorithm.target_update_period=20",
        num_iterations=300,
    )
    with _trainer(tmp_path / "run", params) as trainer:
        algorithm = trainer.algorithm
        shapes = []
        original_train_step = algorithm.train_step

        def train_step(exp, state, rollout_info):
            shapes.append(tuple(exp.step_type.shape))
            return original_train_step(exp, state, rollout_info)

        algorithm.train_step = train_step
        log = _record_updates(trainer)
        trainer.train()
        _assert_finite_stats(log)
        assert shapes and set(shapes) == {(4, 32)}
        # The target and online networks differ here (not right after a copy).
        assert not torch.equal(
            next(algorithm.q_network.parameters()), next(algorithm.target_q_network.parameters())
        )
        torch.manual_seed(1)
        algorithm.mini_batch_size = 400
        exp, _ = algorithm.sample_batch()
        target = algorithm._target(exp)
        reference = _reference_n_step_targets(algorithm, exp)
    valid = valid_transitions(exp).bool()
    assert target.shape == (400,)
    torch.testing.assert_close(target[valid], reference[valid], rtol=1e-5, atol=1e-5)
    # The sample covers the cases: an episode ending inside a sequence (no bootstrap
    # after a termination) and full 3-step returns.
    last_inside = (exp.step_type[1:] == StepType.LAST).any(0) & valid
    assert int(last_inside.sum()) > 0 and int((~last_inside & valid).sum()) > 0


# ------------------------------------------------------------------------------ 5
def test_prioritized_replay_updates_priorities_and_weights(tmp_path):
    params = _params(
        "DqnAlgorithm",
        "CartPole-v1",
        "ReplayBuffer.prioritized=True",
        "ReplayBuffer.priority_beta=0.4",
        "ReplayBuffer.priority_alpha=0.6",
        num_iterations=120,
    )
    with _trainer(tmp_path / "run", params) as trainer:
        algorithm = trainer.algorithm
        buffer = algorithm.replay_buffer
        assert buffer.prioritized
        calls = []
        original_update_priority = buffer.update_priority

        def update_priority(env_ids, positions, priorities):
            calls.append((env_ids.clone(), positions.clone(), priorities.clone()))
            return original_update_priority(env_ids, positions, priorities)

        buffer.update_priority = update_priority
        weights = []
        original_calc_loss = algorithm.calc_loss

        def calc_loss(info):
            weights.append(info.weights.detach().clone())
            return original_calc_loss(info)

        algorithm.calc_loss = calc_loss
        log = _record_updates(trainer)
        trainer.train()
        _assert_finite_stats(log)
        assert len(calls) == len(weights) == len(log) > 0

        # The last call's priorities are in the sum tree (priority ** alpha per slot).
        env_ids, positions, priorities = calls[-1]
        leaves = buffer.checkpoint_state()["priorities"]
        slots = env_ids * buffer.max_length + positions % buffer.max_length
        last_value = {int(s): float(p) for s, p in zip(slots, priorities, strict=True)}
        for slot, priority in last_value.items():
            assert leaves[slot] == pytest.approx(priority**0.6, rel=1e-6)
        # ... and they differ from the priority that new steps got (1.0 initially).
        assert any(p != 1.0 for p in last_value.values())
        held_leaves = leaves[: buffer.total_size]
        assert len(torch.unique(held_leaves)) > 10

        # Importance weights reached the loss: not all ones with beta > 0, max 1 each.
        for w in weights:
            assert w.shape == (32,) and float(w.max()) == pytest.approx(1.0)
            assert bool(((w > 0) & (w <= 1.0 + 1e-6)).all())
        assert any(bool((w < 0.999).any()) for w in weights)

        buffer.priority_beta = 0.0
        exp, _ = algorithm.sample_batch()
        assert bool((exp.batch_info.importance_weights == 1.0).all())


# ------------------------------------------------------------------------------ 6
def test_nan_loss_skips_update_and_repeated_nans_stop_the_run(tmp_path):
    root = tmp_path / "run"
    params = _params(
        "DdpgAlgorithm",
        "Pendulum-v1",
        "TrainerConfig.checkpoint_interval=5",
        "TrainerConfig.summary_interval=1",
        "TrainerConfig.max_consecutive_skipped_iterations=3",
        num_iterations=100,
        initial_collect_steps=0,
    )
    single_nan_iteration = 7  # 0-based: the 8th iteration
    streak_start = 12  # iterations 13, 14 and 15: stops at 15, a checkpoint iteration
    with _trainer(root, params) as trainer:
        algorithm = trainer.algorithm
        ckpt_10 = root / "checkpoints" / "ckpt-10.pt"
        hashes = {}
        original_calc_loss = algorithm.calc_loss

        def calc_loss(info):
            loss_info = original_calc_loss(info)
            i = trainer.iteration
            if i == single_nan_iteration or i >= streak_start:
                if i == streak_start and not hashes:
                    hashes["ckpt-10"] = _sha256(ckpt_10)
                return loss_info._replace(loss=loss_info.loss * float("nan"))
            return loss_info

        algorithm.calc_loss = calc_loss
        skipped_checks = []
        original_update = algorithm.update_with_gradient

        def update_with_gradient(loss_info):
            if torch.isfinite(loss_info.loss):
                return original_update(loss_info)
            before = _clone_params(algorithm)
            trained = {n for n, p in algorithm.named_parameters() if p.requires_grad}
            optimizer_steps = [
                s["step"].clone() for s in algorithm.optimizer.state.values() if "step" in s
            ]
            result = original_update(loss_info)
            after = _clone_params(algorithm)
            unchanged = all(torch.equal(before[n], after[n]) for n in trained)
            steps_after = [
                s["step"].clone() for s in algorithm.optimizer.state.values() if "step" in s
            ]
            same_steps = all(
                torch.equal(a, b) for a, b in zip(optimizer_steps, steps_after, strict=True)
            )
            skipped_checks.append((result, unchanged, same_steps))
            return result

        algorithm.update_with_gradient = update_with_gradient
        log = _record_updates(trainer)
        with pytest.raises(TrainingDivergedError, match="non-finite loss"):
            trainer.train()
        assert trainer.iteration == 15
        assert algorithm.num_skipped_updates == 4

    assert len(skipped_checks) == 4
    for result, unchanged, same_steps in skipped_checks:
        assert float(result["skipped"]) == 1.0
        assert unchanged, "a NaN loss changed trained parameters"
        assert same_steps, "a NaN loss advanced the optimizer"
    by_iteration = {entry["iteration"]: entry["stats"] for entry in log}
    assert by_iteration[single_nan_iteration]["skipped"] == 1.0
    assert "loss" not in by_iteration[single_nan_iteration]
    assert all(by_iteration[i]["skipped"] == 0.0 for i in range(single_nan_iteration))
    assert by_iteration[single_nan_iteration + 1]["skipped"] == 0.0
    # The summary of the 8th iteration reports the skipped update.
    records = [json.loads(line) for line in (root / "progress.jsonl").read_text().splitlines()]
    skipped = {r["iteration"]: r.get("train/skipped") for r in records if "fps" in r}
    assert skipped[single_nan_iteration + 1] == 1.0
    assert skipped[single_nan_iteration] == 0.0
    # The run stopped before writing ckpt-15; the last good checkpoint is intact.
    names = sorted(p.name for p in (root / "checkpoints").iterdir())
    assert names == ["ckpt-10.pt", "ckpt-5.pt"]
    assert hashes["ckpt-10"] == _sha256(ckpt_10)
    state = torch.load(ckpt_10, weights_only=True)
    assert state["iteration"] == 10


def test_skipped_update_leaves_targets_and_counters_unchanged(tmp_path):
    params = _ddpg_params(num_iterations=5, initial_collect_steps=0)
    with _trainer(tmp_path / "run", params) as trainer:
        trainer.train()
        algorithm = trainer.algorithm
        original_calc_loss = algorithm.calc_loss

        def nan_loss(info):
            loss_info = original_calc_loss(info)
            return loss_info._replace(loss=loss_info.loss * float("nan"))

        algorithm.calc_loss = nan_loss
        before = {k: v.clone() for k, v in algorithm.state_dict().items()}
        stats = algorithm.train_from_replay()
        after = algorithm.state_dict()
    assert stats["skipped"] == 1.0
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == []


# ------------------------------------------------------------------------------ 9
PPO_TINY = (
    "TrainerConfig.num_iterations=1",
    "TrainerConfig.num_env_steps=0",
    "TrainerConfig.evaluate=False",
)


@pytest.mark.parametrize(
    ("binding", "name"),
    [
        ("TrainerConfig.unroll_length=0.5", "unroll_length"),
        ("TrainerConfig.initial_collect_steps=10", "initial_collect_steps"),
        ('TrainerConfig.offline_buffer_dir="/nonexistent/run"', "offline_buffer_dir"),
    ],
)
def test_on_policy_refuses_off_policy_settings(tmp_path, binding, name):
    with pytest.raises(ValueError, match=name):
        with _trainer(tmp_path / "run", [*PPO_TINY, binding], conf=PPO_CONF):
            pass
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_offline_fraction_one_needs_offline_buffer_dir(tmp_path):
    params = _ddpg_params("TrainerConfig.offline_fraction=1.0", num_iterations=5)
    with pytest.raises(ValueError, match="offline_fraction"):
        with _trainer(tmp_path / "run", params):
            pass


# ----------------------------------------------------------------------------- 10
def test_buffer_rejects_experience_with_other_observation_shape():
    obs_spec = BoundedTensorSpec((3,), torch.float32, -np.ones(3), np.ones(3))
    action_spec = BoundedTensorSpec((1,), torch.float32, -2.0 * np.ones(1), 2.0 * np.ones(1))
    algorithm = DdpgAlgorithm(
        observation_spec=obs_spec,
        action_spec=action_spec,
        actor_network_ctor=functools.partial(ActorNetwork, fc_layer_params=(16,)),
        critic_network_ctor=functools.partial(CriticNetwork, fc_layer_params=(16,)),
    )
    buffer = algorithm.build_replay_buffer(num_envs=2)
    spec = algorithm.experience_spec()
    good = nest.map_structure(lambda s: s.zeros((1, 2)), spec)
    good = good._replace(env_id=torch.arange(2).unsqueeze(0))
    algorithm.observe_for_replay(good)
    assert buffer.total_size == 2
    bad = good._replace(observation=torch.zeros(1, 2, 4))
    with pytest.raises(ReplayBufferError, match="'observation'") as info:
        algorithm.observe_for_replay(bad)
    assert "(2, 4)" in str(info.value) and "(2, 3)" in str(info.value)
    assert buffer.total_size == 2


def test_resume_without_a_saved_buffer_warns_how_long_it_recollects(tmp_path, caplog):
    params = _ddpg_params(num_iterations=40, initial_collect_steps=30)
    with _trainer(tmp_path / "run", params) as trainer:
        trainer.train()
        nbytes = trainer.algorithm.replay_buffer.nbytes
    params = _ddpg_params(num_iterations=50, initial_collect_steps=30)
    with caplog.at_level("WARNING"), _trainer(tmp_path / "run", params) as trainer:
        assert trainer.iteration == 40 and trainer.algorithm.replay_buffer.total_size == 0
    messages = [record.getMessage() for record in caplog.records]
    warnings = [m for m in messages if "without a saved replay" in m]
    assert len(warnings) == 1, caplog.text
    assert "enable_checkpoint is False" in warnings[0] and "holds 30 new steps" in warnings[0]
    assert f"about {nbytes / 2**20:.0f} MB each" in warnings[0]
