"""Tests of the EnvPool backend: its specs and TimeSteps match the Gymnasium backend's."""

import importlib.util
import sys
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("envpool")

from alf import nest  # noqa: E402
from alf.data_structures import StepType  # noqa: E402
from alf.environments import create_environment  # noqa: E402
from alf.environments.envpool_environment import EnvPoolEnvironment  # noqa: E402

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST

SPEC_IDS = ["CartPole-v1", "Pendulum-v1"]
if importlib.util.find_spec("mujoco") is not None:
    SPEC_IDS.append("HalfCheetah-v5")


def _make(env_id: str = "CartPole-v1", num_envs: int = 4, **kwargs) -> EnvPoolEnvironment:
    return EnvPoolEnvironment(env_id=env_id, num_envs=num_envs, **kwargs)


@pytest.fixture
def cart_pole():
    env = _make(seed=0)
    yield env
    env.close()


@pytest.mark.parametrize("env_id", SPEC_IDS)
def test_specs_match_gymnasium_backend(env_id, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # EnvPool's MuJoCo writes MUJOCO_LOG.TXT into the cwd
    with _make(env_id, 2, seed=0) as env, create_environment(env_id, 2, seed=0) as gym_env:
        assert env.observation_spec() == gym_env.observation_spec()
        assert env.action_spec() == gym_env.action_spec()
        assert env.time_step_spec() == gym_env.time_step_spec()
        ts = env.reset()
        assert ts.observation.dtype == env.observation_spec().dtype
        assert ts.observation.shape == (2, *env.observation_spec().shape)


def test_no_space_precision_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _make(seed=0).close()


def test_reset_and_step_types(cart_pole):
    env = cart_pole
    assert env.batch_size == 4
    ts = env.reset()
    assert ts.step_type.dtype == torch.int32 and ts.step_type.tolist() == [FIRST] * 4
    assert ts.reward.dtype == torch.float32 and ts.reward.tolist() == [0.0] * 4
    assert ts.discount.dtype == torch.float32 and ts.discount.tolist() == [1.0] * 4
    assert ts.observation.shape == (4, 4) and ts.observation.dtype == torch.float32
    assert ts.prev_action.dtype == torch.int64 and not ts.prev_action.any()
    assert ts.env_id.dtype == torch.int64 and ts.env_id.tolist() == [0, 1, 2, 3]
    ts = env.step(torch.tensor([0, 1, 0, 1]))
    assert ts.step_type.dtype == torch.int32 and ts.step_type.tolist() == [MID] * 4
    assert ts.reward.dtype == torch.float32 and ts.reward.tolist() == [1.0] * 4
    assert ts.discount.dtype == torch.float32 and ts.discount.tolist() == [1.0] * 4
    assert ts.observation.shape == (4, 4) and ts.observation.dtype == torch.float32
    assert ts.prev_action.tolist() == [0, 1, 0, 1]
    assert ts.env_id.dtype == torch.int64 and ts.env_id.tolist() == [0, 1, 2, 3]


def test_observations_are_fresh_tensors(cart_pole):
    env = cart_pole
    first = env.reset().observation
    kept = first.clone()
    second = env.step(torch.ones(4, dtype=torch.int64)).observation
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, kept) and not torch.equal(first, second)


@pytest.mark.parametrize("num_threads", [1, 3])
def test_returned_tensors_are_never_overwritten(num_threads):
    # The wrapper's tensors are views of EnvPool's arrays: EnvPool must hand over a
    # fresh buffer with every batch, episode boundaries included.
    with _make(
        num_envs=6, seed=1, max_episode_steps=5, env_kwargs={"num_threads": num_threads}
    ) as env:
        kept = [env.reset()]
        copies = [kept[0].observation.clone()]
        for i in range(40):
            ts = env.step(torch.tensor([i % 2] * 6))
            kept.append(ts)
            copies.append(torch.cat([ts.observation, ts.reward[:, None]], dim=1))
        for ts, want in zip(kept[1:], copies[1:], strict=True):
            assert torch.equal(torch.cat([ts.observation, ts.reward[:, None]], dim=1), want)
        assert torch.equal(kept[0].observation, copies[0])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_direct_calls_give_what_envpools_send_and_recv_give(env_id):
    with (
        _make(env_id, 3, seed=2, max_episode_steps=5) as env,
        _make(env_id, 3, seed=2, max_episode_steps=5) as public,
    ):
        assert env._direct is not None  # the fast path is taken for these pools
        public._direct = None
        torch.manual_seed(0)
        for ts, want in [(env.reset(), public.reset())] + [
            (env.step(a), public.step(a))
            for a in [
                torch.randint(0, 2, (3,)) if env_id == "CartPole-v1" else 3 * torch.randn(3, 1)
                for _ in range(25)
            ]
        ]:
            for got, expected in zip(nest.flatten(ts), nest.flatten(want), strict=True):
                assert torch.equal(got, expected)
        assert env.num_clipped_actions == public.num_clipped_actions


def test_termination_then_first(cart_pole):
    env = cart_pole
    env.reset()
    push = torch.ones(4, dtype=torch.int64)  # always pushing right drops the pole quickly
    for _ in range(100):
        ts = env.step(push)
        if (ts.step_type == LAST).any():
            break
    last = ts.step_type == LAST
    assert last.any()
    assert ts.discount[last].tolist() == [0.0] * int(last.sum())
    assert ts.reward[last].tolist() == [1.0] * int(last.sum())
    ts = env.step(push)
    assert (ts.step_type[last] == FIRST).all()
    assert ts.reward[last].tolist() == [0.0] * int(last.sum())
    assert ts.discount[last].tolist() == [1.0] * int(last.sum())
    assert not ts.prev_action[last].any()
    assert (ts.prev_action[~last] == 1).all()
    assert (ts.step_type[~last] != FIRST).all()
    ts = env.step(push)
    assert (ts.step_type[last] == MID).all() and (ts.reward[last] == 1.0).all()


def test_truncation_then_first():
    with _make("Pendulum-v1", 2, seed=0, max_episode_steps=5) as env:
        env.reset()
        action = torch.zeros(2, 1)
        for _ in range(4):
            assert env.step(action).step_type.tolist() == [MID, MID]
        ts = env.step(action)
        assert ts.step_type.tolist() == [LAST, LAST]
        assert ts.discount.tolist() == [1.0, 1.0]
        assert (ts.reward != 0).all()
        ts = env.step(torch.ones(2, 1))
        assert ts.step_type.tolist() == [FIRST, FIRST]
        assert ts.reward.tolist() == [0.0, 0.0] and ts.discount.tolist() == [1.0, 1.0]
        assert not ts.prev_action.any()
        assert env.step(action).step_type.tolist() == [MID, MID]


def test_continuous_actions_are_clipped_and_counted():
    with _make("Pendulum-v1", 2, seed=0, max_episode_steps=2) as env:
        env.reset()
        ts = env.step(torch.tensor([[3.0], [-1.0]]))
        assert env.num_clipped_actions == 1
        assert ts.prev_action.tolist() == [[2.0], [-1.0]]
        ts = env.step(torch.tensor([[-5.0], [5.0]]))
        assert env.num_clipped_actions == 3
        assert ts.step_type.tolist() == [LAST, LAST]
        ts = env.step(torch.tensor([[3.0], [3.0]]))  # ignored by resetting envs: not counted
        assert env.num_clipped_actions == 3
        assert ts.step_type.tolist() == [FIRST, FIRST] and not ts.prev_action.any()


@pytest.mark.parametrize("bad", [[0, 2, 0, 1], [-1, 0, 0, 0]])
def test_discrete_action_out_of_range(cart_pole, bad):
    cart_pole.reset()
    with pytest.raises(ValueError, match="outside"):
        cart_pole.step(torch.tensor(bad))


def test_unsupported_id():
    with pytest.raises(ValueError, match="EnvPool does not support") as info:
        _make("NotAnEnv-v0")
    message = str(info.value)
    assert "'NotAnEnv-v0'" in message and "'sync'" in message and "'subprocess'" in message
    # Registered with Gymnasium but not implemented by EnvPool:
    with pytest.raises(ValueError, match="EnvPool does not support environment id 'Taxi-v4'"):
        create_environment("Taxi-v4", 2, vectorization_mode="envpool")


def test_missing_envpool(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(ImportError, match=r"pip install 'alf-rl\[envpool\]'"):
        _make()


def test_bad_arguments():
    with pytest.raises(ValueError, match="seed"):
        _make(env_kwargs={"seed": 3})
    with pytest.raises(ValueError, match="asynchronous"):
        _make(env_kwargs={"batch_size": 2})
    with pytest.raises(ValueError, match="int32"):
        _make(seed=2**40)


def test_create_environment():
    env = create_environment("CartPole-v1", 4, seed=0, vectorization_mode="envpool")
    with env:
        assert isinstance(env, EnvPoolEnvironment) and env.batch_size == 4
        assert env.reset().observation.shape == (4, 4)


def _rollout(env: EnvPoolEnvironment, steps: int = 30) -> list[torch.Tensor]:
    torch.manual_seed(1)
    obs = [env.reset().observation]
    for _ in range(steps):
        obs.append(env.step(torch.randint(0, 2, (env.batch_size,))).observation)
    return obs


def test_same_seed_same_observations():
    with _make(seed=7) as a, _make(seed=7) as b, _make(seed=8) as c:
        obs_a, obs_b, obs_c = _rollout(a), _rollout(b), _rollout(c)
    assert all(torch.equal(x, y) for x, y in zip(obs_a, obs_b, strict=True))
    assert not torch.equal(obs_a[0], obs_c[0])
    assert not torch.equal(obs_a[0][0], obs_a[0][1])  # each env has its own stream


def test_random_seed_when_none():
    with _make(seed=None) as a, _make(seed=None) as b:
        assert isinstance(a.seed, int) and a.seed != b.seed
        assert not torch.equal(a.reset().observation, b.reset().observation)


class _ReversedPool:
    """Forwards a pool, returning its rows (and ``info["env_id"]``) in reverse order."""

    def __init__(self, pool):
        self._pool = pool

    def __getattr__(self, name):
        return getattr(self._pool, name)

    def reset(self):
        obs, info = self._pool.reset()
        return obs[::-1], {**info, "env_id": info["env_id"][::-1]}

    def recv(self):  # (EnvPoolEnvironment.step is send + recv)
        *out, info = self._pool.recv()
        return (*(x[::-1] for x in out), {**info, "env_id": info["env_id"][::-1]})


def test_rows_reordered_by_env_id():
    with _make(seed=3) as ref, _make(seed=3) as env:
        env._env = _ReversedPool(env._env)
        action = torch.tensor([0, 1, 1, 0])
        assert torch.equal(env.reset().observation, ref.reset().observation)
        for _ in range(20):
            ts, ts_ref = env.step(action), ref.step(action)
            for got, want in zip(ts, ts_ref, strict=True):
                assert torch.equal(torch.as_tensor(got), torch.as_tensor(want))


def test_render():
    with _make(seed=0) as env:
        env.reset()
        with pytest.raises(NotImplementedError):
            env.render()
    with _make(num_envs=2, seed=0, env_kwargs={"render_mode": "rgb_array"}) as env:
        env.reset()
        frames = env.render()
        assert isinstance(frames, tuple) and len(frames) == 2
        assert frames[0].ndim == 3 and frames[0].dtype == np.uint8
