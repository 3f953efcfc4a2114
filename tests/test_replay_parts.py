"""Tests of the parts of replay: the samplers (each with its own checkpoint state), the
ReplayBuffer that composes storage and sampler, buffers saved before the split, and the
MixedReplay of online and offline buffers (readiness, offline_only, the mixed sample)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

from alf import nest
from alf.data_structures import BatchInfo, Experience
from alf.replay_buffers import ReplayBuffer, ReplayBufferError, replay_buffer
from alf.replay_buffers.mixed_replay import MixedReplay
from alf.replay_buffers.prioritized_sampler import PrioritizedSampler
from alf.replay_buffers.ring_storage import RingStorage
from alf.replay_buffers.sampler import Sampler, make_sampler
from alf.replay_buffers.sequence_sampler import UniformSampler
from alf.tensor_specs import TensorSpec

SPEC = {"obs": TensorSpec((2,), torch.float32), "step": TensorSpec((), torch.int64)}
OLD_BUFFERS = Path(__file__).with_name("data") / "replay_buffers_0267c55.pt"
"""Replay buffer states and seeded samples written by ``ReplayBuffer`` at commit 0267c55,
before the sampler had its own checkpoint state: a uniform and a prioritized buffer
(``priority_alpha=0.5``), 2 envs x 6 slots, 9 steps each, and ``get_batch(5, 2)`` with a
generator seeded 7."""


def _rows(t: int, num_envs: int = 2) -> dict[str, torch.Tensor]:
    offsets = torch.arange(num_envs, dtype=torch.float32).unsqueeze(1) / 2
    return {
        "obs": torch.full((num_envs, 2), float(t)) + offsets,
        "step": torch.full((num_envs,), t),
    }


def _filled(prioritized: bool, steps: int = 9, **kwargs: Any) -> ReplayBuffer:
    rb = ReplayBuffer(data_spec=SPEC, num_envs=2, max_length=6, prioritized=prioritized, **kwargs)
    for t in range(steps):
        rb.add_batch(_rows(t))
    return rb


def _equal_states(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            if not _equal_states(x, y):
                return False
        elif torch.is_tensor(x):
            if not (torch.is_tensor(y) and x.dtype == y.dtype and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True


# ------------------------------------------------------------------- the samplers


def _storage_with_steps(steps: int = 9) -> RingStorage:
    storage = RingStorage(data_spec=SPEC, num_envs=2, max_length=6)
    for t in range(steps):
        storage.append(_rows(t))
    return storage


def test_make_sampler_gives_a_sampler_of_each_kind() -> None:
    storage = _storage_with_steps(0)
    uniform = make_sampler(storage=storage, prioritized=False, priority_alpha=0.6)
    prioritized = make_sampler(storage=storage, prioritized=True, priority_alpha=0.6)
    assert isinstance(uniform, UniformSampler) and not uniform.prioritized
    assert isinstance(prioritized, PrioritizedSampler) and prioritized.prioritized
    assert isinstance(uniform, Sampler) and isinstance(prioritized, Sampler)


def test_uniform_sampler_state_round_trip() -> None:
    storage = _storage_with_steps()
    sampler = UniformSampler(storage=storage)
    state = sampler.checkpoint_state()
    assert state == {"max_priority": 1.0, "priorities": None}
    other = UniformSampler(storage=storage)
    other.load_checkpoint_state(state, positions=storage.positions)
    assert other.checkpoint_state() == state
    draws = [
        s.sample(batch_size=8, batch_length=2, beta=0.4, generator=torch.Generator().manual_seed(3))
        for s in (sampler, other)
    ]
    for x, y in zip(draws[0], draws[1], strict=True):
        assert torch.equal(x, y)
    assert torch.equal(draws[0][2], torch.ones(8))


def test_prioritized_sampler_state_round_trip() -> None:
    storage = _storage_with_steps(0)
    sampler = PrioritizedSampler(storage=storage, priority_alpha=0.5)
    for t in range(9):
        sampler.record_new(storage.append(_rows(t)))
    applied = sampler.update_priority(
        torch.tensor([0, 1, 1]), torch.tensor([5, 6, 8]), torch.tensor([4.0, 0.5, 9.0])
    )
    assert applied == 3
    state = sampler.checkpoint_state()
    assert set(state) == {"max_priority", "priorities"} and state["max_priority"] == 9.0

    other = PrioritizedSampler(storage=storage, priority_alpha=0.5)
    other.load_checkpoint_state(state, positions=storage.positions)
    assert _equal_states(other.checkpoint_state(), state)
    draws = [
        s.sample(
            batch_size=16, batch_length=2, beta=0.4, generator=torch.Generator().manual_seed(5)
        )
        for s in (sampler, other)
    ]
    for x, y in zip(draws[0], draws[1], strict=True):
        assert torch.equal(x, y)


def test_prioritized_sampler_refuses_bad_priorities_and_changes_nothing() -> None:
    storage = _storage_with_steps(0)
    sampler = PrioritizedSampler(storage=storage, priority_alpha=0.5)
    sampler.record_new(storage.append(_rows(0)))
    before = sampler.checkpoint_state()
    bad = {"max_priority": 2.0, "priorities": torch.zeros(3)}
    with pytest.raises(ReplayBufferError, match="saved priorities"):
        sampler.load_checkpoint_state(bad, positions=storage.positions)
    assert _equal_states(sampler.checkpoint_state(), before)


def test_uniform_sampler_refuses_priority_updates() -> None:
    sampler = UniformSampler(storage=_storage_with_steps())
    with pytest.raises(ReplayBufferError, match="prioritized=True"):
        sampler.update_priority(torch.tensor([0]), torch.tensor([4]), torch.tensor([1.0]))


# ------------------------------------------------------------ the composed buffer


def _sampler_none_checks(source: str) -> list[str]:
    """``x is None`` / ``x is not None`` comparisons whose ``x`` names a sampler."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            continue
        text = ast.unparse(node)
        if "sampler" in text and "None" in text:
            found.append(text)
    return found


def test_replay_buffer_has_no_none_branch_on_its_sampler() -> None:
    source = inspect.getsource(replay_buffer)
    assert _sampler_none_checks(source) == []
    assert _sampler_none_checks("if self._sampler is None:\n    pass\n")  # the check works


@pytest.mark.parametrize("prioritized", [False, True])
def test_every_sampler_kind_goes_through_the_same_buffer_code(
    prioritized: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rb = _filled(prioritized)
    sampler = rb.sampler
    assert isinstance(sampler, Sampler) and sampler.prioritized == rb.prioritized == prioritized
    calls: list[str] = []
    for name in ("record_new", "sample", "clear", "checkpoint_state", "load_checkpoint_state"):
        original = getattr(sampler, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kw)

        monkeypatch.setattr(sampler, name, spy)
    rb.add_batch(_rows(9))
    rb.get_batch(4, 2)
    state = rb.checkpoint_state()
    rb.load_checkpoint_state(state)
    rb.clear()
    assert calls == ["record_new", "sample", "checkpoint_state", "load_checkpoint_state", "clear"]


@pytest.mark.parametrize("prioritized", [False, True])
def test_buffer_checkpoint_keeps_its_keys(prioritized: bool) -> None:
    state = _filled(prioritized).checkpoint_state()
    assert list(state) == [
        "version",
        "num_envs",
        "max_length",
        "spec",
        "positions",
        "storage",
        "prioritized",
        "priority_alpha",
        "max_priority",
        "priorities",
    ]
    assert state["prioritized"] is prioritized and (state["priorities"] is None) != prioritized


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_a_buffer_saved_before_the_split_loads_and_samples_the_same(kind: str) -> None:
    saved = torch.load(OLD_BUFFERS, weights_only=True)[kind]
    state, sample = saved["state"], saved["sample"]
    rb = ReplayBuffer(
        data_spec=SPEC,
        num_envs=2,
        max_length=6,
        prioritized=kind == "prioritized",
        priority_alpha=0.5,
    )
    rb.load_checkpoint_state(state)
    assert _equal_states(rb.checkpoint_state(), state)
    data, info = rb.get_batch(5, 2, generator=torch.Generator().manual_seed(7))
    assert torch.equal(info.env_ids, sample["env_ids"])
    assert torch.equal(info.positions, sample["positions"])
    assert torch.equal(info.importance_weights, sample["importance_weights"])
    for x, y in zip(nest.flatten(data), nest.flatten(sample["data"]), strict=True):
        assert torch.equal(x, y)


def test_an_old_uniform_buffer_loads_into_a_prioritized_one() -> None:
    state = torch.load(OLD_BUFFERS, weights_only=True)["uniform"]["state"]
    rb = ReplayBuffer(data_spec=SPEC, num_envs=2, max_length=6, prioritized=True)
    rb.load_checkpoint_state(state)
    assert torch.equal(rb.checkpoint_state()["priorities"], torch.ones(12, dtype=torch.float64))


# -------------------------------------------------------------- the mixed replay


def test_online_only_replay_waits_for_initial_collect_steps() -> None:
    replay = MixedReplay(online=_filled(False, steps=3))  # 2 envs x 3 steps
    assert not replay.offline_only and replay.offline == () and replay.offline_fraction == 0.0
    assert replay.is_ready(6) and not replay.is_ready(7)
    assert replay.can_sample(3) and not replay.can_sample(4)
    assert replay.split(8) == (8, 0)


def test_offline_only_is_decided_at_construction() -> None:
    empty = ReplayBuffer(data_spec=SPEC, num_envs=2, max_length=6)
    offline = [_filled(False)]
    only = MixedReplay(online=empty, offline=offline, offline_fraction=1.0)
    assert only.offline_only
    assert only.is_ready(10**9) and only.can_sample(5)  # no collected step needed
    assert only.split(8) == (0, 8)
    mixed = MixedReplay(online=empty, offline=offline, offline_fraction=0.5)
    assert not mixed.offline_only and not mixed.is_ready(1) and not mixed.can_sample(2)
    assert mixed.split(7) == (3, 4)


@pytest.mark.parametrize(
    ("offline", "fraction"), [(True, 0.0), (True, 1.5), (True, -0.1), (False, 0.5)]
)
def test_mixed_replay_refuses_a_bad_fraction(offline: bool, fraction: float) -> None:
    buffers = [_filled(False)] if offline else []
    with pytest.raises(ValueError, match="offline fraction"):
        MixedReplay(online=_filled(False), offline=buffers, offline_fraction=fraction)


def _reference_mixed_sample(
    online: ReplayBuffer, offline: list[ReplayBuffer], fraction: float, size: int, length: int
) -> tuple[list[torch.Tensor], BatchInfo]:
    """The draws of OffPolicyAlgorithm.sample_batch before MixedReplay, in their order."""
    num_offline = round(fraction * size)
    num_online = size - num_offline
    batch, info = online.get_batch(num_online, length)
    sizes = torch.tensor([float(b.total_size) for b in offline])
    counts = torch.bincount(
        torch.multinomial(sizes, num_offline, replacement=True), minlength=len(sizes)
    ).tolist()
    parts = [batch] + [
        b.get_batch(c, length)[0] for b, c in zip(offline, counts, strict=True) if c > 0
    ]
    leaves = [torch.cat(xs, dim=1) for xs in zip(*(nest.flatten(p) for p in parts), strict=True)]
    return leaves, info


def test_mixed_sample_draws_as_before_online_first() -> None:
    online = _filled(True)
    offline = [_filled(False, steps=4), _filled(False, steps=7)]
    replay = MixedReplay(online=online, offline=offline, offline_fraction=0.5)
    torch.manual_seed(11)
    batch, info, num_online = replay.sample(9, 2)
    torch.manual_seed(11)
    expected, online_info = _reference_mixed_sample(online, offline, 0.5, 9, 2)
    assert num_online == 5 and info.env_ids.shape == (9,)
    for x, y in zip(nest.flatten(batch), expected, strict=True):
        assert torch.equal(x, y)
    assert torch.equal(info.env_ids[:5], online_info.env_ids)
    assert torch.equal(info.positions[5:], torch.full((4,), -1))
    assert torch.equal(info.importance_weights[5:], torch.ones(4))


def test_update_priority_touches_only_online_prioritized_sequences() -> None:
    online = _filled(True)
    replay = MixedReplay(online=online, offline=[_filled(False)], offline_fraction=0.5)
    _, info, num_online = replay.sample(4, 2)
    before = online.checkpoint_state()["priorities"].clone()
    replay.update_priority(info, torch.full((4,), 7.0), num_online)
    assert online.checkpoint_state()["max_priority"] == 7.0
    assert not torch.equal(online.checkpoint_state()["priorities"], before)
    replay.update_priority(info, torch.full((4,), 9.0), 0)  # no online rows: nothing
    assert online.checkpoint_state()["max_priority"] == 7.0
    uniform = MixedReplay(online=_filled(False))
    _, info, num_online = uniform.sample(4, 2)
    uniform.update_priority(info, torch.ones(4), num_online)  # uniform: nothing, no error


def test_add_stores_rows_of_new_steps() -> None:
    spec = Experience(
        step_type=TensorSpec((), torch.int32),
        reward=TensorSpec(()),
        discount=TensorSpec(()),
        observation=TensorSpec((2,)),
        prev_action=TensorSpec((), torch.int64),
        env_id=TensorSpec((), torch.int64),
        action=TensorSpec((), torch.int64),
    )
    replay = MixedReplay(online=ReplayBuffer(data_spec=spec, num_envs=3, max_length=5))
    steps = Experience(
        step_type=torch.ones(4, 2, dtype=torch.int32),
        reward=torch.arange(8.0).view(4, 2),
        discount=torch.ones(4, 2),
        observation=torch.zeros(4, 2, 2),
        prev_action=torch.zeros(4, 2, dtype=torch.int64),
        env_id=torch.tensor([2, 0]).expand(4, 2),
        action=torch.zeros(4, 2, dtype=torch.int64),
        batch_info=BatchInfo(torch.zeros(2), torch.zeros(2), torch.ones(2)),
    )
    replay.add(steps)
    assert replay.online.num_steps().tolist() == [4, 0, 4]
    assert replay.is_ready(8) and not replay.is_ready(9)
