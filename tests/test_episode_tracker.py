"""Tests of alf.unrollers.EpisodeTracker on a hand-made sequence of time steps."""

import torch

from alf.data_structures import StepType, TimeStep
from alf.unrollers import EpisodeTracker

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def _ts(step_types, rewards):
    n = len(step_types)
    return TimeStep(
        step_type=torch.tensor(step_types, dtype=torch.int32),
        reward=torch.tensor(rewards, dtype=torch.float32),
        discount=torch.ones(n),
        observation=torch.zeros(n, 1),
        prev_action=torch.zeros(n),
        env_id=torch.arange(n),
    )


def test_returns_and_lengths_of_completed_episodes():
    tracker = EpisodeTracker(batch_size=3)
    # env 0: F M M L F M L     -> episodes (1+2+3, 3), (10+20, 2)
    # env 1: F M M M M M M     -> none completed
    # env 2: F L F L F M M     -> (5, 1), (-1, 1); the reward at FIRST is ignored
    sequence = [
        ([F, F, F], [9.0, 9.0, 9.0]),
        ([M, M, L], [1.0, 0.5, 5.0]),
        ([M, M, F], [2.0, 0.5, 7.0]),
        ([L, M, L], [3.0, 0.5, -1.0]),
        ([F, M, F], [0.0, 0.5, 0.0]),
        ([M, M, M], [10.0, 0.5, 4.0]),
        ([L, M, M], [20.0, 0.5, 4.0]),
    ]
    completed_per_step = []
    for step_types, rewards in sequence:
        tracker.update(_ts(step_types, rewards))
        completed_per_step.append(list(tracker.completed_env_ids))
    assert completed_per_step[1] == [2]
    assert completed_per_step[3] == [2, 0, 2]
    assert tracker.completed_env_ids == [2, 0, 2, 0]
    returns, lengths, env_ids, successes = tracker.pop_completed()
    assert len(successes) == 4 and all(s != s for s in successes)  # NaN: none reported
    assert returns == [5.0, 6.0, -1.0, 30.0]
    assert lengths == [1, 3, 1, 2]
    assert env_ids == [2, 0, 2, 0]
    assert tracker.completed_env_ids == []
    assert tracker.pop_completed() == ([], [], [], [])

    # env 1's episode keeps accumulating until it ends.
    tracker.update(_ts([M, L, M], [0.0, 0.5, 0.0]))
    assert tracker.completed_env_ids == [1]
    assert tracker.pop_completed()[:3] == ([3.5], [7], [1])


def test_first_step_resets_an_unfinished_episode():
    tracker = EpisodeTracker(batch_size=1)
    tracker.update(_ts([F], [0.0]))
    tracker.update(_ts([M], [4.0]))
    tracker.update(_ts([F], [0.0]))  # e.g. an explicit reset
    tracker.update(_ts([M], [1.0]))
    tracker.update(_ts([L], [2.0]))
    assert tracker.pop_completed()[:3] == ([3.0], [2], [0])
