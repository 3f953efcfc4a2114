"""Hindsight relabelling (HER) in the replay buffer: the future and final rules, the anchor
row, episodes still running, the relabel ratio, n-step sequences across episode ends,
saved buffers, and the refusals (data that is not goal-conditioned, bad settings)."""

from __future__ import annotations

import pytest
import torch

from alf.data_structures import Experience, StepType
from alf.replay_buffers import HindsightError, HindsightRelabeller, ReplayBuffer, ReplayBufferError
from alf.tensor_specs import TensorSpec

EPISODE = 5  # steps per episode: FIRST, MID, MID, MID, LAST
GOAL = TensorSpec((1,), torch.float32)
SPEC = Experience(
    step_type=TensorSpec((), torch.int32),
    reward=TensorSpec((), torch.float32),
    discount=TensorSpec((), torch.float32),
    observation={"achieved_goal": GOAL, "desired_goal": GOAL, "observation": GOAL},
    prev_action=TensorSpec((), torch.int64),
    env_id=TensorSpec((), torch.int64),
    action=TensorSpec((), torch.int64),
)


def _reward(achieved: torch.Tensor, desired: torch.Tensor) -> torch.Tensor:
    return -(achieved != desired).any(-1).to(torch.float32)


def _row(t: int, num_envs: int) -> Experience:
    """Step ``t`` of every environment: the achieved goal is the absolute position
    ``1000 * env + t`` (so a goal names the step it came from); desired goal -1."""
    phase = t % EPISODE
    step_type = StepType.FIRST if phase == 0 else StepType.LAST if phase == EPISODE - 1 else 1
    env = torch.arange(num_envs)
    achieved = (1000 * env + t).to(torch.float32).unsqueeze(1)
    return Experience(
        step_type=torch.full((num_envs,), step_type, dtype=torch.int32),
        reward=torch.full((num_envs,), -1.0),
        discount=torch.ones(num_envs),
        observation={
            "achieved_goal": achieved,
            "desired_goal": torch.full((num_envs, 1), -1.0),
            "observation": achieved.clone(),
        },
        prev_action=torch.zeros(num_envs, dtype=torch.int64),
        env_id=env,
        action=torch.zeros(num_envs, dtype=torch.int64),
    )


def _buffer(steps: int, num_envs: int = 2, max_length: int = 64, **her: object) -> ReplayBuffer:
    relabeller = HindsightRelabeller(reward_fn=_reward, **her)
    buffer = ReplayBuffer(
        data_spec=SPEC, num_envs=num_envs, max_length=max_length, hindsight=relabeller
    )
    for t in range(steps):
        buffer.add_batch(_row(t, num_envs))
    return buffer


def _episode_end(position: int, newest: int) -> int:
    return min(position - position % EPISODE + EPISODE - 1, newest)


def _check_future(batch: Experience, info: object, *, anchor: int, newest: int) -> int:
    """Checks every sequence against the future rule; returns how many were relabelled."""
    desired = batch.observation["desired_goal"][..., 0]
    achieved = batch.observation["achieved_goal"][..., 0]
    relabelled = 0
    for i in range(desired.shape[1]):
        if float(desired[0, i]) == -1.0:
            assert torch.all(desired[:, i] == -1.0) and torch.all(batch.reward[:, i] == -1.0)
            continue
        relabelled += 1
        assert torch.all(desired[:, i] == desired[0, i]), "one goal for the whole sequence"
        env, start = int(info.env_ids[i]), int(info.positions[i])
        here = start + anchor
        source = int(desired[0, i]) - 1000 * env
        assert here < source <= _episode_end(here, newest), (here, source)
        expected = torch.where(achieved[:, i] == desired[:, i], 0.0, -1.0)
        expected[batch.step_type[:, i] == StepType.FIRST] = 0.0
        assert torch.equal(batch.reward[:, i], expected)
    return relabelled


@pytest.mark.parametrize("anchor", [0, 1])
def test_future_goals_come_from_later_steps_of_the_anchors_episode(anchor: int) -> None:
    buffer = _buffer(steps=23, relabel_ratio=1.0)  # the last episode is still running
    generator = torch.Generator().manual_seed(0)
    batch, info = buffer.get_batch(512, 3, generator, anchor=anchor)
    relabelled = _check_future(batch, info, anchor=anchor, newest=22)
    # Every sequence whose anchor is not its episode's last held step is relabelled.
    here = info.positions + anchor
    ends = torch.tensor([_episode_end(int(p), 22) for p in here])
    assert relabelled == int((ends > here).sum()) > 300


def test_future_goals_are_uniform_over_the_rest_of_the_episode() -> None:
    buffer = _buffer(steps=EPISODE, num_envs=1, relabel_ratio=1.0)
    generator = torch.Generator().manual_seed(1)
    batch, info = buffer.get_batch(4000, 2, generator)
    from_first = info.positions == 0
    goals = batch.observation["desired_goal"][0, from_first, 0]
    counts = torch.bincount(goals.long(), minlength=EPISODE)
    assert counts[0] == 0 and bool((counts[1:] > 0.2 * len(goals)).all()), counts


def test_final_goals_and_the_relabel_ratio() -> None:
    buffer = _buffer(steps=20, relabel_ratio=1.0, strategy="final")
    batch, info = buffer.get_batch(256, 2, torch.Generator().manual_seed(2))
    desired = batch.observation["desired_goal"][0, :, 0]
    for i in range(256):
        env, start = int(info.env_ids[i]), int(info.positions[i])
        if start % EPISODE != EPISODE - 1:  # not a LAST anchor
            assert int(desired[i]) == 1000 * env + _episode_end(start, 19)
    none = _buffer(steps=20, relabel_ratio=0.0)
    batch, _ = none.get_batch(256, 2, torch.Generator().manual_seed(2))
    assert torch.all(batch.observation["desired_goal"] == -1.0)
    some = _buffer(steps=20, relabel_ratio=0.5)
    batch, info = some.get_batch(4000, 2, torch.Generator().manual_seed(3))
    eligible = (info.positions % EPISODE) != EPISODE - 1
    share = (batch.observation["desired_goal"][0, :, 0] != -1.0)[eligible].float().mean()
    assert 0.45 < float(share) < 0.55


def test_sequences_across_an_episode_end_keep_the_anchors_episode() -> None:
    # n-step sequences (length 4) often cross into the next episode; the goal still comes
    # from the anchor's episode, and later rows' rewards use the same goal.
    buffer = _buffer(steps=30, relabel_ratio=1.0, scan_length=2)  # several scan rounds
    batch, info = buffer.get_batch(512, 4, torch.Generator().manual_seed(4))
    assert _check_future(batch, info, anchor=0, newest=29) > 300


def test_a_saved_buffer_relabels_as_before_and_wrapped_rings_work() -> None:
    buffer = _buffer(steps=47, max_length=16, relabel_ratio=1.0)  # the rings wrapped
    batch, info = buffer.get_batch(256, 3, torch.Generator().manual_seed(5))
    assert _check_future(batch, info, anchor=0, newest=46) > 100
    restored = _buffer(steps=0, max_length=16, relabel_ratio=1.0)
    restored.load_checkpoint_state(buffer.checkpoint_state())
    again, info_again = restored.get_batch(256, 3, torch.Generator().manual_seed(5))
    assert torch.equal(info.positions, info_again.positions)
    assert torch.equal(batch.observation["desired_goal"], again.observation["desired_goal"])
    assert torch.equal(batch.reward, again.reward)


def test_data_that_is_not_goal_conditioned_is_refused_in_one_line() -> None:
    relabeller = HindsightRelabeller(reward_fn=_reward)
    flat = SPEC._replace(observation=TensorSpec((3,), torch.float32))
    with pytest.raises(HindsightError, match="achieved_goal.*desired_goal") as err:
        ReplayBuffer(data_spec=flat, num_envs=1, hindsight=relabeller)
    # (one line; gin appends the configurable's name on a line of its own, which the
    # command-line tools drop)
    assert "achieved_goal" in str(err.value).splitlines()[0]
    other = SPEC._replace(observation={"achieved_goal": GOAL, "goal": GOAL})
    with pytest.raises(HindsightError, match="keys"):
        ReplayBuffer(data_spec=other, num_envs=1, hindsight=relabeller)
    with pytest.raises(HindsightError, match="Experience"):
        ReplayBuffer(data_spec={"x": GOAL}, num_envs=1, hindsight=relabeller)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"relabel_ratio": 1.5}, "relabel_ratio"),
        ({"strategy": "episode"}, "strategy"),
        ({"scan_length": 0}, "scan_length"),
        ({"reward_fn": None}, "goal_env_reward"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ReplayBufferError, match=match):
        HindsightRelabeller(**{"reward_fn": _reward, **kwargs})


def test_the_anchor_must_lie_in_the_sequence() -> None:
    buffer = _buffer(steps=10)
    with pytest.raises(ReplayBufferError, match="anchor"):
        buffer.get_batch(4, 2, anchor=2)


def test_offline_buffers_are_never_relabelled_even_with_a_gin_binding(
    tmp_path, monkeypatch
) -> None:
    # ReplayBuffer.hindsight bound for the online buffer must not reach the offline one
    import types

    import gin

    from alf.replay_buffers import offline

    saved = _buffer(10).checkpoint_state()
    checkpoint = types.SimpleNamespace(path="ckpt", data=saved)
    monkeypatch.setattr(offline, "read_checkpoint", lambda root_dir: checkpoint)
    gin.clear_config()
    try:
        gin.bind_parameter("ReplayBuffer.hindsight", HindsightRelabeller(reward_fn=_reward))
        (tmp_path / "checkpoints").mkdir()
        buffer = offline.load_offline_buffer(str(tmp_path), SPEC)
    finally:
        gin.clear_config()
    assert buffer.hindsight is None
