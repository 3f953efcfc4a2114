"""Tests of alf.unrollers.SyncUnroller."""

import pytest
import torch
from helpers_algorithms import small_ppo

from alf import nest
from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import RLAlgorithm, reset_state_on_first
from alf.data_structures import AlgStep, Experience, StepType
from alf.environments import create_environment
from alf.tensor_specs import TensorSpec
from alf.unrollers import SyncUnroller


@pytest.fixture
def unroller():
    env = create_environment("CartPole-v1", 3, seed=0, max_episode_steps=6)
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=small_ppo(env)), unroll_length=4)
    yield unroller
    unroller.close()


def test_unroll_returns_t_plus_one_rows(unroller):
    assert unroller.steps_per_unroll == 12
    exp = unroller.unroll()
    assert isinstance(exp, Experience)
    assert exp.step_type.shape == (5, 3)
    assert exp.observation.shape == (5, 3, 4)
    assert exp.action.shape == (5, 3)
    assert exp.rollout_info.log_prob.shape == (5, 3)
    assert exp.rollout_info.value.shape == (5, 3)
    assert exp.step_type[0].tolist() == [StepType.FIRST] * 3
    assert exp.step_type[1:].eq(StepType.MID).all()
    assert torch.equal(exp.env_id, torch.arange(3).expand(5, 3))


def test_consecutive_unrolls_overlap_by_one_row(unroller):
    first = unroller.unroll()
    second = unroller.unroll()
    third = unroller.unroll()
    for a, b in ((first, second), (second, third)):
        for leaf_a, leaf_b in zip(nest.flatten(a), nest.flatten(b), strict=True):
            assert torch.equal(leaf_a[-1], leaf_b[0])
    # The rows after the overlap are new steps, not copies.
    assert not torch.equal(first.observation[1:], second.observation[1:])


def test_rows_chain_actions_into_prev_actions(unroller):
    rows = [unroller.unroll() for _ in range(3)]
    exp = nest.map_structure(lambda *xs: torch.cat([xs[0]] + [x[1:] for x in xs[1:]]), *rows)
    assert exp.step_type.shape == (13, 3)
    first = exp.step_type[1:] == StepType.FIRST
    assert first.any()  # 6-step episodes end inside 12 steps
    assert torch.equal(exp.prev_action[1:][~first], exp.action[:-1][~first])
    assert (exp.prev_action[1:][first] == 0).all()
    assert (exp.reward[1:][first] == 0).all()
    last_before = exp.step_type[:-1] == StepType.LAST
    assert torch.equal(first, last_before)


def test_episodes_are_tracked(unroller):
    for _ in range(4):  # 16 steps: two complete 6-step episodes per environment
        unroller.unroll()
    returns, lengths, env_ids, successes = unroller.episodes.pop_completed()
    assert len(returns) == 6 and len(successes) == 6
    assert lengths == [6] * 6
    assert returns == [6.0] * 6
    assert sorted(env_ids) == [0, 0, 1, 1, 2, 2]
    assert unroller.episodes.pop_completed() == ([], [], [], [])


def test_unroll_length_must_be_positive():
    env = create_environment("CartPole-v1", 1, seed=0)
    try:
        with pytest.raises(ValueError):
            SyncUnroller(env=env, policy=Policy(algorithm=small_ppo(env)), unroll_length=0)
    finally:
        env.close()


def test_reset_state_on_first():
    state = {"h": torch.ones(3, 2), "c": torch.full((3,), 5)}
    step_type = torch.tensor([StepType.FIRST, StepType.MID, StepType.LAST], dtype=torch.int32)
    reset = reset_state_on_first(state, step_type)
    assert reset["h"].tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
    assert reset["c"].tolist() == [0, 5, 5]


class _CountingAlgorithm(RLAlgorithm):
    """Always pushes left; its recurrent state counts the steps since FIRST."""

    @property
    def predict_state_spec(self):
        return TensorSpec((1,))

    def rollout_step(self, time_step, state):
        n = time_step.step_type.shape[0]
        return AlgStep(output=torch.zeros(n, dtype=torch.int64), state=state + 1)


def test_recurrent_state_is_reset_on_first():
    env = create_environment("CartPole-v1", 2, seed=0, max_episode_steps=3)
    algorithm = _CountingAlgorithm(
        observation_spec=env.observation_spec(), action_spec=env.action_spec()
    )
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=9)
    try:
        exp = unroller.unroll()
    finally:
        unroller.close()
    # Rows: FIRST MID MID LAST FIRST ...; the state given at row t counts the rows since FIRST.
    assert exp.step_type[:, 0].tolist() == [0, 1, 1, 2] * 2 + [0, 1]
    assert exp.state[:, :, 0].t().tolist() == [[0.0, 1.0, 2.0, 3.0] * 2 + [0.0, 1.0]] * 2


def _envpool_unroller(num_envs: int = 4, max_episode_steps: int = 5) -> SyncUnroller:
    pytest.importorskip("envpool")
    env = create_environment(
        "CartPole-v1",
        num_envs,
        seed=0,
        vectorization_mode="envpool",
        max_episode_steps=max_episode_steps,
        env_kwargs={"num_threads": 1},
    )
    return SyncUnroller(env=env, policy=Policy(algorithm=small_ppo(env)), unroll_length=6)


def test_steps_are_recorded_while_the_environments_step():
    """Each time step's episode statistics and experience row are recorded after the
    actions chosen for it are sent, before the environments' step is waited for: the
    bookkeeping overlaps a background (EnvPool) step."""
    unroller = _envpool_unroller()
    events: list[str] = []
    env = unroller.env
    step_async, step_wait, update = env.step_async, env.step_wait, unroller.episodes.update

    def logged(name, fn):
        def call(*args):
            events.append(name)
            return fn(*args)

        return call

    env.step_async = logged("send", step_async)
    env.step_wait = logged("wait", step_wait)
    unroller.episodes.update = logged("record", update)
    try:
        exp = unroller.unroll()
        # The reset step is recorded at once; every later one after the next send.
        assert events == ["record", "send", "wait"] + ["send", "record", "wait"] * 5 + ["record"]
        assert exp.step_type.shape == (7, 4)
        events.clear()
        unroller.unroll()
        assert events == ["send", "wait"] + ["send", "record", "wait"] * 5 + ["record"]
    finally:
        unroller.close()


def test_deferred_recording_gives_the_same_trajectories_and_episodes():
    """The deferred recording changes no row: the experience and the episodes equal
    those of stepping with ``env.step`` and recording at once."""
    torch.manual_seed(0)
    unroller = _envpool_unroller()
    torch.manual_seed(0)
    reference = _envpool_unroller()
    try:
        torch.manual_seed(1)
        rows = [unroller.unroll() for _ in range(3)]
        # The reference: the same policy and seeds, one env.step per row, recorded at once.
        algorithm, env = reference.policy.algorithm, reference.env
        torch.manual_seed(1)
        with torch.no_grad(), algorithm.rollout_session():
            time_step = env.reset()
            state = algorithm.zero_state(algorithm.rollout_state_spec, env.batch_size)
            expected = []
            for _ in range(19):
                step = algorithm.rollout_step(time_step, state)
                expected.append(Experience.from_time_step(time_step, step.output, step.info))
                reference.episodes.update(time_step)
                time_step = env.step(step.output)
        expected = nest.stack(expected)
        got = nest.map_structure(lambda *xs: torch.cat([xs[0]] + [x[1:] for x in xs[1:]]), *rows)
        for a, b in zip(nest.flatten(got), nest.flatten(expected), strict=True):
            assert torch.equal(a, b)
        assert unroller.episodes.pop_completed()[:3] == reference.episodes.pop_completed()[:3]
    finally:
        unroller.close()
        reference.close()


def test_a_failed_recording_leaves_no_step_in_flight():
    """If recording a step raises while the environments step, their step is still
    waited for: the error propagates, and the unroller (and its environment) go on."""
    unroller = _envpool_unroller()
    update = unroller.episodes.update
    calls = []

    def failing_update(time_step):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("recording failed")
        update(time_step)

    unroller.episodes.update = failing_update
    try:
        with pytest.raises(RuntimeError, match="recording failed"):
            unroller.unroll()
        exp = unroller.unroll()  # no "step_async called twice"
        assert exp.step_type.shape == (7, 4)
    finally:
        unroller.close()
