"""Tests of alf.replay_buffers.ReplayBuffer: per-env rings, sequence sampling (uniform and
prioritized), priorities, checkpoints and the errors users see."""

from collections import namedtuple

import gin
import pytest
import torch

from alf import nest
from alf.data_structures import Experience
from alf.replay_buffers import (
    ReplayBuffer,
    ReplayBufferError,
    describe_spec,
    spec_differences,
    sum_tree,
)
from alf.tensor_specs import TensorSpec

# Upper 0.1% points of the chi-square distribution, by degrees of freedom.
CHI2_CRITICAL_P001 = {5: 20.515, 7: 24.322, 9: 27.877}

Step = namedtuple("Step", ["env", "step", "observation"])

STEP_SPEC = Step(
    env=TensorSpec((), torch.int64),
    step=TensorSpec((), torch.int64),
    observation=TensorSpec((3,), torch.float32),
)


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs.double() / probs.double().sum() * counts.sum()
    return float(((counts.double() - expected) ** 2 / expected).sum())


def _steps(env_ids, steps) -> Step:
    """Rows that record their own env id and step number (observation = step + env/10)."""
    env = torch.as_tensor(env_ids, dtype=torch.int64)
    step = torch.as_tensor(steps, dtype=torch.int64)
    obs = (step.float() + env.float() / 10).unsqueeze(1).repeat(1, 3)
    return Step(env=env, step=step, observation=obs)


def _add(rb: ReplayBuffer, env_ids) -> None:
    """Adds the next step of each of ``env_ids``, numbered by the buffer's own counters."""
    env_ids = torch.as_tensor(env_ids, dtype=torch.int64)
    rb.add_batch(_steps(env_ids, rb.positions[env_ids]), env_ids=env_ids)


def _fill(rb: ReplayBuffer, steps_per_env) -> None:
    for env, n in enumerate(steps_per_env):
        for _ in range(n):
            _add(rb, [env])


def _experience_spec(position_shape=(3,)) -> Experience:
    return Experience(
        step_type=TensorSpec((), torch.int32),
        reward=TensorSpec(()),
        discount=TensorSpec(()),
        observation={
            "position": TensorSpec(position_shape),
            "goal": {"xy": TensorSpec((2,)), "id": TensorSpec((), torch.int64)},
        },
        prev_action=TensorSpec((), torch.int64),
        env_id=TensorSpec((), torch.int64),
        action=TensorSpec((), torch.int64),
        rollout_info={"log_prob": TensorSpec(())},
    )


def _experience(n: int, t: int = 0, position_shape=(3,)) -> Experience:
    return Experience(
        step_type=torch.ones(n, dtype=torch.int32),
        reward=torch.full((n,), float(t)),
        discount=torch.ones(n),
        observation={
            "position": torch.full((n, *position_shape), float(t)),
            "goal": {"xy": torch.randn(n, 2), "id": torch.arange(n)},
        },
        prev_action=torch.zeros(n, dtype=torch.int64),
        env_id=torch.arange(n),
        action=torch.full((n,), t, dtype=torch.int64),
        rollout_info={"log_prob": torch.randn(n)},
    )


def _check_sequences(rb: ReplayBuffer, data: Step, info, length: int) -> None:
    """Every sequence is ``length`` consecutive held steps of the one env it names."""
    pos = rb.positions
    assert data.step.shape == (length, info.env_ids.shape[0])
    assert torch.equal(data.env, info.env_ids.expand(length, -1))
    offsets = torch.arange(length).unsqueeze(1)
    assert torch.equal(data.step, info.positions.unsqueeze(0) + offsets)
    expected_obs = data.step.float() + data.env.float() / 10
    assert torch.equal(data.observation, expected_obs.unsqueeze(-1).expand(-1, -1, 3))
    env_pos = pos[info.env_ids]
    assert bool((info.positions >= (env_pos - rb.max_length).clamp(min=0)).all())
    assert bool((info.positions + length <= env_pos).all())


def _leaf_priorities(rb: ReplayBuffer) -> torch.Tensor:
    """``[num_envs, max_length]`` sum-tree values (priority ** alpha) by slot."""
    return rb.checkpoint_state()["priorities"].view(rb.num_envs, rb.max_length)


# ----------------------------------------------------------------------- storage


def test_storage_is_preallocated_from_the_spec():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=3, max_length=11)
    state = rb.checkpoint_state()
    assert state["storage"]["observation"].shape == (3, 11, 3)
    assert state["storage"]["step"].dtype == torch.int64
    assert rb.num_envs == 3 and rb.max_length == 11 and rb.data_spec is STEP_SPEC
    assert rb.total_size == 0 and rb.positions.tolist() == [0, 0, 0]
    assert not rb.prioritized and not rb.enable_checkpoint


def test_wrap_around_keeps_the_newest_steps_in_order():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=5)
    for t in range(12):
        rb.add_batch(_steps([0, 1], [t, t]))
    assert rb.positions.tolist() == [12, 12]
    assert rb.total_size == 10 and rb.num_steps([1]).tolist() == [5]
    data = rb.gather_all()
    assert data.step.shape == (5, 2)
    assert data.step.tolist() == [[t, t] for t in range(7, 12)]
    assert data.env.tolist() == [[0, 1]] * 5
    assert data.observation.shape == (5, 2, 3)


def test_gather_all_before_wrapping_and_when_empty():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=5)
    assert rb.gather_all().step.shape == (0, 2)
    for t in range(3):
        rb.add_batch(_steps([0, 1], [t, t]))
    assert rb.gather_all().step.tolist() == [[0, 0], [1, 1], [2, 2]]


def test_out_of_step_environments_keep_their_own_counters():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=3, max_length=4)
    _add(rb, [0, 2])
    _add(rb, [2])
    _add(rb, [2, 0, 1])  # any order
    _add(rb, [2])
    assert rb.positions.tolist() == [2, 1, 4]
    assert rb.total_size == 7 and rb.num_steps().tolist() == [2, 1, 4]
    assert rb.num_steps(torch.tensor([2, 0])).tolist() == [4, 2]
    with pytest.raises(ReplayBufferError, match=r"same number of steps.*\[2, 1, 4\]"):
        rb.gather_all()
    for _ in range(5):
        _add(rb, [2])
    _add(rb, [1, 0])
    _add(rb, [1])
    _add(rb, [0, 1])
    _add(rb, [1, 0])
    assert rb.positions.tolist() == [5, 5, 9]
    # Every env now holds max_length steps, each its own newest four.
    data = rb.gather_all()
    assert data.step.tolist() == [[1, 1, 5], [2, 2, 6], [3, 3, 7], [4, 4, 8]]
    assert data.env.tolist() == [[0, 1, 2]] * 4
    _, info = rb.get_batch(200, 4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(info.positions, torch.tensor([1, 1, 5])[info.env_ids])


@pytest.mark.parametrize("prioritized", [False, True])
def test_sequences_never_straddle_the_head_nor_mix_envs(prioritized):
    g = torch.Generator().manual_seed(5)
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=4, max_length=7, prioritized=prioritized)
    checked = 0
    for _ in range(60):
        envs = torch.nonzero(torch.rand(4, generator=g) < 0.6).squeeze(1)
        envs = envs[torch.randperm(envs.numel(), generator=g)]
        if envs.numel():
            _add(rb, envs)
        held = rb.positions.clamp(max=7)
        for length in (1, 3, 7):
            if int(held.max()) < length:
                continue
            data, info = rb.get_batch(64, length, generator=g)
            _check_sequences(rb, data, info, length)
            checked += 1
            if prioritized:  # make the steps near the head the most likely to be drawn
                rb.update_priority(info.env_ids, info.positions, torch.rand(64, generator=g) * 100)
                head = rb.positions - 1
                rb.update_priority(torch.arange(4), head, torch.full((4,), 1e4))
    assert checked > 100


# ----------------------------------------------------------------------- uniform sampling


def test_uniform_sampling_draws_every_valid_pair_equally():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=3, max_length=8)
    _fill(rb, [20, 5, 3])  # holds 8, 5 and 3 steps: 6, 3 and 1 starts of length 3
    data, info = rb.get_batch(30_000, 3, generator=torch.Generator().manual_seed(1))
    _check_sequences(rb, data, info, 3)
    pairs = [(0, p) for p in range(12, 18)] + [(1, p) for p in range(3)] + [(2, 0)]
    keys = info.env_ids * 100 + info.positions
    assert set(keys.tolist()) == {e * 100 + p for e, p in pairs}
    counts = torch.bincount(keys)[[e * 100 + p for e, p in pairs]]
    assert _chi_square(counts, torch.ones(len(pairs))) < CHI2_CRITICAL_P001[9]
    assert torch.equal(info.importance_weights, torch.ones(30_000))
    # Envs are chosen in proportion to their valid starts, not equally.
    env_counts = torch.bincount(info.env_ids, minlength=3).double() / 30_000
    assert torch.allclose(env_counts, torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64), atol=0.02)


# ----------------------------------------------------------------------- prioritized sampling


def _prioritized_buffer(head_priority: float, alpha: float = 0.6):
    """Env 0 holds steps 3..8, env 1 steps 0..3; sequences of 2 can start at 3..7 and 0..2.
    The steps at the heads (8 and 3) get ``head_priority``."""
    rb = ReplayBuffer(
        data_spec=STEP_SPEC, num_envs=2, max_length=6, prioritized=True, priority_alpha=alpha
    )
    _fill(rb, [9, 4])
    env = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    positions = torch.tensor([3, 4, 5, 6, 7, 8, 0, 1, 2, 3])
    priorities = torch.tensor(
        [1.0, 2.0, 3.0, 4.0, 5.0, head_priority, 0.5, 6.0, 2.0, head_priority]
    )
    assert rb.update_priority(env, positions, priorities) == 10
    valid = torch.tensor([True] * 5 + [False] + [True] * 3 + [False])
    return rb, env[valid], positions[valid], priorities[valid]


@pytest.mark.parametrize("small_tree", [False, True])
@pytest.mark.parametrize("head_priority", [1.0, 100.0, 1e6])
def test_prioritized_sampling_is_proportional_to_priority_to_the_alpha(
    head_priority, small_tree, monkeypatch
):
    """With large priorities at the heads, most draws are rejected and redrawn, and many
    end in the masked fallback: the frequencies are exact either way. The small tree
    (blocks of 2) makes the 12 slots a tree of several levels."""
    if small_tree:
        monkeypatch.setattr(sum_tree, "_FANOUT", 2)
        monkeypatch.setattr(sum_tree, "_TOP_SIZE", 2)
    rb, env, positions, priorities = _prioritized_buffer(head_priority)
    data, info = rb.get_batch(40_000, 2, generator=torch.Generator().manual_seed(2))
    _check_sequences(rb, data, info, 2)
    keys = info.env_ids * 100 + info.positions
    valid_keys = (env * 100 + positions).tolist()
    assert set(keys.tolist()) == set(valid_keys)
    counts = torch.bincount(keys)[valid_keys]
    assert _chi_square(counts, priorities**0.6) < CHI2_CRITICAL_P001[7]
    assert _chi_square(counts, priorities) > CHI2_CRITICAL_P001[7]  # alpha matters
    # Sampling left the priorities as they were.
    assert _leaf_priorities(rb)[0].tolist()[2] == pytest.approx(head_priority**0.6)


def test_importance_weights_equal_the_formula():
    rb, env, positions, priorities = _prioritized_buffer(50.0)
    q = priorities.double() ** 0.6
    starts = zip(env.tolist(), positions.tolist(), (q / q.sum()).tolist(), strict=True)
    prob = {(e, p): v for e, p, v in starts}
    n = len(prob)
    for beta in (0.4, 1.0, 0.0):
        rb.priority_beta = beta
        assert rb.priority_beta == beta
        _, info = rb.get_batch(256, 2, generator=torch.Generator().manual_seed(3))
        p_i = torch.tensor(
            [prob[k] for k in zip(info.env_ids.tolist(), info.positions.tolist(), strict=True)],
            dtype=torch.float64,
        )
        w = (n * p_i) ** (-beta)
        expected = (w / w.max()).float()
        assert info.importance_weights.dtype == torch.float32
        assert torch.allclose(info.importance_weights, expected, rtol=1e-5)
        assert float(info.importance_weights.max()) == 1.0
    with pytest.raises(ReplayBufferError, match="priority_beta"):
        rb.priority_beta = -0.1


def test_new_steps_get_the_largest_priority_so_far():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=1, max_length=4, prioritized=True)
    _fill(rb, [2])
    assert _leaf_priorities(rb)[0].tolist() == [1.0, 1.0, 0.0, 0.0]
    rb.update_priority(torch.tensor([0, 0]), torch.tensor([0, 1]), torch.tensor([0.5, 0.25]))
    _fill(rb, [1])
    assert _leaf_priorities(rb)[0, 2].item() == 1.0  # the max starts at 1 and stays there
    rb.update_priority(torch.tensor([0]), torch.tensor([0]), torch.tensor([32.0]))
    _fill(rb, [2])  # step 4 overwrites step 0 in slot 0
    assert _leaf_priorities(rb)[0].tolist() == pytest.approx([32.0**0.6, 0.25**0.6, 1.0, 32.0**0.6])


def test_stale_priority_updates_are_ignored():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=5, prioritized=True)
    _fill(rb, [5, 5])
    _, info = rb.get_batch(64, 1, generator=torch.Generator().manual_seed(4))
    _fill(rb, [3, 0])  # env 0: steps 0, 1, 2 are overwritten by 5, 6, 7
    before = _leaf_priorities(rb).clone()
    applied = rb.update_priority(info.env_ids, info.positions, torch.full((64,), 9.0))
    stale = (info.env_ids == 0) & (info.positions < 3)
    assert 0 < int(stale.sum()) < 64
    assert applied == 64 - int(stale.sum())
    after = _leaf_priorities(rb)
    # The overwritten slots keep the new steps' priority.
    assert torch.equal(after[0, :3], before[0, :3])
    assert after[0, :3].tolist() == [1.0, 1.0, 1.0]
    fresh = set(zip(info.env_ids[~stale].tolist(), info.positions[~stale].tolist(), strict=True))
    for e, p in fresh:
        assert after[e, p % 5].item() == pytest.approx(9.0**0.6)
    # Positions never written or negative are ignored too.
    assert rb.update_priority([1, 1, 0], [5, -1, 8], [3.0, 3.0, 3.0]) == 0
    assert torch.equal(_leaf_priorities(rb), after)


def test_update_priority_errors():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=5, prioritized=True)
    _fill(rb, [2, 2])
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ReplayBufferError, match="finite and >= 0"):
            rb.update_priority([0, 1], [0, 0], [1.0, bad])
    with pytest.raises(ReplayBufferError, match="as many"):
        rb.update_priority([0, 1], [0], [1.0, 1.0])
    with pytest.raises(ReplayBufferError, match=r"env_ids must lie in \[0, 2\)"):
        rb.update_priority([2], [0], [1.0])
    uniform = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=5)
    with pytest.raises(ReplayBufferError, match="prioritized"):
        uniform.update_priority([0], [0], [1.0])


def test_all_valid_starts_with_priority_zero_is_an_error():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=1, max_length=5, prioritized=True)
    _fill(rb, [3])
    rb.update_priority([0, 0], [0, 1], [0.0, 0.0])
    with pytest.raises(ReplayBufferError, match="priority 0"):
        rb.get_batch(4, 2)
    _, info = rb.get_batch(50, 1)  # step 2 alone still has a priority
    assert info.positions.tolist() == [2] * 50


# ----------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("prioritized", [False, True])
def test_checkpoint_round_trip(tmp_path, prioritized):
    def make():
        return ReplayBuffer(
            data_spec=STEP_SPEC,
            num_envs=3,
            max_length=6,
            prioritized=prioritized,
            enable_checkpoint=True,
        )

    rb = make()
    assert rb.enable_checkpoint
    _fill(rb, [9, 4, 6])
    if prioritized:
        _, info = rb.get_batch(10, 2, generator=torch.Generator().manual_seed(0))
        rb.update_priority(info.env_ids, info.positions, torch.arange(10.0) + 0.5)
    path = tmp_path / "buffer.pt"
    torch.save(rb.checkpoint_state(), path)
    state = torch.load(path, weights_only=True)

    restored = make()
    restored.load_checkpoint_state(state)
    assert torch.equal(restored.positions, rb.positions)
    a, b = rb.checkpoint_state(), restored.checkpoint_state()
    assert a["max_priority"] == b["max_priority"] and a["spec"] == b["spec"]
    if prioritized:
        assert torch.equal(a["priorities"], b["priorities"])
    else:
        assert a["priorities"] is None and b["priorities"] is None
    for key in a["storage"]:
        assert torch.equal(a["storage"][key], b["storage"][key])
    for _ in range(2):
        _fill(rb, [1, 0, 2])
        _fill(restored, [1, 0, 2])
        for length in (1, 4):
            x, info_x = rb.get_batch(32, length, generator=torch.Generator().manual_seed(9))
            y, info_y = restored.get_batch(32, length, generator=torch.Generator().manual_seed(9))
            for u, v in zip(nest.flatten((x, info_x)), nest.flatten((y, info_y)), strict=True):
                assert torch.equal(u, v)


def test_loading_a_uniform_state_into_a_prioritized_buffer():
    uniform = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=4)
    _fill(uniform, [6, 1])
    prioritized = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=4, prioritized=True)
    prioritized.load_checkpoint_state(uniform.checkpoint_state())
    assert _leaf_priorities(prioritized).tolist() == [[1.0] * 4, [1.0, 0.0, 0.0, 0.0]]
    data, info = prioritized.get_batch(16, 3)
    _check_sequences(prioritized, data, info, 3)


def test_loading_a_mismatched_spec_names_each_field():
    rb = ReplayBuffer(data_spec=_experience_spec(), num_envs=2, max_length=4)
    rb.add_batch(_experience(2))
    state = rb.checkpoint_state()
    spec = _experience_spec(position_shape=(4,))
    spec = spec._replace(
        rollout_info={"entropy": TensorSpec(())}, reward=TensorSpec((), torch.float64)
    )
    other = ReplayBuffer(data_spec=spec, num_envs=2, max_length=4)
    with pytest.raises(ReplayBufferError) as excinfo:
        other.load_checkpoint_state(state)
    message = str(excinfo.value)
    assert "observation.position: saved shape (3,), dtype float32 vs expected shape (4,)" in message
    assert "reward: saved shape (), dtype float32 vs expected shape (), dtype float64" in message
    assert "rollout_info.entropy: missing from the saved data" in message
    assert "rollout_info.log_prob: extra field in the saved data" in message
    assert "step_type" not in message and "observation.goal.xy" not in message
    assert other.positions.tolist() == [0, 0]  # nothing was loaded

    for kwargs, text in [
        ({"num_envs": 3, "max_length": 4}, "num_envs: saved 2 vs expected 3"),
        ({"num_envs": 2, "max_length": 5}, "max_length: saved 4 vs expected 5"),
    ]:
        other = ReplayBuffer(data_spec=_experience_spec(), **kwargs)
        with pytest.raises(ReplayBufferError, match=text):
            other.load_checkpoint_state(state)
    with pytest.raises(ReplayBufferError, match="missing key"):
        rb.load_checkpoint_state({"num_envs": 2})


def test_describe_spec_and_spec_differences():
    description = describe_spec(_experience_spec())
    assert description[:3] == [
        ("step_type", (), "int32"),
        ("reward", (), "float32"),
        ("discount", (), "float32"),
    ]
    assert ("observation.goal.xy", (2,), "float32") in description
    assert ("rollout_info.log_prob", (), "float32") in description
    assert spec_differences(description, description) == []
    saved = [("a", (3,), "float32"), ("b", [2], "int64"), ("c", (), "bool")]
    expected = [("a", (3,), "float64"), ("b", (2,), "int64"), ("d", (1,), "float32")]
    assert spec_differences(saved, expected) == [
        "a: saved shape (3,), dtype float32 vs expected shape (3,), dtype float64",
        "d: missing from the saved data (expected shape (1,), dtype float32)",
        "c: extra field in the saved data (shape (), dtype bool), not in the expected spec",
    ]
    with pytest.raises(ReplayBufferError, match="'observation.position' must be a TensorSpec"):
        describe_spec({"observation": {"position": "3 floats"}})


# ----------------------------------------------------------------------- bad input


def test_add_batch_errors_name_the_field():
    rb = ReplayBuffer(data_spec=_experience_spec(), num_envs=2, max_length=4)
    good = _experience(2)
    with pytest.raises(ReplayBufferError, match=r"missing field\(s\) 'rollout_info.log_prob'"):
        rb.add_batch(good._replace(rollout_info={}))
    with pytest.raises(ReplayBufferError, match=r"unexpected field\(s\) 'rollout_info.value'"):
        rb.add_batch(
            good._replace(rollout_info={"log_prob": torch.zeros(2), "value": torch.zeros(2)})
        )
    obs = dict(good.observation, position=torch.zeros(2, 4))
    with pytest.raises(ReplayBufferError, match=r"'observation.position' has shape \(2, 4\)"):
        rb.add_batch(good._replace(observation=obs))
    with pytest.raises(ReplayBufferError, match=r"'reward' has shape \(3,\), expected \(2,\)"):
        rb.add_batch(good._replace(reward=torch.zeros(3)))
    with pytest.raises(ReplayBufferError, match="'action' has dtype float32, which cannot be"):
        rb.add_batch(good._replace(action=torch.zeros(2)))
    goal = {"xy": torch.zeros(2, 2), "id": torch.zeros(2)}
    with pytest.raises(ReplayBufferError, match="'observation.goal.id' has dtype float32"):
        rb.add_batch(good._replace(observation=dict(good.observation, goal=goal)))
    assert rb.positions.tolist() == [0, 0]  # nothing was written
    # Lossless conversions are accepted: float64 -> float32, int -> float.
    rb.add_batch(
        good._replace(
            reward=torch.ones(2, dtype=torch.float64), discount=torch.ones(2, dtype=torch.int64)
        )
    )
    data = rb.gather_all()
    assert data.reward.dtype == torch.float32 and data.reward.tolist() == [[1.0, 1.0]]


def test_env_ids_must_be_distinct_and_in_range():
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=3, max_length=4)
    with pytest.raises(ReplayBufferError, match="distinct"):
        rb.add_batch(_steps([1, 1], [0, 0]), env_ids=torch.tensor([1, 1]))
    with pytest.raises(ReplayBufferError, match=r"env_ids must lie in \[0, 3\)"):
        rb.add_batch(_steps([0, 3], [0, 0]), env_ids=torch.tensor([0, 3]))
    with pytest.raises(ReplayBufferError, match="env_ids must hold integers"):
        rb.add_batch(_steps([0], [0]), env_ids=torch.tensor([0.0]))
    with pytest.raises(ReplayBufferError, match=r"'env' has shape \(2,\), expected \(3,\)"):
        rb.add_batch(_steps([0, 1], [0, 0]))  # no env_ids: one row per env
    assert rb.positions.tolist() == [0, 0, 0]


def test_sampling_more_than_the_buffer_holds_is_a_clear_error():
    for prioritized in (False, True):
        rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=8, prioritized=prioritized)
        with pytest.raises(ReplayBufferError, match="holds at most 0 steps per environment"):
            rb.get_batch(4, 1)
        _fill(rb, [3, 2])
        message = (
            "ReplayBuffer holds at most 3 steps per environment; cannot sample sequences of 5 steps"
        )
        with pytest.raises(ReplayBufferError, match=message):
            rb.get_batch(4, 5)
        with pytest.raises(ReplayBufferError, match=r"batch_length must be in \[1, max_length=8\]"):
            rb.get_batch(4, 9)
        with pytest.raises(ReplayBufferError, match="batch_length"):
            rb.get_batch(4, 0)
        with pytest.raises(ReplayBufferError, match="batch_size"):
            rb.get_batch(0, 1)
        _, info = rb.get_batch(100, 3)  # only env 0 holds a sequence of 3
        assert info.env_ids.tolist() == [0] * 100 and info.positions.tolist() == [0] * 100


def test_bad_constructor_arguments():
    with pytest.raises(ReplayBufferError, match="num_envs"):
        ReplayBuffer(data_spec=STEP_SPEC, num_envs=0)
    with pytest.raises(ReplayBufferError, match="max_length"):
        ReplayBuffer(data_spec=STEP_SPEC, num_envs=1, max_length=0)
    with pytest.raises(ReplayBufferError, match="'observation' must be a TensorSpec"):
        ReplayBuffer(data_spec={"observation": "image"}, num_envs=1)
    with pytest.raises(ReplayBufferError, match="nothing to store"):
        ReplayBuffer(data_spec={}, num_envs=1)


# ----------------------------------------------------------------------- nests and lifecycle


@pytest.mark.parametrize("prioritized", [False, True])
def test_nested_dict_observations(prioritized):
    rb = ReplayBuffer(
        data_spec=_experience_spec(), num_envs=2, max_length=10, prioritized=prioritized
    )
    batches = [_experience(2, t) for t in range(6)]
    for b in batches:
        rb.add_batch(b)
    data, info = rb.get_batch(5, 3, generator=torch.Generator().manual_seed(0))
    assert isinstance(data, Experience) and set(data.observation) == {"position", "goal"}
    assert data.observation["position"].shape == (3, 5, 3)
    assert data.observation["goal"]["xy"].shape == (3, 5, 2)
    assert data.observation["goal"]["id"].dtype == torch.int64
    assert data.state == ()
    for i in range(5):
        env, start = int(info.env_ids[i]), int(info.positions[i])
        for t in range(3):
            source = batches[start + t]
            assert data.action[t, i] == start + t
            assert torch.equal(
                data.observation["goal"]["xy"][t, i], source.observation["goal"]["xy"][env]
            )
            assert data.rollout_info["log_prob"][t, i] == source.rollout_info["log_prob"][env]


@pytest.mark.parametrize("prioritized", [False, True])
def test_clear_forgets_everything(prioritized):
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2, max_length=4, prioritized=prioritized)
    _fill(rb, [6, 3])
    if prioritized:
        rb.update_priority([0], [5], [50.0])
    rb.clear()
    assert rb.positions.tolist() == [0, 0] and rb.total_size == 0
    with pytest.raises(ReplayBufferError, match="holds at most 0 steps"):
        rb.get_batch(1, 1)
    _fill(rb, [2, 2])
    assert rb.gather_all().step.tolist() == [[0, 0], [1, 1]]
    if prioritized:
        assert _leaf_priorities(rb).tolist() == [[1.0, 1.0, 0.0, 0.0]] * 2
        assert rb.checkpoint_state()["max_priority"] == 1.0


def test_replay_buffer_is_configurable():
    gin.bind_parameter("ReplayBuffer.max_length", 7)
    gin.bind_parameter("ReplayBuffer.prioritized", True)
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=2)
    assert rb.max_length == 7 and rb.prioritized


def test_overwrite_newest_marks_only_each_envs_newest_step():
    """After wrap-around and with envs out of step, only the newest held step of each
    env that holds any is changed; an unknown field is named in the error."""
    rb = ReplayBuffer(data_spec=STEP_SPEC, num_envs=3, max_length=4)
    _fill(rb, [6, 2, 0])
    rb.overwrite_newest("step", -1)
    data, _ = rb.get_batch(200, 1, generator=torch.Generator().manual_seed(0))
    env, step = data.env[0], data.step[0]
    assert bool(((env == 0) & (step == -1)).any()) and bool(((env == 1) & (step == -1)).any())
    held = {(int(e), int(s)) for e, s in zip(env, step, strict=True)}
    assert held <= {(0, 2), (0, 3), (0, 4), (0, -1), (1, 0), (1, -1)}
    with pytest.raises(ReplayBufferError, match="stepp"):
        rb.overwrite_newest("stepp", 0)
