"""Datasets in Minari's format (:mod:`alf.datasets`): writing and reading them back in the
``[T+1, B]`` experience layout, datasets made by Minari's own ``DataCollector``, and bad
input (spaces that differ, NaN, missing and half-written datasets), each one line naming
the dataset and the culprit; the memory a loaded dataset takes."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("minari")

from alf import config as alf_config  # noqa: E402
from alf.algorithms.dqn import DqnAlgorithm  # noqa: E402
from alf.algorithms.sac import SacAlgorithm  # noqa: E402
from alf.data_structures import Experience, StepType  # noqa: E402
from alf.datasets import (  # noqa: E402
    DatasetError,
    DatasetWriter,
    Episode,
    load_dataset,
    read_episodes,
    read_info,
)
from alf.replay_buffers import DatasetBuffer, MixedReplay, ReplayBuffer  # noqa: E402
from alf.tensor_specs import BoundedTensorSpec, TensorSpec, from_gym_space  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "tests" / "data" / "datasets" / "pendulum-sac-v0"
PENDULUM = gym.make("Pendulum-v1")
OBS_SPEC = from_gym_space(PENDULUM.observation_space)
ACTION_SPEC = from_gym_space(PENDULUM.action_space)


@pytest.fixture(scope="module")
def sac_spec() -> Experience:
    torch.manual_seed(0)
    sac = SacAlgorithm(observation_spec=OBS_SPEC, action_spec=ACTION_SPEC)
    return sac.experience_spec()


def _episode(rng: np.random.Generator, length: int, *, terminated: bool) -> Episode:
    terminations = np.zeros(length, dtype=bool)
    truncations = np.zeros(length, dtype=bool)
    (terminations if terminated else truncations)[-1] = True
    return Episode(
        observations=rng.uniform(-1, 1, (length + 1, 3)).astype(np.float32),
        actions=rng.uniform(-2, 2, (length, 1)).astype(np.float32),
        rewards=rng.standard_normal(length).astype(np.float32),
        terminations=terminations,
        truncations=truncations,
    )


def _write(out: Path, episodes: list[Episode], **references: float) -> None:
    with DatasetWriter(
        out=str(out),
        observation_space=PENDULUM.observation_space,
        action_space=PENDULUM.action_space,
        env_spec=PENDULUM.spec,
    ) as writer:
        for episode in episodes:
            writer.add_episode(episode)
        writer.commit(made_by={"source": "test"}, **references)


def _load(name: Path | str, spec: Experience, obs_spec=OBS_SPEC, action_spec=ACTION_SPEC):
    return load_dataset(
        str(name), data_spec=spec, observation_spec=obs_spec, action_spec=action_spec
    )


def test_round_trip_in_the_experience_layout(tmp_path, sac_spec):
    rng = np.random.default_rng(0)
    episodes = [_episode(rng, 5, terminated=True), _episode(rng, 3, terminated=False)]
    _write(tmp_path / "ds", episodes, random_return=-1200.0, expert_return=-150.0)
    assert not list(tmp_path.glob("ds.tmp-*"))  # renamed when complete
    info = read_info(str(tmp_path / "ds"))
    assert (info.total_episodes, info.total_steps, info.env_id) == (2, 8, "Pendulum-v1")
    assert (info.random_return, info.expert_return) == (-1200.0, -150.0)
    assert info.normalized_score(-150.0) == 100.0 and info.made_by == {"source": "test"}
    for read, written in zip(read_episodes(info), episodes, strict=True):
        np.testing.assert_array_equal(read.observations, written.observations)
        np.testing.assert_array_equal(read.terminations, written.terminations)

    loaded = _load(tmp_path / "ds", sac_spec)
    exp = loaded.buffer.experience()
    assert exp.step_type.shape == (10, 1)  # 5 + 1 and 3 + 1 rows
    first, mid, last = StepType.FIRST, StepType.MID, StepType.LAST
    assert exp.step_type[:, 0].tolist() == [first, mid, mid, mid, mid, last, first, mid, mid, last]
    assert exp.discount[:, 0].tolist() == [1, 1, 1, 1, 1, 0, 1, 1, 1, 1]  # terminated; cut
    np.testing.assert_allclose(exp.observation[:6, 0], episodes[0].observations)
    np.testing.assert_allclose(exp.reward[1:6, 0], episodes[0].rewards)  # on arrival
    assert exp.reward[0, 0] == 0 and exp.reward[6, 0] == 0
    np.testing.assert_allclose(exp.action[:5, 0], episodes[0].actions)
    np.testing.assert_allclose(exp.prev_action[1:6, 0], episodes[0].actions)
    assert exp.prev_action[0, 0].item() == 0 and exp.prev_action[6, 0].item() == 0
    assert exp.env_id.dtype == sac_spec.env_id.dtype and exp.step_type.dtype == torch.int32
    batch, info_ = loaded.buffer.get_batch(16, 2)
    assert batch.observation.shape == (2, 16, 3) and info_.positions.max() <= 8
    # Minari reads what ALF wrote, with its normalised score.
    import minari

    dataset = minari.MinariDataset(str(tmp_path / "ds" / "data"))
    assert dataset.total_episodes == 2 and dataset.total_steps == 8
    assert minari.get_normalized_score(dataset, np.array([-150.0]))[0] == 1.0


# Three random CartPole-v1 episodes (44 steps) written by Minari 0.5.4's own
# DataCollector (``minari.DataCollector(...).create_dataset(dataset_id=
# "test/cartpole-random-v0", ...)``), committed so that CI needs no JAX, which the
# DataCollector imports.
COLLECTED = Path(__file__).parent / "data" / "datasets" / "minari-collector"


def _check_collected(dataset_id: str, total_steps: int, total_episodes: int) -> None:
    cartpole = gym.make("CartPole-v1")
    obs_spec = from_gym_space(cartpole.observation_space)
    action_spec = from_gym_space(cartpole.action_space)
    torch.manual_seed(0)
    dqn_spec = DqnAlgorithm(observation_spec=obs_spec, action_spec=action_spec).experience_spec()
    loaded = _load(dataset_id, dqn_spec, obs_spec, action_spec)  # a Minari id
    exp = loaded.buffer.experience()
    assert loaded.info.total_steps == total_steps
    assert int((exp.step_type == StepType.LAST).sum()) == total_episodes
    lasts = exp.step_type[:, 0] == StepType.LAST
    assert exp.discount[:, 0][lasts].tolist() == [0.0] * int(lasts.sum())  # all terminated
    assert exp.action.dtype == torch.int64 and exp.action.shape == (exp.step_type.shape[0], 1)


def test_a_committed_dataset_of_minaris_data_collector_loads_by_its_id(monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(COLLECTED))
    _check_collected("test/cartpole-random-v0", total_steps=44, total_episodes=3)


def test_a_dataset_made_by_minaris_data_collector_loads(tmp_path, monkeypatch):
    pytest.importorskip("jax")  # (Minari's DataCollector needs it; CI reads the committed one)
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = minari.DataCollector(gym.make("CartPole-v1"))
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(3):
        while True:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
                break
    dataset = env.create_dataset(
        dataset_id="test/cartpole-random-v0",
        algorithm_name="random",
        author="ALF tests",
        author_email="none@example.com",
        code_permalink="https://example.com",
        description="random CartPole episodes",
        eval_env="CartPole-v1",
    )
    _check_collected("test/cartpole-random-v0", dataset.total_steps, dataset.total_episodes)


def test_spaces_that_differ_are_one_line_naming_the_field(tmp_path, sac_spec):
    _write(tmp_path / "ds", [_episode(np.random.default_rng(0), 4, terminated=False)])
    car = gym.make("MountainCarContinuous-v0")
    with pytest.raises(DatasetError) as info:
        _load(tmp_path / "ds", sac_spec, from_gym_space(car.observation_space))
    message = str(info.value)
    assert "\n" not in message and f"dataset '{tmp_path / 'ds'}'" in message
    assert "observation has shape (3,), the run's has (2,)" in message
    wide = BoundedTensorSpec(shape=(1,), dtype=torch.float32, minimum=-1.0, maximum=1.0)
    with pytest.raises(DatasetError, match=r"action has minimum \[-2.0\], the run's has"):
        _load(tmp_path / "ds", sac_spec, action_spec=wide)


def test_nan_entries_name_the_field_and_the_episode(tmp_path, sac_spec):
    rng = np.random.default_rng(0)
    bad = _episode(rng, 4, terminated=False)
    bad.observations[2, 1] = np.nan
    _write(tmp_path / "ds", [_episode(rng, 3, terminated=True), bad])
    with pytest.raises(DatasetError) as info:
        _load(tmp_path / "ds", sac_spec)
    assert "episode 1 holds a NaN or infinite value in 'observations' (at step 2)" in str(
        info.value
    )


def test_missing_and_half_written_datasets_are_one_line(tmp_path, sac_spec, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    with pytest.raises(DatasetError, match="not found: no such directory"):
        _load(tmp_path / "nowhere", sac_spec)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="incomplete or not a dataset"):
        _load(tmp_path / "empty", sac_spec)
    rng = np.random.default_rng(0)
    _write(tmp_path / "ds", [_episode(rng, 200, terminated=False) for _ in range(4)])
    data_file = tmp_path / "ds" / "data" / "main_data.hdf5"
    data = data_file.read_bytes()
    data_file.write_bytes(data[: len(data) // 2])  # a truncated data file
    with pytest.raises(DatasetError) as info:
        _load(tmp_path / "ds", sac_spec)
    assert "truncated or half-written" in str(info.value) and "\n" not in str(info.value)
    data_file.unlink()  # metadata without its data file
    with pytest.raises(DatasetError, match="has metadata but no data file"):
        _load(tmp_path / "ds", sac_spec)


def test_the_writer_never_leaves_a_dataset_that_looks_complete(tmp_path):
    out = tmp_path / "ds"
    with pytest.raises(RuntimeError, match="killed"):
        with DatasetWriter(
            out=str(out),
            observation_space=PENDULUM.observation_space,
            action_space=PENDULUM.action_space,
        ) as writer:
            writer.add_episode(_episode(np.random.default_rng(0), 3, terminated=True))
            raise RuntimeError("killed")
    assert not out.exists() and not list(tmp_path.iterdir())
    _write(out, [_episode(np.random.default_rng(0), 3, terminated=True)])
    before = sorted((p.name, p.stat().st_size) for p in (out / "data").iterdir())
    with pytest.raises(DatasetError, match="never overwritten"):
        _write(out, [_episode(np.random.default_rng(1), 3, terminated=True)])
    assert sorted((p.name, p.stat().st_size) for p in (out / "data").iterdir()) == before
    # A temporary folder of a writer that died is neither read nor kept.
    stale = tmp_path / "other.tmp-999999999"
    (stale / "data").mkdir(parents=True)
    with pytest.raises(DatasetError, match="not found"):
        read_info(str(tmp_path / "other"))
    _write(tmp_path / "other", [_episode(np.random.default_rng(0), 3, terminated=True)])
    assert not stale.exists()


def test_a_field_zeros_do_not_fit_is_refused(tmp_path, sac_spec):
    _write(tmp_path / "ds", [_episode(np.random.default_rng(0), 3, terminated=True)])
    needs = BoundedTensorSpec(shape=(), dtype=torch.float32, minimum=1.0, maximum=2.0)
    spec = sac_spec._replace(rollout_info={"log_prob": needs})
    with pytest.raises(DatasetError, match="'rollout_info.log_prob' is not in datasets"):
        _load(tmp_path / "ds", spec)
    spec = sac_spec._replace(rollout_info={"value": TensorSpec(())})  # zeros fit
    exp = _load(tmp_path / "ds", spec).buffer.experience()
    assert exp.rollout_info["value"].shape == (4, 1) and not exp.rollout_info["value"].any()


def test_memory_of_a_loaded_dataset_is_about_its_raw_size(sac_spec):
    loaded = _load(COMMITTED, sac_spec)
    assert loaded.info.total_steps == 10_000 and loaded.info.has_references
    ratio = loaded.buffer.nbytes / loaded.raw_nbytes
    assert ratio <= 1.5, ratio  # 1.00: see benchmarks/README.md for 1M transitions
    assert loaded.buffer.total_size == loaded.info.total_steps + loaded.info.total_episodes


def test_a_dataset_buffer_mixes_with_an_online_buffer(sac_spec):
    data = DatasetBuffer(data_spec=sac_spec, num_rows=7)
    data.add_episode(
        observation=torch.ones(7, 3),
        action=torch.full((6, 1), 0.5),
        reward=torch.arange(6.0),
        terminated=True,
    )
    online = ReplayBuffer(data_spec=sac_spec, num_envs=1, max_length=10)
    replay = MixedReplay(online=online, offline=[data], offline_fraction=1.0)
    assert replay.offline_only and replay.can_sample(3)
    batch, info, num_online = replay.sample(8, 3)
    assert num_online == 0 and batch.observation.shape == (3, 8, 3)
    assert (info.env_ids == -1).all() and batch.discount.dtype == torch.float32


def _buffer_state(step_types: list[list[int]], discounts: list[list[float]]) -> dict:
    """A replay buffer's state: environment e holds rows with these step types."""
    spec = Experience(
        step_type=TensorSpec((), torch.int32),
        reward=TensorSpec(()),
        discount=TensorSpec(()),
        observation=TensorSpec((1,)),
        prev_action=TensorSpec((1,)),
        env_id=TensorSpec((), torch.int64),
        action=TensorSpec((1,)),
    )
    buffer = ReplayBuffer(data_spec=spec, num_envs=len(step_types), max_length=8)
    for t in range(len(step_types[0])):
        n = len(step_types)
        buffer.add_batch(
            Experience(
                step_type=torch.tensor([s[t] for s in step_types], dtype=torch.int32),
                reward=torch.full((n,), float(t)),
                discount=torch.tensor([d[t] for d in discounts]),
                observation=torch.tensor([[100.0 * e + t] for e in range(n)]),
                prev_action=torch.zeros(n, 1),
                env_id=torch.arange(n),
                action=torch.tensor([[10.0 * e + t] for e in range(n)]),
            )
        )
    return buffer.checkpoint_state()


def test_replay_buffer_episodes_are_the_first_steps_stored():
    from alf.trainers.dataset_maker import replay_buffer_episodes

    f, m, last = StepType.FIRST, StepType.MID, StepType.LAST
    # Env 0: an episode ending in a termination, then one still running; env 1: one
    # truncated episode, then a new one. 10 rows in rings of 8: the first 2 are gone.
    rows = [[f, m, m, m, last, f, m, m, m, m], [f, m, m, last, f, m, m, m, last, f]]
    ones = [1.0] * 10
    discounts = [[*ones[:4], 0.0, *ones[5:]], ones]
    state = _buffer_state(rows, discounts)
    spec = TensorSpec((1,))
    episodes = replay_buffer_episodes(state, observation_spec=spec, action_spec=spec)
    # Held rows 2..9: env 0 starts mid-episode (left out) until its FIRST at row 5.
    assert [(e.observations[0, 0], e.length) for e in episodes] == [(5.0, 4), (104.0, 4)]
    assert not episodes[0].terminations.any() and episodes[0].truncations[-1]  # cut
    assert episodes[1].actions[:, 0].tolist() == [14.0, 15.0, 16.0, 17.0]
    assert episodes[1].rewards.tolist() == [5.0, 6.0, 7.0, 8.0]  # received on arrival
    # The first 5 transitions stored, by position then environment: rows 4..6 of env 1
    # (positions 4, 5, 6) and rows 5..6 of env 0 (positions 5, 6).
    first = replay_buffer_episodes(state, observation_spec=spec, action_spec=spec, num_steps=5)
    assert sorted((e.observations[0, 0], e.length) for e in first) == [(5.0, 2), (104.0, 3)]


def test_played_episodes_and_noise():
    from alf.environments import create_environment
    from alf.trainers import dataset_maker as maker

    alf_config.load_config(None, [])
    env = create_environment(env_name="CartPole-v1", num_parallel_environments=1, seed=0)
    try:
        torch.manual_seed(0)
        choose = maker.random_chooser(env.action_spec())
        episodes = list(maker.play_episodes(env, choose, num_steps=30))
        assert sum(e.length for e in episodes) == 30
        assert all(e.terminations[-1] or e.truncations[-1] for e in episodes)
        capped = list(maker.play_episodes(env, choose, num_episodes=2, max_episode_steps=3))
        assert [e.length for e in capped] == [3, 3] and all(e.truncations[-1] for e in capped)
    finally:
        env.close()
    generator = torch.Generator().manual_seed(0)
    discrete = BoundedTensorSpec(shape=(), dtype=torch.int64, minimum=0, maximum=4)

    def zeros(time_step, state):  # noqa: ANN001, ANN202
        return torch.zeros(1000, dtype=torch.int64), state

    noisy = maker.add_noise(zeros, discrete, 0.5, generator)
    actions, _ = noisy(None, None)
    changed = float((actions != 0).float().mean())
    assert 0.3 < changed < 0.5 and actions.max() <= 4  # 0.5 * 4/5 replaced by another value
    box = BoundedTensorSpec(shape=(1,), dtype=torch.float32, minimum=-2.0, maximum=2.0)

    def edge(time_step, state):  # noqa: ANN001, ANN202
        return torch.full((1000, 1), 2.0), state

    actions, _ = maker.add_noise(edge, box, 0.5, generator)(None, None)
    assert actions.max() <= 2.0 and actions.min() >= -2.0 and actions.std() > 0.3
