"""Tests of alf.trainers.Evaluator."""

import pytest
import torch
from helpers_algorithms import small_ppo

from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import AlgStep, StepType, TimeStep
from alf.environments import AlfEnvironment, create_environment
from alf.tensor_specs import BoundedTensorSpec, TensorSpec
from alf.trainers import EvalResult, Evaluator


class _Recorder(AlfEnvironment):
    """Delegates to ``env`` and records, per environment, the length of every episode."""

    def __init__(self, env):
        self.env = env
        self.episode_lengths = [[] for _ in range(env.batch_size)]
        self._t = [0] * env.batch_size

    @property
    def batch_size(self):
        return self.env.batch_size

    def observation_spec(self):
        return self.env.observation_spec()

    def action_spec(self):
        return self.env.action_spec()

    def _record(self, ts):
        for i, step_type in enumerate(ts.step_type.tolist()):
            self._t[i] = 0 if step_type == StepType.FIRST else self._t[i] + 1
            if step_type == StepType.LAST:
                self.episode_lengths[i].append(self._t[i])
        return ts

    def reset(self):
        return self._record(self.env.reset())

    def step(self, action):
        return self._record(self.env.step(action))

    def close(self):
        self.env.close()


@pytest.mark.parametrize("num_envs,num_episodes", [(2, 5), (3, 3), (4, 2)])
def test_untrained_ppo_on_cart_pole_plays_exactly_num_episodes(num_envs, num_episodes):
    env = _Recorder(create_environment("CartPole-v1", num_envs, seed=3))
    algorithm = small_ppo(env)
    try:
        result = Evaluator(
            env=env, policy=Policy(algorithm=algorithm), num_episodes=num_episodes
        ).evaluate()
    finally:
        env.close()
    assert isinstance(result, EvalResult)
    assert len(result.returns) == len(result.lengths) == num_episodes
    # CartPole pays 1 per step, so each return is its episode's length.
    assert result.returns == [float(n) for n in result.lengths]
    assert result.average_return == pytest.approx(sum(result.returns) / num_episodes)
    assert result.average_episode_length == pytest.approx(sum(result.lengths) / num_episodes)
    # Environment i contributes its first quota_i episodes, quota = 5 -> [3, 2] etc.
    quota = [num_episodes // num_envs + (i < num_episodes % num_envs) for i in range(num_envs)]
    expected = sorted(n for i in range(num_envs) for n in env.episode_lengths[i][: quota[i]])
    assert sorted(result.lengths) == expected
    assert all(len(env.episode_lengths[i]) >= quota[i] for i in range(num_envs))


class _FixedLengthEnv(AlfEnvironment):
    """Environment i's episodes last ``lengths[i]`` steps, with reward i + 1 per step."""

    def __init__(self, lengths):
        self._lengths = torch.tensor(lengths)
        self._t = torch.zeros(len(lengths), dtype=torch.int64)

    @property
    def batch_size(self):
        return len(self._lengths)

    def observation_spec(self):
        return TensorSpec((1,))

    def action_spec(self):
        return BoundedTensorSpec((), torch.int64, 0, 1)

    def _ts(self, step_type, reward):
        n = self.batch_size
        return TimeStep(
            step_type=step_type.to(torch.int32),
            reward=reward,
            discount=torch.ones(n),
            observation=self._t.float().unsqueeze(1),
            prev_action=torch.zeros(n, dtype=torch.int64),
            env_id=torch.arange(n),
        )

    def reset(self):
        self._t.zero_()
        return self._ts(
            torch.full((self.batch_size,), StepType.FIRST), torch.zeros(self.batch_size)
        )

    def step(self, action):
        restart = self._t >= self._lengths
        self._t = torch.where(restart, 0, self._t + 1)
        step_type = torch.where(
            restart,
            StepType.FIRST,
            torch.where(self._t >= self._lengths, StepType.LAST, StepType.MID),
        )
        reward = torch.where(restart, 0.0, torch.arange(1.0, self.batch_size + 1))
        return self._ts(step_type, reward)


class _PredictOnly(RLAlgorithm):
    def __init__(self):
        super().__init__(observation_spec=TensorSpec((1,)), action_spec=None)
        self.calls = 0

    def predict_step(self, time_step, state):
        assert not self.training
        self.calls += 1
        return AlgStep(output=torch.zeros(time_step.step_type.shape[0], dtype=torch.int64))

    def rollout_step(self, time_step, state):
        raise AssertionError("evaluation must use predict_step")


def test_short_episodes_are_not_over_represented():
    env = _FixedLengthEnv([2, 5])
    algorithm = _PredictOnly()
    result = Evaluator(env=env, policy=Policy(algorithm=algorithm), num_episodes=5).evaluate()
    # Env 0 finishes 3 episodes of length 2 before env 1 finishes its second, but only
    # its quota of 3 counts: 3 x (length 2, return 2) + 2 x (length 5, return 10).
    assert sorted(result.lengths) == [2, 2, 2, 5, 5]
    assert sorted(result.returns) == [2.0, 2.0, 2.0, 10.0, 10.0]
    assert result.average_return == pytest.approx(26 / 5)
    assert algorithm.training  # restored after evaluation
    # Env 1 needs 5 steps, a reset step and 5 more steps: evaluation stops right then.
    assert algorithm.calls == 11


def test_evaluation_can_be_repeated():
    env = _FixedLengthEnv([3, 3, 3])
    evaluator = Evaluator(env=env, policy=Policy(algorithm=_PredictOnly()), num_episodes=4)
    first = evaluator.evaluate()
    second = evaluator.evaluate()
    assert first.lengths == second.lengths == [3, 3, 3, 3]


def test_no_finished_episode_raises():
    env = _FixedLengthEnv([50])
    algorithm = _PredictOnly()
    algorithm.eval()
    with pytest.raises(RuntimeError, match="No evaluation episode"):
        Evaluator(env=env, policy=Policy(algorithm=algorithm), num_episodes=1).evaluate(
            max_steps=10
        )
    assert not algorithm.training  # the mode before evaluation is restored


def test_an_episode_that_ends_at_the_cap_is_complete_not_cut():
    # Episodes of exactly max_episode_steps steps end on their own (the usual case: the
    # cap is the environment's own time limit): each counts once, none is cut.
    env = _FixedLengthEnv([4, 4])
    result = Evaluator(
        env=env, policy=Policy(algorithm=_PredictOnly()), num_episodes=4, max_episode_steps=4
    ).evaluate()
    assert result.lengths == [4, 4, 4, 4] and result.num_cut_episodes == 0
    cut = Evaluator(
        env=env, policy=Policy(algorithm=_PredictOnly()), num_episodes=2, max_episode_steps=3
    )
    result = cut.evaluate()
    assert result.lengths == [3, 3] and result.num_cut_episodes == 2


class _ExploreOnly(RLAlgorithm):
    """Explores with action 1 (greedy would be an error), counting steps and sessions."""

    def __init__(self):
        super().__init__(observation_spec=TensorSpec((1,)), action_spec=None)
        self.steps = 0
        self.sessions = 0
        self.in_session = False

    def predict_step(self, time_step, state):
        raise AssertionError("an exploring evaluation must use rollout_step")

    def rollout_step(self, time_step, state):
        assert not self.training and self.in_session
        self.steps += 1
        return AlgStep(output=torch.ones(time_step.step_type.shape[0], dtype=torch.int64))

    def rollout_session(self):
        algorithm = self

        class _Session:
            def __enter__(self):
                algorithm.sessions += 1
                algorithm.in_session = True

            def __exit__(self, *exc):
                algorithm.in_session = False

        return _Session()


def test_exploring_evaluation_acts_with_rollout_step_in_one_session():
    env = _FixedLengthEnv([2, 5])
    algorithm = _ExploreOnly()
    evaluator = Evaluator(
        env=env, policy=Policy(algorithm=algorithm), num_episodes=5, exploring=True
    )
    result = evaluator.evaluate()
    # The same episodes as a greedy evaluation (the test env ignores actions).
    assert sorted(result.lengths) == [2, 2, 2, 5, 5]
    assert algorithm.steps == 11 and algorithm.sessions == 1 and not algorithm.in_session
    assert algorithm.training  # restored after evaluation
    assert evaluator.with_policy(Policy(algorithm=_ExploreOnly())).exploring


def test_exploring_ppo_samples_where_greedy_repeats_itself():
    # From the same environment seed, an untrained PPO's greedy play of CartPole is the
    # same every time; its exploring play samples its actions, so it differs.
    torch.manual_seed(0)
    env = create_environment("CartPole-v1", 2, seed=5)
    algorithm = small_ppo(env)
    env.close()

    def lengths(exploring: bool) -> tuple[int, ...]:
        env = create_environment("CartPole-v1", 2, seed=5)
        try:
            evaluator = Evaluator(
                env=env, policy=Policy(algorithm=algorithm), num_episodes=6, exploring=exploring
            )
            return tuple(evaluator.evaluate().lengths)
        finally:
            env.close()

    assert len({lengths(False) for _ in range(3)}) == 1
    assert len({lengths(True) for _ in range(3)}) > 1
