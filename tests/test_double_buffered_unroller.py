"""Tests of split environment steps (``step_async`` / ``step_wait``) and of the
DoubleBufferedUnroller, alone and inside AsyncUnroller actors."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from helpers_async import leaked_shm_entries, shm_entries

from alf import nest
from alf.algorithms.policy import Policy
from alf.algorithms.ppo import PPOAlgorithm
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import AlgStep, StepType
from alf.environments import create_environment
from alf.tensor_specs import TensorSpec
from alf.unrollers import ActorError, AsyncUnroller, DoubleBufferedUnroller, SyncUnroller

pytest.importorskip("envpool")

UNROLL = 5


class _BalancingAlgorithm(RLAlgorithm):
    """A deterministic CartPole policy (push towards the pole's fall) whose recurrent
    state counts the steps since FIRST; the count is also its rollout info."""

    @property
    def predict_state_spec(self):
        return TensorSpec(())

    def rollout_step(self, time_step, state):
        obs = time_step.observation
        action = (obs[:, 2] + 0.5 * obs[:, 3] > 0).to(torch.int64)
        return AlgStep(output=action, state=state + 1, info=state + 1)


def _algorithm(env) -> _BalancingAlgorithm:
    return _BalancingAlgorithm(
        observation_spec=env.observation_spec(), action_spec=env.action_spec()
    )


def _unroll_three_times(unroller) -> list:
    try:
        return [unroller.unroll() for _ in range(3)]
    finally:
        unroller.close()


def _assert_same_trajectories(expected: list, actual: list) -> None:
    for exp_a, exp_b in zip(expected, actual, strict=True):
        for a, b in zip(nest.flatten(exp_a), nest.flatten(exp_b), strict=True):
            assert a.shape == b.shape
            assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("group_mode", "reference_mode"), [("envpool", "envpool"), ("subprocess", "sync")]
)
def test_two_groups_collect_what_one_batched_environment_collects(group_mode, reference_mode):
    """Groups of 2 seeded 5 and 7 are environments 0-1 and 2-3 of a batch of 4 seeded 5:
    same steps, actions, states (reset per group on FIRST) and global env ids."""
    options = {"max_episode_steps": 7}
    if group_mode == "subprocess":
        options["num_workers"] = 1
    reference_env = create_environment(
        "CartPole-v1", 4, seed=5, vectorization_mode=reference_mode, max_episode_steps=7
    )
    expected = _unroll_three_times(
        SyncUnroller(
            env=reference_env,
            policy=Policy(algorithm=_algorithm(reference_env)),
            unroll_length=UNROLL,
        )
    )
    envs = tuple(
        create_environment("CartPole-v1", 2, seed=seed, vectorization_mode=group_mode, **options)
        for seed in (5, 7)
    )
    unroller = DoubleBufferedUnroller(
        envs=envs, policy=Policy(algorithm=_algorithm(envs[0])), unroll_length=UNROLL
    )
    assert unroller.batch_size == 4 and unroller.steps_per_unroll == 4 * UNROLL
    actual = _unroll_three_times(unroller)
    _assert_same_trajectories(expected, actual)
    assert actual[0].env_id[0].tolist() == [0, 1, 2, 3]
    step_types = torch.cat([actual[0].step_type] + [exp.step_type[1:] for exp in actual[1:]])
    assert (step_types == StepType.FIRST).sum() > 4  # 7-step episodes ended inside
    assert (step_types == StepType.LAST).any()
    assert unroller.num_old_rows == 1


def test_random_steps_and_episodes_are_shared_between_the_groups():
    envs = tuple(
        create_environment(
            "CartPole-v1", 2, seed=seed, vectorization_mode="envpool", max_episode_steps=4
        )
        for seed in (0, 2)
    )
    algorithm = _algorithm(envs[0])
    unroller = DoubleBufferedUnroller(
        envs=envs, policy=Policy(algorithm=algorithm), unroll_length=UNROLL
    )
    try:
        unroller.initial_collect_steps_left = 10  # rows 0-2 of 4 envs: ceil(10 / 4) = 3 rows
        assert [group.initial_collect_steps_left for group in unroller._groups] == [5, 5]
        calls = []
        unroller.on_step = lambda: calls.append(1)
        unroller.unroll()
        assert len(calls) == 2 * UNROLL
        returns, lengths, env_ids, successes = unroller.episodes.pop_completed()
        assert len(successes) == 4
        assert len(returns) == 4 and lengths == [4, 4, 4, 4]  # every env ended an episode
        assert sorted(env_ids) == [0, 1, 2, 3]  # the second group's rows follow the first's
        assert unroller.episodes.pop_completed() == ([], [], [], [])
    finally:
        unroller.close()


def test_environments_stepping_in_the_calling_thread_are_refused():
    envs = tuple(create_environment("CartPole-v1", 2, seed=s) for s in (0, 2))
    try:
        with pytest.raises(ValueError, match="step in the background.*GymnasiumEnvironment"):
            DoubleBufferedUnroller(
                envs=envs, policy=Policy(algorithm=_algorithm(envs[0])), unroll_length=2
            )
    finally:
        for env in envs:
            env.close()


@pytest.mark.parametrize("mode", ["sync", "envpool", "subprocess"])
def test_split_steps_equal_whole_steps_and_misuse_is_an_error(mode):
    options = {"num_workers": 1} if mode == "subprocess" else {}
    with (
        create_environment("CartPole-v1", 2, seed=1, vectorization_mode=mode, **options) as split,
        create_environment("CartPole-v1", 2, seed=1, vectorization_mode=mode, **options) as whole,
    ):
        assert split.steps_in_background == (mode != "sync")
        split.reset()
        whole.reset()
        action = torch.tensor([0, 1])
        for _ in range(3):
            split.step_async(action)
            with pytest.raises(RuntimeError, match="step_async called twice"):
                split.step_async(action)
            a, b = split.step_wait(), whole.step(action)
            for x, y in zip(nest.flatten(a), nest.flatten(b), strict=True):
                assert torch.equal(x, y)
        with pytest.raises(RuntimeError, match="step_wait called without step_async"):
            split.step_wait()


def _make_ppo(**specs) -> PPOAlgorithm:
    return PPOAlgorithm(**specs)


def _async_unroller(mode: str, envs: int, **kwargs) -> AsyncUnroller:
    torch.manual_seed(0)
    with create_environment("CartPole-v1", 1) as env:
        algorithm = _make_ppo(
            observation_spec=env.observation_spec(), action_spec=env.action_spec()
        )
    return AsyncUnroller(
        env_factory=lambda **kw: create_environment("CartPole-v1", vectorization_mode=mode, **kw),
        policy=Policy(algorithm=algorithm),
        algorithm_factory=_make_ppo,
        num_envs=envs,
        unroll_length=UNROLL,
        seed=3,
        num_actors=1,
        startup_timeout_s=60,
        double_buffering=True,
        **kwargs,
    )


def test_double_buffered_actors_deliver_continuous_fragments_of_all_their_envs():
    before = shm_entries()
    unroller = _async_unroller("envpool", 4)
    try:
        fragments = [unroller.collect()[0] for _ in range(3)]
    finally:
        unroller.close()
    assert not multiprocessing.active_children()
    assert not leaked_shm_entries(before)
    for k, fragment in enumerate(fragments):
        assert fragment.exp.step_type.shape == (UNROLL + 1, 4)
        assert fragment.exp.env_id[0].tolist() == [0, 1, 2, 3]
        assert fragment.num_old_rows == (0 if k == 0 else 1)
    for prev, nxt in zip(fragments, fragments[1:], strict=False):
        for a, b in zip(nest.flatten(prev.exp), nest.flatten(nxt.exp), strict=True):
            assert torch.equal(a[-1], b[0])
    assert unroller.env_steps_taken >= 3 * UNROLL * 4


def test_double_buffering_needs_even_groups_and_a_background_backend():
    with pytest.raises(ValueError, match="must be even"):
        _async_unroller("envpool", 3)
    before = shm_entries()
    unroller = _async_unroller("sync", 4)
    try:
        with pytest.raises(ActorError, match="Actor 0 (.|\n)*step in the background"):
            unroller.collect()
    finally:
        unroller.close()
    assert not multiprocessing.active_children()
    assert not leaked_shm_entries(before)


class _FailingAlgorithm(_BalancingAlgorithm):
    """Raises in its ``fail_at``-th rollout step."""

    fail_at = 4

    def rollout_step(self, time_step, state):
        self.fail_at -= 1
        if self.fail_at == 0:
            raise RuntimeError("policy failed")
        return super().rollout_step(time_step, state)


def test_an_error_mid_unroll_leaves_no_step_in_flight():
    envs = tuple(
        create_environment("CartPole-v1", 2, seed=s, vectorization_mode="envpool") for s in (0, 2)
    )
    unroller = DoubleBufferedUnroller(
        envs=envs,
        policy=Policy(
            algorithm=_FailingAlgorithm(
                observation_spec=envs[0].observation_spec(), action_spec=envs[0].action_spec()
            )
        ),
        unroll_length=UNROLL,
    )
    try:
        with pytest.raises(RuntimeError, match="policy failed"):
            unroller.unroll()
        for env in envs:  # usable: no step of the failed call is still pending
            assert env.step(torch.zeros(2, dtype=torch.int64)).step_type.shape == (2,)
    finally:
        unroller.close()
